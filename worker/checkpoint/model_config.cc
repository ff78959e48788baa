#include "worker/checkpoint/model_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;

constexpr char kConfigFile[] = "config.json";

std::string Field(const char* key) { return std::string(kConfigFile) + ": '" + key + "'"; }

Status Positive(const char* key, int64_t value) {
  if (value > 0) return Status::Ok();
  return DataLoss(Field(key) + " must be positive, got " + std::to_string(value));
}

StatusOr<RopeType> ParseRopeType(const std::string& name) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "llama3") return RopeType::kLlama3;
  return Unimplemented(std::string(kConfigFile) + ": rope_scaling type '" + name +
                       "' is not supported (supported: default, linear, llama3)");
}

Status ValidateRope(const ModelConfig& c) {
  const RopeConfig& rope = c.rope;
  if (!(rope.theta > 0)) return DataLoss(Field("rope_theta") + " must be positive");
  if (rope.rotary_dim <= 0 || rope.rotary_dim > c.head_dim || rope.rotary_dim % 2 != 0) {
    return DataLoss(std::string(kConfigFile) + ": rotary dimension " +
                    std::to_string(rope.rotary_dim) + " must be even and in (0, head_dim " +
                    std::to_string(c.head_dim) + "]");
  }
  if (rope.type != RopeType::kDefault && !(rope.factor > 0)) {
    return DataLoss(Field("rope_scaling.factor") + " must be positive");
  }
  if (rope.type == RopeType::kLlama3) {
    if (!(rope.high_freq_factor > rope.low_freq_factor) || !(rope.low_freq_factor > 0)) {
      return DataLoss(std::string(kConfigFile) +
                      ": rope_scaling needs 0 < low_freq_factor < high_freq_factor");
    }
    NS_RETURN_IF_ERROR(Positive("rope_scaling.original_max_position_embeddings",
                                rope.original_max_position_embeddings));
  }
  return Status::Ok();
}

}  // namespace

const char* ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kSilu:
      return "silu";
    case Activation::kGeluErf:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_pytorch_tanh";
  }
  return "?";
}

namespace {

Status ValidateMoe(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  if (m.num_experts == 0) return Status::Ok();
  NS_RETURN_IF_ERROR(Positive("num_experts", m.num_experts));
  NS_RETURN_IF_ERROR(Positive("num_experts_per_tok", m.top_k));
  NS_RETURN_IF_ERROR(Positive("moe_intermediate_size", m.expert_intermediate_size));
  NS_RETURN_IF_ERROR(Positive("decoder_sparse_step", m.decoder_sparse_step));
  if (m.top_k > m.num_experts) {
    return DataLoss(Field("num_experts_per_tok") + " " + std::to_string(m.top_k) +
                    " is more than the " + std::to_string(m.num_experts) + " experts");
  }
  if (m.shared_expert_intermediate_size < 0) {
    return DataLoss(Field("shared_expert_intermediate_size") + " must not be negative");
  }
  for (int64_t layer : m.mlp_only_layers) {
    if (layer < 0 || layer >= c.num_layers) {
      return DataLoss(Field("mlp_only_layers") + " names layer " + std::to_string(layer) +
                      " of a " + std::to_string(c.num_layers) + "-layer model");
    }
  }
  if (c.parallel_residual || c.mlp != MlpKind::kGated || c.mlp_bias) {
    return DataLoss(std::string(kConfigFile) +
                    ": experts are gated MLPs without biases after the attention");
  }
  return Status::Ok();
}

}  // namespace

bool operator==(const RopeConfig& a, const RopeConfig& b) {
  return a.type == b.type && a.theta == b.theta && a.rotary_dim == b.rotary_dim &&
         a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings;
}

bool operator==(const MoeConfig& a, const MoeConfig& b) {
  return a.num_experts == b.num_experts && a.top_k == b.top_k &&
         a.expert_intermediate_size == b.expert_intermediate_size &&
         a.shared_expert_intermediate_size == b.shared_expert_intermediate_size &&
         a.norm_topk_prob == b.norm_topk_prob && a.decoder_sparse_step == b.decoder_sparse_step &&
         a.mlp_only_layers == b.mlp_only_layers;
}

bool ModelConfig::IsSparseLayer(int64_t layer) const {
  if (moe.num_experts <= 0 || moe.decoder_sparse_step <= 0) return false;
  if ((layer + 1) % moe.decoder_sparse_step != 0) return false;
  return std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), layer) ==
         moe.mlp_only_layers.end();
}

bool operator==(const ModelConfig& a, const ModelConfig& b) {
  return a.model_type == b.model_type && a.hidden_size == b.hidden_size &&
         a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         a.intermediate_size == b.intermediate_size && a.vocab_size == b.vocab_size &&
         a.max_position_embeddings == b.max_position_embeddings &&
         a.sliding_window == b.sliding_window && a.norm_eps == b.norm_eps && a.norm == b.norm &&
         a.activation == b.activation && a.qkv_layout == b.qkv_layout && a.mlp == b.mlp &&
         a.qkv_bias == b.qkv_bias && a.o_bias == b.o_bias && a.mlp_bias == b.mlp_bias &&
         a.qk_norm == b.qk_norm && a.parallel_residual == b.parallel_residual &&
         a.tied_embeddings == b.tied_embeddings && a.scale_embeddings == b.scale_embeddings &&
         a.rope == b.rope && a.moe == b.moe && a.eos_token_ids == b.eos_token_ids;
}

Status ValidateModelConfig(const ModelConfig& c) {
  NS_RETURN_IF_ERROR(Positive("hidden_size", c.hidden_size));
  NS_RETURN_IF_ERROR(Positive("num_hidden_layers", c.num_layers));
  NS_RETURN_IF_ERROR(Positive("num_attention_heads", c.num_heads));
  NS_RETURN_IF_ERROR(Positive("num_key_value_heads", c.num_kv_heads));
  NS_RETURN_IF_ERROR(Positive("head_dim", c.head_dim));
  NS_RETURN_IF_ERROR(Positive("intermediate_size", c.intermediate_size));
  NS_RETURN_IF_ERROR(Positive("vocab_size", c.vocab_size));
  NS_RETURN_IF_ERROR(Positive("max_position_embeddings", c.max_position_embeddings));
  if (c.sliding_window) NS_RETURN_IF_ERROR(Positive("sliding_window", *c.sliding_window));
  if (c.num_heads % c.num_kv_heads != 0) {
    return DataLoss(std::string(kConfigFile) + ": num_attention_heads " +
                    std::to_string(c.num_heads) + " is not divisible by num_key_value_heads " +
                    std::to_string(c.num_kv_heads));
  }
  if (c.qkv_layout == QkvLayout::kFusedPerHead && c.num_kv_heads != c.num_heads) {
    return DataLoss(std::string(kConfigFile) +
                    ": a per-head fused query_key_value needs as many KV heads as heads");
  }
  if (!(c.norm_eps > 0))
    return DataLoss(std::string(kConfigFile) + ": norm epsilon must be positive");
  for (int64_t id : c.eos_token_ids) {
    if (id < 0) return DataLoss(Field("eos_token_id") + " must not be negative");
  }
  NS_RETURN_IF_ERROR(ValidateMoe(c));
  return ValidateRope(c);
}

ConfigReader::ConfigReader(const json& json, std::string label)
    : json_(json), label_(std::move(label)) {
  if (!json_.is_object()) Fail(DataLoss(label_ + ": not a JSON object"));
}

std::string ConfigReader::Field(const char* key) const { return label_ + ": '" + key + "'"; }

const json* ConfigReader::Find(const char* key) const {
  if (!status_.ok()) return nullptr;
  auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigReader::Has(const char* key) const {
  return json_.is_object() && json_.find(key) != json_.end();
}

void ConfigReader::Fail(Status status) {
  if (status_.ok()) status_ = std::move(status);
}

void ConfigReader::WrongType(const char* key, const char* expected) {
  Fail(DataLoss(Field(key) + " must be " + expected));
}

void ConfigReader::Missing(const char* key) {
  Fail(DataLoss(label_ + ": required field '" + key + "' is missing"));
}

namespace {

// An integer, also accepted when written as an integral float ("8192.0").
bool AsInt(const json& value, int64_t* out) {
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_float()) {
    double d = value.get<double>();
    if (std::trunc(d) == d && std::fabs(d) < 9.0e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

}  // namespace

int64_t ConfigReader::RequiredInt(const char* key) {
  if (!status_.ok()) return 0;
  if (Find(key) == nullptr) {
    Missing(key);
    return 0;
  }
  return Int(key, 0);
}

double ConfigReader::RequiredDouble(const char* key) {
  if (!status_.ok()) return 0;
  if (Find(key) == nullptr) {
    Missing(key);
    return 0;
  }
  return Double(key, 0);
}

int64_t ConfigReader::Int(const char* key, int64_t fallback) {
  std::optional<int64_t> value = OptionalInt(key);
  return value ? *value : fallback;
}

std::optional<int64_t> ConfigReader::OptionalInt(const char* key) {
  const json* value = Find(key);
  if (value == nullptr) return std::nullopt;
  int64_t out = 0;
  if (!AsInt(*value, &out)) {
    WrongType(key, "an integer");
    return std::nullopt;
  }
  return out;
}

double ConfigReader::Double(const char* key, double fallback) {
  const json* value = Find(key);
  if (value == nullptr) return fallback;
  if (!value->is_number()) {
    WrongType(key, "a number");
    return fallback;
  }
  return value->get<double>();
}

bool ConfigReader::Bool(const char* key, bool fallback) {
  const json* value = Find(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    WrongType(key, "true or false");
    return fallback;
  }
  return value->get<bool>();
}

std::string ConfigReader::String(const char* key, const std::string& fallback) {
  const json* value = Find(key);
  if (value == nullptr) return fallback;
  if (!value->is_string()) {
    WrongType(key, "a string");
    return fallback;
  }
  return value->get<std::string>();
}

std::vector<int64_t> ConfigReader::IntList(const char* key) {
  const json* value = Find(key);
  if (value == nullptr) return {};
  int64_t one = 0;
  if (AsInt(*value, &one)) return {one};
  std::vector<int64_t> out;
  if (value->is_array()) {
    for (const json& item : *value) {
      if (!AsInt(item, &one)) break;
      out.push_back(one);
    }
    if (out.size() == value->size()) return out;
  }
  WrongType(key, "an integer or a list of integers");
  return {};
}

Activation ConfigReader::ActivationField(const char* key, Activation fallback) {
  const json* value = Find(key);
  if (value == nullptr) return fallback;
  std::string name = String(key, "");
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu") return Activation::kGeluErf;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new") return Activation::kGeluTanh;
  if (status_.ok()) {
    Fail(Unimplemented(Field(key) + ": activation '" + name +
                       "' is not supported (supported: silu, gelu, gelu_pytorch_tanh, gelu_new)"));
  }
  return fallback;
}

void ConfigReader::RopeScaling(RopeConfig* rope) {
  const json* scaling = Find("rope_scaling");
  if (scaling == nullptr) return;
  if (!scaling->is_object()) return WrongType("rope_scaling", "an object or null");
  ConfigReader inner(*scaling, label_ + ": rope_scaling");
  // "rope_type" is the current spelling; "type" the legacy one.
  std::string name = inner.String("rope_type", inner.String("type", "default"));
  StatusOr<RopeType> type = ParseRopeType(name);
  if (!inner.status().ok() || !type.ok())
    return Fail(inner.status().ok() ? type.status() : inner.status());
  rope->type = *type;
  if (rope->type == RopeType::kDefault) return;
  rope->factor = inner.RequiredDouble("factor");
  if (rope->type == RopeType::kLlama3) {
    rope->low_freq_factor = inner.RequiredDouble("low_freq_factor");
    rope->high_freq_factor = inner.RequiredDouble("high_freq_factor");
    rope->original_max_position_embeddings = inner.RequiredInt("original_max_position_embeddings");
  }
  Fail(inner.status());
}

void ReadDecoderFields(ConfigReader& r, ModelConfig* c) {
  c->hidden_size = r.RequiredInt("hidden_size");
  c->num_layers = r.RequiredInt("num_hidden_layers");
  c->num_heads = r.RequiredInt("num_attention_heads");
  c->intermediate_size = r.RequiredInt("intermediate_size");
  c->vocab_size = r.RequiredInt("vocab_size");
  c->max_position_embeddings = r.RequiredInt("max_position_embeddings");
  c->num_kv_heads = r.Int("num_key_value_heads", c->num_heads);
  c->head_dim = r.Int("head_dim", c->num_heads > 0 ? c->hidden_size / c->num_heads : 0);
  c->rope.theta = r.Double("rope_theta", 10000.0);
  c->rope.rotary_dim = c->head_dim;
  r.RopeScaling(&c->rope);
  c->eos_token_ids = r.IntList("eos_token_id");
}

namespace {

json RopeScalingJson(const RopeConfig& rope) {
  switch (rope.type) {
    case RopeType::kDefault:
      return nullptr;
    case RopeType::kLinear:
      return {{"rope_type", "linear"}, {"factor", rope.factor}};
    case RopeType::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", rope.factor},
              {"low_freq_factor", rope.low_freq_factor},
              {"high_freq_factor", rope.high_freq_factor},
              {"original_max_position_embeddings", rope.original_max_position_embeddings}};
  }
  return nullptr;
}

}  // namespace

void WriteDecoderFields(const ModelConfig& c, json* out) {
  json& j = *out;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope.theta;
  j["rope_scaling"] = RopeScalingJson(c.rope);
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
}

namespace {

// The first of `names` in `config` holding a positive integer (an integral
// float counts).
std::optional<int64_t> PositiveInt(const json& config, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = config.find(name);
    int64_t value = 0;
    if (it != config.end() && AsInt(*it, &value) && value > 0) return value;
  }
  return std::nullopt;
}

const std::initializer_list<const char*> kHiddenNames = {"hidden_size", "n_embd", "d_model"};

// Multimodal configs nest the language model's shapes under text_config.
const json& TextConfig(const json& config) {
  auto nested = config.find("text_config");
  if (!PositiveInt(config, kHiddenNames) && nested != config.end() && nested->is_object()) {
    return *nested;
  }
  return config;
}

int64_t KvHeads(const json& config, int64_t heads) {
  if (auto kv = PositiveInt(config, {"num_key_value_heads", "num_kv_heads", "n_head_kv"})) {
    return *kv;
  }
  auto multi_query = config.find("multi_query");
  if (multi_query != config.end() && multi_query->is_boolean() && multi_query->get<bool>()) {
    return 1;
  }
  return heads;
}

}  // namespace

StatusOr<ModelConfig> ParseModelShape(const json& top, const std::string& label) {
  if (!top.is_object()) return DataLoss(label + ": not a JSON object");
  StatusOr<ModelConfig> strict = ParseModelConfig(top);
  if (strict.ok()) return strict;

  const std::string where = label + ": ";
  const json& config = TextConfig(top);
  ModelConfig c;
  auto model_type = top.find("model_type");
  if (model_type != top.end() && model_type->is_string()) c.model_type = *model_type;
  std::optional<int64_t> hidden = PositiveInt(config, kHiddenNames);
  if (!hidden) return DataLoss(where + "no hidden size (hidden_size, n_embd or d_model)");
  std::optional<int64_t> heads =
      PositiveInt(config, {"num_attention_heads", "n_head", "num_heads"});
  if (!heads) return DataLoss(where + "no attention head count (num_attention_heads or n_head)");
  c.hidden_size = *hidden;
  c.num_heads = *heads;
  c.num_kv_heads = KvHeads(config, c.num_heads);
  c.head_dim = PositiveInt(config, {"head_dim"}).value_or(c.hidden_size / c.num_heads);
  if (c.head_dim <= 0) return DataLoss(where + "hidden size smaller than the head count");
  c.intermediate_size =
      PositiveInt(config, {"intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"})
          .value_or(4 * c.hidden_size);
  c.vocab_size = PositiveInt(config, {"vocab_size"}).value_or(0);
  c.num_layers = PositiveInt(config, {"num_hidden_layers", "n_layer", "num_layers"}).value_or(0);
  c.max_position_embeddings =
      PositiveInt(config, {"max_position_embeddings", "n_positions", "max_seq_len", "seq_length"})
          .value_or(0);
  c.rope.rotary_dim = c.head_dim;
  return c;
}

}  // namespace nightshift::checkpoint
