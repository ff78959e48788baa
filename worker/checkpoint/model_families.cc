// The registered config.json families: for each, the parser and the writer of
// its keys, side by side (see model_config.h). The engine's tensor names for
// each family are in worker/engine/architecture.cc.
#include <cmath>
#include <set>

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

}  // namespace

const std::vector<const ModelFamily*>& ModelFamilies() {
  // Function-local, so that the table is whole whenever it is first asked
  // for (also from another file's static initialisation).
  static const ModelFamily kFamilies[] = {
      {"llama", ParseLlama, WriteLlama}, {"mistral", ParseMistral, WriteMistral},
      {"qwen2", ParseQwen2, WriteQwen},  {"qwen3", ParseQwen3, WriteQwen3},
      {"gemma", ParseGemma, WriteGemma}, {"gpt_neox", ParseGptNeox, WriteGptNeox},
      {"phi3", ParsePhi3, WritePhi3},
  };
  static const std::vector<const ModelFamily*> table = [] {
    std::vector<const ModelFamily*> out;
    for (const ModelFamily& family : kFamilies) out.push_back(&family);
    return out;
  }();
  return table;
}

StatusOr<const ModelFamily*> FindModelFamily(const std::string& model_type) {
  static const std::set<std::string> kMixtureOfExperts = {
      "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx",
      "olmoe",   "phimoe",    "jamba",     "granitemoe",  "jetmoe",      "arctic"};
  if (kMixtureOfExperts.count(model_type)) {
    return Unimplemented("model_type '" + model_type +
                         "' is a mixture-of-experts model, which is not supported: every pass "
                         "would read every expert of every layer");
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
