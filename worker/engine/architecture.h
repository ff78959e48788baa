// Architectures as data. An Architecture names a `model_type` and says what
// each weight is called in the checkpoint; its config.json is read by the
// family's parser in worker/checkpoint/model_config.h (one Architecture per
// registered ModelFamily, in the same order). Every architecture is listed
// once in Architectures(); tests loop over that table.
//
// BindTensors() matches a checkpoint's tensors against what the architecture
// and its config expect: every expected tensor present with the expected shape
// and a supported dtype, nothing unexpected (persisted rotary tables and other
// named buffers excepted).
//
// libtorch-free. Architectures are immutable statics, safe to share between
// threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/engine/model_config.h"

namespace nightshift::engine {

// The weights of one decoder block, by role. Which are present depends on the
// ModelConfig flags (see ExpectedLayerWeights).
enum class LayerWeight {
  kAttnNorm,
  kAttnNormBias,
  kQ,
  kQBias,
  kK,
  kKBias,
  kV,
  kVBias,
  kQkv,  // fused q/k/v (QkvLayout::kFusedBlocks or kFusedPerHead)
  kQkvBias,
  kO,
  kOBias,
  kQNorm,  // qk_norm
  kKNorm,
  kMlpNorm,
  kMlpNormBias,
  kGate,
  kGateBias,
  kUp,
  kUpBias,
  kGateUp,  // MlpKind::kGatedFused
  kDown,
  kDownBias,
  // A sparse layer's (ModelConfig::IsSparseLayer): in place of the dense MLP,
  // the router [experts, hidden], and Qwen2-MoE's shared expert (a gated MLP)
  // with its gate [1, hidden]. The experts themselves are LayerTensors::experts.
  kRouter,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,
  kCount,
};
inline constexpr size_t kLayerWeightCount = static_cast<size_t>(LayerWeight::kCount);

// A stable lower-case name for messages and tests ("q_bias").
const char* LayerWeightName(LayerWeight weight);

// The three matrices of one expert of a sparse layer: gate and up
// [expert_intermediate_size, hidden], down [hidden, expert_intermediate_size].
enum class ExpertWeight { kGate, kUp, kDown, kCount };
inline constexpr size_t kExpertWeightCount = static_cast<size_t>(ExpertWeight::kCount);

// What the tensors of an architecture are called.
struct TensorNames {
  std::string embedding;        // "model.embed_tokens.weight"
  std::string final_norm;       // "model.norm.weight"
  std::string final_norm_bias;  // LayerNorm families only
  std::string lm_head;          // "lm_head.weight"; absent from tied checkpoints
  std::string layer_prefix;     // "model.layers." (the layer index and a dot follow)
  // Per role, the name after "<prefix><i>."; empty for roles the family never has.
  std::array<std::string, kLayerWeightCount> layer;
  // Expert e's weights are "<prefix><i>.<expert_prefix><e>.<expert[w]>".
  std::string expert_prefix;                           // "mlp.experts."
  std::array<std::string, kExpertWeightCount> expert;  // "gate_proj.weight", ...
  // Name endings of buffers some checkpoints persist that are not weights
  // (derived from the config) and are skipped, e.g. "rotary_emb.inv_freq".
  std::vector<std::string> ignored_suffixes;
};

struct Architecture {
  std::string model_type;  // config.json "model_type"
  TensorNames names;
};

// Every registered architecture, in checkpoint::ModelFamilies() order.
const std::vector<const Architecture*>& Architectures();

// The architecture for `model_type`; the errors of checkpoint::FindModelFamily
// (Unimplemented "model_type 'x' is not supported (supported: ...)", or the
// mixture-of-experts refusal) for a type that is not registered.
StatusOr<const Architecture*> FindArchitecture(const std::string& model_type);

// The roles present in layer `layer` for this config, in LayerWeight order
// (a sparse layer has the router, and the shared expert when the config has
// one, in place of the dense MLP).
std::vector<LayerWeight> ExpectedLayerWeights(const ModelConfig& config, int64_t layer);
// The shape a weight of `role` must have.
std::vector<int64_t> ExpectedShape(const ModelConfig& config, LayerWeight role);

// A checkpoint's tensors, bound to their roles. Pointers point into the
// Checkpoint passed to BindTensors, which must outlive this.
// True for a decoder layer's matrices (the projections, which may be
// quantized), false for its norms and biases.
bool IsProjection(LayerWeight role);

// One expert's tensors, in ExpertWeight order.
struct ExpertTensors {
  std::array<const checkpoint::TensorInfo*, kExpertWeightCount> weights{};
  uint64_t bytes = 0;
};

struct LayerTensors {
  std::array<const checkpoint::TensorInfo*, kLayerWeightCount> weights{};  // nullptr: absent
  // A sparse layer's experts, by index; empty for a dense layer.
  std::vector<ExpertTensors> experts;
  uint64_t bytes = 0;        // every tensor of the layer, experts included
  uint64_t dense_bytes = 0;  // `weights` alone (attention, norms, router, shared expert)

  const checkpoint::TensorInfo* operator[](LayerWeight role) const {
    return weights[static_cast<size_t>(role)];
  }
};

struct ModelTensors {
  const checkpoint::TensorInfo* embedding = nullptr;
  const checkpoint::TensorInfo* final_norm = nullptr;
  const checkpoint::TensorInfo* final_norm_bias = nullptr;  // LayerNorm families
  // The LM head: `lm_head` when the checkpoint stores one (also when the
  // config ties embeddings and the file keeps a copy), else the embedding.
  const checkpoint::TensorInfo* lm_head = nullptr;
  std::vector<LayerTensors> layers;
};

// Binds `checkpoint`'s tensors for `architecture` with `config`. Failures:
// DataLoss "missing tensor 'x'", "unexpected tensor 'x' for model_type 'y'",
// "tensor 'x' has shape [..], expected [..]"; Unimplemented for a weight dtype
// other than F32, F16 and BF16, except that a decoder layer's projection may
// be a quantized tensor (TensorInfo::quant, [out, in] like the float one).
// Pure function.
StatusOr<ModelTensors> BindTensors(const Architecture& architecture, const ModelConfig& config,
                                   const checkpoint::Checkpoint& checkpoint);

// "[2, 3]".
std::string ShapeString(const std::vector<int64_t>& shape);

// Tensor names shared by the families that copied Llama's layout
// ("model.layers.N.self_attn.q_proj.weight", ...): llama, mistral, qwen2,
// qwen3, gemma.
TensorNames LlamaStyleTensorNames();

}  // namespace nightshift::engine
