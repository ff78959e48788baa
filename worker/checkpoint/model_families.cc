// The registered config.json families: for each, the parser and the writer of
// its keys, side by side (see model_config.h). The engine's tensor names for
// each family are in worker/engine/architecture.cc.
#include <cmath>
#include <map>

#include "worker/checkpoint/model_config.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;

// rotary_dim / head_dim as written in rotary_pct or partial_rotary_factor,
// nudged up by one ulp where the quotient rounds down, so that the readers'
// int(head_dim x fraction) (transformers' rule) gives rotary_dim back.
double RotaryFraction(const ModelConfig& c) {
  const double head = static_cast<double>(c.head_dim);
  double fraction = static_cast<double>(c.rope.rotary_dim) / head;
  if (static_cast<int64_t>(head * fraction) != c.rope.rotary_dim) {
    fraction = std::nextafter(fraction, 2.0);
  }
  return fraction;
}

json OptionalJson(const std::optional<int64_t>& value) {
  return value ? json(*value) : json(nullptr);
}

// Llama (1, 2, 3, 3.1 with rope_scaling llama3 or linear, also under the
// legacy key `type`): RMSNorm, SiLU-gated MLP, grouped-query attention,
// optional biases (`attention_bias` on q/k/v/o, `mlp_bias`), optionally tied
// embeddings.
Status ParseLlama(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_bias = c->o_bias = r.Bool("attention_bias", false);
  c->mlp_bias = r.Bool("mlp_bias", false);
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  return r.status();
}

void WriteLlama(const ModelConfig& c, json* out) {
  WriteDecoderFields(c, out);
  (*out)["rms_norm_eps"] = c.norm_eps;
  (*out)["hidden_act"] = ActivationName(c.activation);
  (*out)["attention_bias"] = c.qkv_bias;
  (*out)["mlp_bias"] = c.mlp_bias;
  (*out)["tie_word_embeddings"] = c.tied_embeddings;
}

// Mistral: Llama's block without biases, plus `sliding_window` (transformers'
// default 4096 when the key is absent; null disables it). Windowed attention
// is not implemented: the engine runs contexts up to the window, where it
// equals full attention, and refuses longer ones.
Status ParseMistral(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  c->sliding_window = r.Has("sliding_window") ? r.OptionalInt("sliding_window") : 4096;
  return r.status();
}

void WriteMistral(const ModelConfig& c, json* out) {
  WriteDecoderFields(c, out);
  (*out)["rms_norm_eps"] = c.norm_eps;
  (*out)["hidden_act"] = ActivationName(c.activation);
  (*out)["tie_word_embeddings"] = c.tied_embeddings;
  (*out)["sliding_window"] = OptionalJson(c.sliding_window);
}

// Qwen2 / Qwen2.5: Llama's block with biases on q/k/v (never on o_proj).
// `sliding_window` applies only when `use_sliding_window` is true.
Status ParseQwen2(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_bias = true;
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  if (r.Bool("use_sliding_window", false)) c->sliding_window = r.OptionalInt("sliding_window");
  return r.status();
}

// Qwen2's and Qwen3's shared keys.
void WriteQwen(const ModelConfig& c, json* out) {
  WriteDecoderFields(c, out);
  (*out)["rms_norm_eps"] = c.norm_eps;
  (*out)["hidden_act"] = ActivationName(c.activation);
  (*out)["tie_word_embeddings"] = c.tied_embeddings;
  (*out)["use_sliding_window"] = c.sliding_window.has_value();
  (*out)["sliding_window"] = OptionalJson(c.sliding_window);
}

// Qwen3: Llama's block with RMSNorm over head_dim on q and k (q_norm, k_norm)
// applied before RoPE, an explicit `head_dim` (often != hidden / heads), and
// optional `attention_bias` on q/k/v/o. `sliding_window` applies only when
// `use_sliding_window` is true.
Status ParseQwen3(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_bias = c->o_bias = r.Bool("attention_bias", false);
  c->qk_norm = true;
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  if (r.Bool("use_sliding_window", false)) c->sliding_window = r.OptionalInt("sliding_window");
  return r.status();
}

void WriteQwen3(const ModelConfig& c, json* out) {
  WriteQwen(c, out);
  (*out)["attention_bias"] = c.qkv_bias;
}

// Gemma (1): RMSNorm scaled by (1 + weight), embeddings multiplied by
// sqrt(hidden_size) in the activations' dtype, GeGLU with the activation named
// by `hidden_activation` (transformers falls back to tanh-approximated GELU
// when it is absent), explicit `head_dim` (transformers' default 256), tied
// embeddings by default.
Status ParseGemma(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->head_dim = r.Int("head_dim", 256);
  c->rope.rotary_dim = c->head_dim;
  c->norm = NormKind::kRmsUnitOffset;
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_activation", Activation::kGeluTanh);
  c->qkv_bias = c->o_bias = r.Bool("attention_bias", false);
  c->tied_embeddings = r.Bool("tie_word_embeddings", true);
  c->scale_embeddings = true;
  return r.status();
}

void WriteGemma(const ModelConfig& c, json* out) {
  WriteDecoderFields(c, out);
  (*out)["rms_norm_eps"] = c.norm_eps;
  (*out)["hidden_activation"] = ActivationName(c.activation);
  (*out)["attention_bias"] = c.qkv_bias;
  (*out)["tie_word_embeddings"] = c.tied_embeddings;
}

// GPT-NeoX / Pythia: LayerNorm with bias, one fused `query_key_value` laid out
// per head as [q k v], partial rotary (`rotary_pct` of each head, base
// `rotary_emb_base`), plain GELU MLP with biases, parallel residual
// (x + attn(ln1(x)) + mlp(ln2(x))) unless `use_parallel_residual` is false,
// untied `embed_out`.
Status ParseGptNeox(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->rope.theta = r.Double("rotary_emb_base", c->rope.theta);
  c->rope.rotary_dim =
      static_cast<int64_t>(static_cast<double>(c->head_dim) * r.Double("rotary_pct", 0.25));
  c->norm = NormKind::kLayerNorm;
  c->norm_eps = r.Double("layer_norm_eps", 1e-5);
  c->activation = r.ActivationField("hidden_act", Activation::kGeluErf);
  c->qkv_layout = QkvLayout::kFusedPerHead;
  c->mlp = MlpKind::kPlain;
  c->qkv_bias = c->o_bias = r.Bool("attention_bias", true);
  c->mlp_bias = true;
  c->parallel_residual = r.Bool("use_parallel_residual", true);
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  return r.status();
}

// GPT-NeoX has no grouped-query attention (no num_key_value_heads) and names
// its rotary base rotary_emb_base.
void WriteGptNeox(const ModelConfig& c, json* out) {
  WriteDecoderFields(c, out);
  out->erase("num_key_value_heads");
  out->erase("rope_theta");
  (*out)["rotary_emb_base"] = c.rope.theta;
  (*out)["rotary_pct"] = RotaryFraction(c);
  (*out)["layer_norm_eps"] = c.norm_eps;
  (*out)["hidden_act"] = ActivationName(c.activation);
  (*out)["attention_bias"] = c.qkv_bias;
  (*out)["use_parallel_residual"] = c.parallel_residual;
  (*out)["tie_word_embeddings"] = c.tied_embeddings;
}

// Phi-3: Llama's block with one fused `qkv_proj` (all q rows, then k, then v)
// and one fused `gate_up_proj` (gate half first), `partial_rotary_factor`
// when present, an optional `sliding_window`. Its long-context rope types
// (longrope, su) are refused by the rope parser.
Status ParsePhi3(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->rope.rotary_dim = static_cast<int64_t>(static_cast<double>(c->head_dim) *
                                            r.Double("partial_rotary_factor", 1.0));
  c->norm_eps = r.Double("rms_norm_eps", 1e-5);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_layout = QkvLayout::kFusedBlocks;
  c->mlp = MlpKind::kGatedFused;
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  c->sliding_window = r.OptionalInt("sliding_window");
  return r.status();
}

void WritePhi3(const ModelConfig& c, json* out) {
  WriteDecoderFields(c, out);
  (*out)["partial_rotary_factor"] = RotaryFraction(c);
  (*out)["rms_norm_eps"] = c.norm_eps;
  (*out)["hidden_act"] = ActivationName(c.activation);
  (*out)["tie_word_embeddings"] = c.tied_embeddings;
  (*out)["sliding_window"] = OptionalJson(c.sliding_window);
}

// The expert keys Qwen2-MoE and Qwen3-MoE share (transformers' defaults);
// `router_aux_loss_coef` and `output_router_logits` only matter in training.
void ReadQwenMoe(ConfigReader& r, ModelConfig* c) {
  MoeConfig& m = c->moe;
  m.num_experts = r.Int("num_experts", 60);
  m.top_k = r.Int("num_experts_per_tok", 4);
  m.expert_intermediate_size = r.Int("moe_intermediate_size", 1408);
  m.norm_topk_prob = r.Bool("norm_topk_prob", false);
  m.decoder_sparse_step = r.Int("decoder_sparse_step", 1);
  m.mlp_only_layers = r.IntList("mlp_only_layers");
}

void WriteQwenMoe(const ModelConfig& c, json* out) {
  const MoeConfig& m = c.moe;
  (*out)["num_experts"] = m.num_experts;
  (*out)["num_experts_per_tok"] = m.top_k;
  (*out)["moe_intermediate_size"] = m.expert_intermediate_size;
  (*out)["norm_topk_prob"] = m.norm_topk_prob;
  (*out)["decoder_sparse_step"] = m.decoder_sparse_step;
  (*out)["mlp_only_layers"] = m.mlp_only_layers;
}

// Mixtral: Mistral's attention (`sliding_window` absent or null: full
// attention) and in every layer `num_local_experts` experts of
// `intermediate_size`, the top `num_experts_per_tok` renormalised.
Status ParseMixtral(const json& j, ModelConfig* c) {
  ConfigReader r(j);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-5);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  c->sliding_window = r.OptionalInt("sliding_window");
  c->moe.num_experts = r.Int("num_local_experts", 8);
  c->moe.top_k = r.Int("num_experts_per_tok", 2);
  c->moe.expert_intermediate_size = c->intermediate_size;
  c->moe.norm_topk_prob = true;
  return r.status();
}

void WriteMixtral(const ModelConfig& c, json* out) {
  WriteMistral(c, out);
  (*out)["num_local_experts"] = c.moe.num_experts;
  (*out)["num_experts_per_tok"] = c.moe.top_k;
}

// Qwen2-MoE: Qwen2's attention (q/k/v biases unless `qkv_bias` is false),
// sparse layers per ReadQwenMoe, a shared expert of
// `shared_expert_intermediate_size` gated by sigmoid(shared_expert_gate . x),
// dense layers of `intermediate_size`.
Status ParseQwen2Moe(const json& j, ModelConfig* c) {
  NS_RETURN_IF_ERROR(ParseQwen2(j, c));
  ConfigReader r(j);
  c->qkv_bias = r.Bool("qkv_bias", true);
  ReadQwenMoe(r, c);
  c->moe.shared_expert_intermediate_size = r.Int("shared_expert_intermediate_size", 5632);
  return r.status();
}

void WriteQwen2Moe(const ModelConfig& c, json* out) {
  WriteQwen(c, out);
  WriteQwenMoe(c, out);
  (*out)["qkv_bias"] = c.qkv_bias;
  (*out)["shared_expert_intermediate_size"] = c.moe.shared_expert_intermediate_size;
}

// Qwen3-MoE: Qwen3's attention (q/k-norm), sparse layers per ReadQwenMoe
// (transformers' defaults: 128 experts, top 8, 768 wide), no shared expert.
Status ParseQwen3Moe(const json& j, ModelConfig* c) {
  NS_RETURN_IF_ERROR(ParseQwen3(j, c));
  ConfigReader r(j);
  ReadQwenMoe(r, c);
  c->moe.num_experts = r.Int("num_experts", 128);
  c->moe.top_k = r.Int("num_experts_per_tok", 8);
  c->moe.expert_intermediate_size = r.Int("moe_intermediate_size", 768);
  return r.status();
}

void WriteQwen3Moe(const ModelConfig& c, json* out) {
  WriteQwen3(c, out);
  WriteQwenMoe(c, out);
}

}  // namespace

const std::vector<const ModelFamily*>& ModelFamilies() {
  // Function-local, so that the table is whole whenever it is first asked
  // for (also from another file's static initialisation).
  static const ModelFamily kFamilies[] = {
      {"llama", ParseLlama, WriteLlama},
      {"mistral", ParseMistral, WriteMistral},
      {"qwen2", ParseQwen2, WriteQwen},
      {"qwen3", ParseQwen3, WriteQwen3},
      {"gemma", ParseGemma, WriteGemma},
      {"gpt_neox", ParseGptNeox, WriteGptNeox},
      {"phi3", ParsePhi3, WritePhi3},
      {"mixtral", ParseMixtral, WriteMixtral},
      {"qwen2_moe", ParseQwen2Moe, WriteQwen2Moe},
      {"qwen3_moe", ParseQwen3Moe, WriteQwen3Moe},
  };
  static const std::vector<const ModelFamily*> table = [] {
    std::vector<const ModelFamily*> out;
    for (const ModelFamily& family : kFamilies) out.push_back(&family);
    return out;
  }();
  return table;
}

StatusOr<const ModelFamily*> FindModelFamily(const std::string& model_type) {
  // Mixtures of experts the engine does not run, with what they need beyond
  // the routed gated experts it has.
  static const std::map<std::string, std::string> kUnsupportedMoe = {
      {"deepseek_v2", "multi-head latent attention and group-limited routing"},
      {"deepseek_v3", "multi-head latent attention and sigmoid group-limited routing"},
      {"gpt_oss", "attention sinks, alternating sliding windows and clamped SwiGLU experts"},
      {"olmoe", "OLMoE's q/k norm over the whole projection"},
      {"dbrx", "DBRX's fused expert tensors and clipped attention"},
      {"phimoe", "sparsemixer routing"},
      {"jamba", "Mamba layers"},
      {"granitemoe", "Granite's fused expert tensors and multipliers"},
      {"jetmoe", "mixture-of-attention layers"},
      {"arctic", "a dense residual MLP beside the experts"},
      {"qwen3_next", "linear-attention layers"},
      {"llama4", "chunked attention and interleaved sigmoid-routed layers"},
  };
  if (auto it = kUnsupportedMoe.find(model_type); it != kUnsupportedMoe.end()) {
    return Unimplemented("model_type '" + model_type +
                         "' is a mixture-of-experts model the engine does not run: it needs " +
                         it->second +
                         " (mixtures of experts supported: mixtral, qwen2_moe, qwen3_moe)");
  }
  std::string supported;
  for (const ModelFamily* family : ModelFamilies()) {
    if (family->model_type == model_type) return family;
    supported += (supported.empty() ? "" : ", ") + family->model_type;
  }
  return Unimplemented("model_type '" + model_type + "' is not supported (supported: " + supported +
                       ")");
}

StatusOr<ModelConfig> ParseModelConfig(const json& j) {
  ConfigReader reader(j);
  std::string model_type = reader.String("model_type", "");
  NS_RETURN_IF_ERROR(reader.status());
  if (model_type.empty()) return DataLoss("config.json: required field 'model_type' is missing");
  NS_ASSIGN_OR_RETURN(const ModelFamily* family, FindModelFamily(model_type));
  ModelConfig config;
  NS_RETURN_IF_ERROR(family->parse(j, &config));
  config.model_type = model_type;
  NS_RETURN_IF_ERROR(ValidateModelConfig(config));
  return config;
}

StatusOr<json> ModelConfigJson(const ModelConfig& config) {
  NS_ASSIGN_OR_RETURN(const ModelFamily* family, FindModelFamily(config.model_type));
  json out = json::object();
  out["model_type"] = config.model_type;
  family->write(config, &out);
  return out;
}

}  // namespace nightshift::checkpoint
