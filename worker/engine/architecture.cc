#include "worker/engine/architecture.h"

#include <map>
#include <utility>

namespace nightshift::engine {
namespace {

using checkpoint::DType;
using checkpoint::TensorInfo;

constexpr const char* kLayerWeightNames[kLayerWeightCount] = {
    "attn_norm",   "attn_norm_bias", "q",           "q_bias",
    "k",           "k_bias",         "v",           "v_bias",
    "qkv",         "qkv_bias",       "o",           "o_bias",
    "q_norm",      "k_norm",         "mlp_norm",    "mlp_norm_bias",
    "gate",        "gate_bias",      "up",          "up_bias",
    "gate_up",     "down",           "down_bias",   "router",
    "shared_gate", "shared_up",      "shared_down", "shared_expert_gate",
};

bool IsSupportedWeightDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Where a bound tensor goes and what shape it must have.
struct Slot {
  const TensorInfo** target;
  std::vector<int64_t> shape;
  bool projection = false;  // a decoder layer's matrix (may be quantized)
};

// `quantized_ok`: the slot is a projection, which may be stored quantized
// (checkpoint/quantization.h; its parts were checked when read).
Status CheckTensor(const TensorInfo& tensor, const std::vector<int64_t>& shape, bool quantized_ok) {
  if (tensor.shape != shape) {
    return DataLoss("tensor '" + tensor.name + "' has shape " + ShapeString(tensor.shape) +
                    ", expected " + ShapeString(shape));
  }
  if (tensor.quant) {
    if (!quantized_ok) {
      return Unimplemented("tensor '" + tensor.name +
                           "' is quantized; only the projections of decoder layers may be");
    }
    return Status::Ok();
  }
  if (!IsSupportedWeightDType(tensor.dtype)) {
    return Unimplemented("tensor '" + tensor.name + "' has dtype " +
                         checkpoint::DTypeName(tensor.dtype) +
                         "; only F32, F16 and BF16 weights are supported");
  }
  return Status::Ok();
}

// Every tensor the config expects, by name.
std::map<std::string, Slot> ExpectedSlots(const TensorNames& names, const ModelConfig& c,
                                          bool has_lm_head, ModelTensors* out) {
  std::map<std::string, Slot> slots;
  slots[names.embedding] = {&out->embedding, {c.vocab_size, c.hidden_size}};
  slots[names.final_norm] = {&out->final_norm, {c.hidden_size}};
  if (c.norm == NormKind::kLayerNorm) {
    slots[names.final_norm_bias] = {&out->final_norm_bias, {c.hidden_size}};
  }
  if (!c.tied_embeddings || has_lm_head) {
    slots[names.lm_head] = {&out->lm_head, {c.vocab_size, c.hidden_size}};
  }
  out->layers.resize(static_cast<size_t>(c.num_layers));
  const int64_t h = c.hidden_size, width = c.moe.expert_intermediate_size;
  const std::array<std::vector<int64_t>, kExpertWeightCount> expert_shapes = {
      std::vector<int64_t>{width, h}, std::vector<int64_t>{width, h},
      std::vector<int64_t>{h, width}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string prefix = names.layer_prefix + std::to_string(i) + ".";
    LayerTensors& layer = out->layers[static_cast<size_t>(i)];
    for (LayerWeight role : ExpectedLayerWeights(c, i)) {
      size_t r = static_cast<size_t>(role);
      slots[prefix + names.layer[r]] = {&layer.weights[r], ExpectedShape(c, role),
                                        IsProjection(role)};
    }
    if (!c.IsSparseLayer(i)) continue;
    layer.experts.resize(static_cast<size_t>(c.moe.num_experts));
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      const std::string expert = prefix + names.expert_prefix + std::to_string(e) + ".";
      for (size_t w = 0; w < kExpertWeightCount; ++w) {
        slots[expert + names.expert[w]] = {&layer.experts[static_cast<size_t>(e)].weights[w],
                                           expert_shapes[w], true};
      }
    }
  }
  return slots;
}

// GPT-NeoX / Pythia: one fused `query_key_value` laid out per head as
// [q k v], LayerNorm biases, `dense_h_to_4h`/`dense_4h_to_h` MLP, untied
// `embed_out`.
TensorNames GptNeoxTensorNames() {
  TensorNames n;
  n.embedding = "gpt_neox.embed_in.weight";
  n.final_norm = "gpt_neox.final_layer_norm.weight";
  n.final_norm_bias = "gpt_neox.final_layer_norm.bias";
  n.lm_head = "embed_out.weight";
  n.layer_prefix = "gpt_neox.layers.";
  auto set = [&n](LayerWeight role, const char* name) {
    n.layer[static_cast<size_t>(role)] = name;
  };
  set(LayerWeight::kAttnNorm, "input_layernorm.weight");
  set(LayerWeight::kAttnNormBias, "input_layernorm.bias");
  set(LayerWeight::kQkv, "attention.query_key_value.weight");
  set(LayerWeight::kQkvBias, "attention.query_key_value.bias");
  set(LayerWeight::kO, "attention.dense.weight");
  set(LayerWeight::kOBias, "attention.dense.bias");
  set(LayerWeight::kMlpNorm, "post_attention_layernorm.weight");
  set(LayerWeight::kMlpNormBias, "post_attention_layernorm.bias");
  set(LayerWeight::kUp, "mlp.dense_h_to_4h.weight");
  set(LayerWeight::kUpBias, "mlp.dense_h_to_4h.bias");
  set(LayerWeight::kDown, "mlp.dense_4h_to_h.weight");
  set(LayerWeight::kDownBias, "mlp.dense_4h_to_h.bias");
  // Older Pythia checkpoints persist the causal mask buffers too.
  n.ignored_suffixes = {".inv_freq", ".attention.bias", ".attention.masked_bias"};
  return n;
}

// Phi-3: Llama's names with one fused `qkv_proj` (all q rows, then k, then v)
// and one fused `gate_up_proj` (gate half first).
TensorNames Phi3TensorNames() {
  TensorNames n = LlamaStyleTensorNames();
  n.layer[static_cast<size_t>(LayerWeight::kQkv)] = "self_attn.qkv_proj.weight";
  n.layer[static_cast<size_t>(LayerWeight::kGateUp)] = "mlp.gate_up_proj.weight";
  return n;
}

// Qwen2-MoE and Qwen3-MoE: Llama's names; a sparse layer's router is
// `mlp.gate`, its experts `mlp.experts.E.{gate,up,down}_proj`, Qwen2-MoE's
// shared expert `mlp.shared_expert.*` gated by `mlp.shared_expert_gate`.
TensorNames QwenMoeTensorNames() {
  TensorNames n = LlamaStyleTensorNames();
  auto set = [&n](LayerWeight role, const char* name) {
    n.layer[static_cast<size_t>(role)] = name;
  };
  set(LayerWeight::kRouter, "mlp.gate.weight");
  set(LayerWeight::kSharedGate, "mlp.shared_expert.gate_proj.weight");
  set(LayerWeight::kSharedUp, "mlp.shared_expert.up_proj.weight");
  set(LayerWeight::kSharedDown, "mlp.shared_expert.down_proj.weight");
  set(LayerWeight::kSharedExpertGate, "mlp.shared_expert_gate.weight");
  n.expert_prefix = "mlp.experts.";
  n.expert = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  return n;
}

// Mixtral: Llama's attention names; `block_sparse_moe.gate` routes to
// `block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)}`.
TensorNames MixtralTensorNames() {
  TensorNames n = LlamaStyleTensorNames();
  n.layer[static_cast<size_t>(LayerWeight::kRouter)] = "block_sparse_moe.gate.weight";
  n.expert_prefix = "block_sparse_moe.experts.";
  n.expert = {"w1.weight", "w3.weight", "w2.weight"};
  return n;
}

}  // namespace

const char* LayerWeightName(LayerWeight weight) {
  return kLayerWeightNames[static_cast<size_t>(weight)];
}

const std::vector<const Architecture*>& Architectures() {
  // Each registered config family's tensor names.
  static const std::map<std::string, TensorNames (*)()> kNames = {
      {"llama", LlamaStyleTensorNames},  {"mistral", LlamaStyleTensorNames},
      {"qwen2", LlamaStyleTensorNames},  {"qwen3", LlamaStyleTensorNames},
      {"gemma", LlamaStyleTensorNames},  {"gpt_neox", GptNeoxTensorNames},
      {"phi3", Phi3TensorNames},         {"mixtral", MixtralTensorNames},
      {"qwen2_moe", QwenMoeTensorNames}, {"qwen3_moe", QwenMoeTensorNames},
  };
  static const std::vector<Architecture> storage = [] {
    std::vector<Architecture> out;
    for (const checkpoint::ModelFamily* family : checkpoint::ModelFamilies()) {
      auto names = kNames.find(family->model_type);
      if (names != kNames.end()) out.push_back({family->model_type, names->second()});
    }
    return out;
  }();
  static const std::vector<const Architecture*> table = [] {
    std::vector<const Architecture*> out;
    for (const Architecture& arch : storage) out.push_back(&arch);
    return out;
  }();
  return table;
}

StatusOr<const Architecture*> FindArchitecture(const std::string& model_type) {
  NS_RETURN_IF_ERROR(checkpoint::FindModelFamily(model_type).status());
  for (const Architecture* arch : Architectures()) {
    if (arch->model_type == model_type) return arch;
  }
  return Internal("model_type '" + model_type + "' has a config family but no tensor names");
}

std::vector<LayerWeight> ExpectedLayerWeights(const ModelConfig& c, int64_t layer) {
  using W = LayerWeight;
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  std::vector<W> roles = {W::kAttnNorm};
  if (layer_norm) roles.push_back(W::kAttnNormBias);
  if (c.qkv_layout == QkvLayout::kSeparate) {
    for (auto [weight, bias] :
         {std::pair{W::kQ, W::kQBias}, {W::kK, W::kKBias}, {W::kV, W::kVBias}}) {
      roles.push_back(weight);
      if (c.qkv_bias) roles.push_back(bias);
    }
  } else {
    roles.push_back(W::kQkv);
    if (c.qkv_bias) roles.push_back(W::kQkvBias);
  }
  roles.push_back(W::kO);
  if (c.o_bias) roles.push_back(W::kOBias);
  if (c.qk_norm) {
    roles.push_back(W::kQNorm);
    roles.push_back(W::kKNorm);
  }
  roles.push_back(W::kMlpNorm);
  if (layer_norm) roles.push_back(W::kMlpNormBias);
  if (c.IsSparseLayer(layer)) {
    roles.push_back(W::kRouter);
    if (c.moe.shared_expert_intermediate_size > 0) {
      for (W role : {W::kSharedGate, W::kSharedUp, W::kSharedDown, W::kSharedExpertGate}) {
        roles.push_back(role);
      }
    }
    return roles;
  }
  switch (c.mlp) {
    case MlpKind::kGated:
      roles.push_back(W::kGate);
      if (c.mlp_bias) roles.push_back(W::kGateBias);
      [[fallthrough]];
    case MlpKind::kPlain:
      roles.push_back(W::kUp);
      if (c.mlp_bias) roles.push_back(W::kUpBias);
      break;
    case MlpKind::kGatedFused:
      roles.push_back(W::kGateUp);
      break;
  }
  roles.push_back(W::kDown);
  if (c.mlp_bias) roles.push_back(W::kDownBias);
  return roles;
}

std::vector<int64_t> ExpectedShape(const ModelConfig& c, LayerWeight role) {
  const int64_t h = c.hidden_size;
  const int64_t qkv_rows = c.q_dim() + 2 * c.kv_dim();
  switch (role) {
    case LayerWeight::kAttnNorm:
    case LayerWeight::kAttnNormBias:
    case LayerWeight::kMlpNorm:
    case LayerWeight::kMlpNormBias:
    case LayerWeight::kOBias:
    case LayerWeight::kDownBias:
      return {h};
    case LayerWeight::kQ:
      return {c.q_dim(), h};
    case LayerWeight::kQBias:
      return {c.q_dim()};
    case LayerWeight::kK:
    case LayerWeight::kV:
      return {c.kv_dim(), h};
    case LayerWeight::kKBias:
    case LayerWeight::kVBias:
      return {c.kv_dim()};
    case LayerWeight::kQkv:
      return {qkv_rows, h};
    case LayerWeight::kQkvBias:
      return {qkv_rows};
    case LayerWeight::kO:
      return {h, c.q_dim()};
    case LayerWeight::kQNorm:
    case LayerWeight::kKNorm:
      return {c.head_dim};
    case LayerWeight::kGate:
    case LayerWeight::kUp:
      return {c.intermediate_size, h};
    case LayerWeight::kGateBias:
    case LayerWeight::kUpBias:
      return {c.intermediate_size};
    case LayerWeight::kGateUp:
      return {2 * c.intermediate_size, h};
    case LayerWeight::kDown:
      return {h, c.intermediate_size};
    case LayerWeight::kRouter:
      return {c.moe.num_experts, h};
    case LayerWeight::kSharedGate:
    case LayerWeight::kSharedUp:
      return {c.moe.shared_expert_intermediate_size, h};
    case LayerWeight::kSharedDown:
      return {h, c.moe.shared_expert_intermediate_size};
    case LayerWeight::kSharedExpertGate:
      return {1, h};
    case LayerWeight::kCount:
      break;
  }
  return {};
}

StatusOr<ModelTensors> BindTensors(const Architecture& arch, const ModelConfig& config,
                                   const checkpoint::Checkpoint& checkpoint) {
  const TensorNames& names = arch.names;
  ModelTensors out;
  bool has_lm_head = checkpoint.Find(names.lm_head) != nullptr;
  std::map<std::string, Slot> slots = ExpectedSlots(names, config, has_lm_head, &out);
  for (const TensorInfo& tensor : checkpoint.tensors) {
    auto slot = slots.find(tensor.name);
    if (slot == slots.end()) {
      bool ignored = false;
      for (const std::string& suffix : names.ignored_suffixes)
        ignored |= EndsWith(tensor.name, suffix);
      if (ignored) continue;
      return DataLoss("unexpected tensor '" + tensor.name + "' for model_type '" + arch.model_type +
                      "' with this config.json");
    }
    NS_RETURN_IF_ERROR(CheckTensor(tensor, slot->second.shape, slot->second.projection));
    *slot->second.target = &tensor;
  }
  for (const auto& [name, slot] : slots) {
    if (*slot.target == nullptr) return DataLoss("missing tensor '" + name + "'");
  }
  if (out.lm_head == nullptr) out.lm_head = out.embedding;
  for (LayerTensors& layer : out.layers) {
    for (const TensorInfo* tensor : layer.weights) layer.dense_bytes += tensor ? tensor->size : 0;
    layer.bytes = layer.dense_bytes;
    for (ExpertTensors& expert : layer.experts) {
      for (const TensorInfo* tensor : expert.weights) expert.bytes += tensor->size;
      layer.bytes += expert.bytes;
    }
  }
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

TensorNames LlamaStyleTensorNames() {
  TensorNames n;
  n.embedding = "model.embed_tokens.weight";
  n.final_norm = "model.norm.weight";
  n.lm_head = "lm_head.weight";
  n.layer_prefix = "model.layers.";
  auto set = [&n](LayerWeight role, const char* name) {
    n.layer[static_cast<size_t>(role)] = name;
  };
  set(LayerWeight::kAttnNorm, "input_layernorm.weight");
  set(LayerWeight::kQ, "self_attn.q_proj.weight");
  set(LayerWeight::kQBias, "self_attn.q_proj.bias");
  set(LayerWeight::kK, "self_attn.k_proj.weight");
  set(LayerWeight::kKBias, "self_attn.k_proj.bias");
  set(LayerWeight::kV, "self_attn.v_proj.weight");
  set(LayerWeight::kVBias, "self_attn.v_proj.bias");
  set(LayerWeight::kO, "self_attn.o_proj.weight");
  set(LayerWeight::kOBias, "self_attn.o_proj.bias");
  set(LayerWeight::kQNorm, "self_attn.q_norm.weight");
  set(LayerWeight::kKNorm, "self_attn.k_norm.weight");
  set(LayerWeight::kMlpNorm, "post_attention_layernorm.weight");
  set(LayerWeight::kGate, "mlp.gate_proj.weight");
  set(LayerWeight::kGateBias, "mlp.gate_proj.bias");
  set(LayerWeight::kUp, "mlp.up_proj.weight");
  set(LayerWeight::kUpBias, "mlp.up_proj.bias");
  set(LayerWeight::kDown, "mlp.down_proj.weight");
  set(LayerWeight::kDownBias, "mlp.down_proj.bias");
  n.ignored_suffixes = {".inv_freq"};
  return n;
}

bool IsProjection(LayerWeight role) {
  switch (role) {
    case LayerWeight::kQ:
    case LayerWeight::kK:
    case LayerWeight::kV:
    case LayerWeight::kQkv:
    case LayerWeight::kO:
    case LayerWeight::kGate:
    case LayerWeight::kUp:
    case LayerWeight::kGateUp:
    case LayerWeight::kDown:
    case LayerWeight::kSharedGate:
    case LayerWeight::kSharedUp:
    case LayerWeight::kSharedDown:
      return true;
    default:
      return false;
  }
}

}  // namespace nightshift::engine
