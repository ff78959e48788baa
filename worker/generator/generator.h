// Random-weight checkpoints of real shapes, for benchmarks, the demo and
// tests: nothing in this project downloads a model.
//
// WriteCheckpoint() writes a HuggingFace-format directory that the metadata
// reader and the engine accept like a published one: `config.json`,
// `generation_config.json`, `model.safetensors` or shards
// `model-0000i-of-0000N.safetensors` with `model.safetensors.index.json`, and
// optionally a copied tokenizer, for any registered family. config.json is
// spelled by the one config writer (worker/checkpoint/model_config.h), whose
// parser the engine reads it with; the tensors are exactly the ones the
// engine's architecture table expects for the config (so none can drift apart),
// with N(0, 1/fan_in) linear weights, norm weights 1 + 0.1·N(0, 1) and small
// biases: activations stay in range and a random model's logits are peaked
// enough to exercise sampling. A mixture of experts (mixtral, qwen2_moe,
// qwen3_moe) gets its sparse layers' routers and experts under the family's
// names (and Qwen2-MoE's shared expert), its dense layers' MLPs; quantized,
// the experts and the shared expert are quantized like any projection, the
// router and the shared expert's gate stay in `dtype`.
//
// Values depend only on the seed and the tensor's name, never on sharding:
// the same --seed with --shards 1 and --shards 4 gives the same model.
//
// libtorch-free. Functions are thread-compatible (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/generator/quantize.h"

namespace nightshift::generator {

struct CheckpointSpec {
  std::string arch;  // model_type: any registered family (checkpoint::ModelFamilies())
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;                // 0 with a tokenizer: taken from it
  std::optional<int64_t> head_dim;  // default hidden / heads; written explicitly
  int64_t max_position = 4096;
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling;  // null, or the config.json object
  double norm_eps = 1e-5;
  checkpoint::DType dtype = checkpoint::DType::kBF16;  // F32, F16 or BF16
  int shards = 1;
  bool tie_embeddings = false;
  uint64_t seed = 0;
  std::string tokenizer_dir;  // copy tokenizer.json (+ tokenizer_config.json) from here
  int64_t bos_token_id = 1;   // overridden by the tokenizer's, when one is copied
  int64_t eos_token_id = 2;
  // Projections stored quantized (quantize.h; config.json gets the format's
  // quantization_config). The float weights drawn are the same as without,
  // so a quantized checkpoint is the rounding of the unquantized one of the
  // same seed. Embeddings, norms, biases and the LM head stay in `dtype`.
  QuantizeSpec quantize;

  // A mixture of experts (checkpoint::MoeConfig), for the families that have
  // one (mixtral, qwen2_moe, qwen3_moe); setting any of these for another
  // family is InvalidArgument, and so is one the family cannot store
  // (Mixtral's experts are `intermediate` wide, every layer sparse and
  // renormalised; only Qwen2-MoE has a shared expert).
  int64_t experts = 0;           // num_experts; 0: the family's default
  int64_t top_k = 0;             // num_experts_per_tok; 0: the family's default
  int64_t moe_intermediate = 0;  // an expert's width; 0: `intermediate`
  // Qwen2-MoE's shared expert's width (0: none); unset: `intermediate`.
  std::optional<int64_t> shared_expert_intermediate;
  std::optional<int64_t> decoder_sparse_step;  // unset: 1 (every layer sparse)
  std::optional<bool> norm_topk_prob;          // unset: the family's default
  std::vector<int64_t> mlp_only_layers;        // layers kept dense

  bool HasMoeFields() const;
};

// Writes `count` values of `dtype` (F32, F16 or BF16) at `out` from float32
// `in`, rounding to nearest even; F16 overflows to infinity and keeps
// subnormals. The inverse of engine::ConvertToFloat. Thread-safe.
void FromFloat(const float* in, int64_t count, checkpoint::DType dtype, void* out);

// Names of the built-in shapes of real models ("llama-3-8b", "mixtral-8x7b",
// "qwen3-30b-a3b", ...).
std::vector<std::string> PresetNames();
// The spec of preset `name` (arch, sizes, rope, dtype); seed, shards and
// tokenizer are left for the caller. NotFound lists the presets.
StatusOr<CheckpointSpec> Preset(const std::string& name);

// Whether `arch` is a registered mixture-of-experts family (mixtral,
// qwen2_moe, qwen3_moe), whose CheckpointSpec may set experts.
bool IsMixtureOfExperts(const std::string& arch);

// config.json for `spec`: the spec's sizes, the family's defaults for the
// rest, written in the family's own spelling by the one config writer
// (checkpoint::ModelConfigJson, worker/checkpoint/model_config.h), plus
// architectures, bos_token_id, torch_dtype and use_cache. The reader's
// errors for a spec it refuses (Unimplemented for an unregistered arch,
// DataLoss naming the config field for bad sizes). Pure.
StatusOr<nlohmann::json> ConfigJson(const CheckpointSpec& spec);

// What WriteCheckpoint wrote.
struct WriteReport {
  uint64_t tensor_bytes = 0;
  int64_t tensors = 0;
  int files = 0;
  double seconds = 0;
};

// Writes the checkpoint into `out_dir` (created; must be empty or absent).
// Validates the spec first: ConfigJson's errors, or InvalidArgument for a
// dtype that is not a weight dtype or a shard count outside 1..tensors;
// refuses a non-empty directory (FailedPrecondition), reports I/O errors as
// Unavailable naming the file. `progress`, when set, is called after each
// tensor with (bytes written so far, total bytes). Files are written to
// temporary names and renamed into place, so a crash leaves no half file
// under a real name.
StatusOr<WriteReport> WriteCheckpoint(
    const CheckpointSpec& spec, const std::string& out_dir,
    const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);

}  // namespace nightshift::generator
