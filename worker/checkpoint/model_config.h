// The one reader (and writer) of config.json. What the engine, the planner,
// the worker's model scan and the checkpoint generator know about a model as
// plain data: the shape numbers and the flags that wire the generic decoder
// block (norm flavour, activation, fused projections, biases, q/k-norm,
// parallel residual, rotary embedding).
//
// Each registered family (model_families.cc: llama, mistral, qwen2, qwen3,
// gemma, gpt_neox, phi3) has a parser that fills a ModelConfig from its
// config.json keys with a ConfigReader and a writer that spells a
// ModelConfig back in those same keys, side by side, so what the generator
// writes is what the engine reads. ParseModelConfig is strict (registered
// families only, every value checked); ParseModelShape also sizes configs of
// families the engine does not run, for `nightshift plan`.
//
// The engine's tensor naming and block wiring live in worker/engine
// (architecture.h), which imports these names into nightshift::engine.
//
// libtorch-free. Plain values: copy freely; no shared state. The family table
// is an immutable static, safe to read from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nightshift::checkpoint {

enum class NormKind {
  kRms,            // x / rms(x) * w                 (Llama, Qwen, Mistral, Phi-3)
  kRmsUnitOffset,  // x / rms(x) * (1 + w)           (Gemma)
  kLayerNorm,      // (x - mean) / std * w + b       (GPT-NeoX)
};

enum class Activation {
  kSilu,      // "silu", "swish"
  kGeluErf,   // "gelu": exact, erf-based
  kGeluTanh,  // "gelu_pytorch_tanh", "gelu_new": tanh approximation
};

// The config.json spelling the writers use: "silu", "gelu", "gelu_pytorch_tanh".
const char* ActivationName(Activation activation);

// How the attention input projections are stored.
enum class QkvLayout {
  kSeparate,      // q_proj, k_proj, v_proj
  kFusedBlocks,   // one matrix: all q rows, then all k rows, then all v rows (Phi-3 qkv_proj)
  kFusedPerHead,  // one matrix: per head [q k v] (GPT-NeoX query_key_value); needs kv heads ==
                  // heads
};

enum class MlpKind {
  kGated,       // down(act(gate(x)) * up(x))                       (Llama, Gemma, Qwen)
  kGatedFused,  // gate_up(x) split in halves [gate, up], then as kGated (Phi-3)
  kPlain,       // down(act(up(x)))                                 (GPT-NeoX)
};

enum class RopeType { kDefault, kLinear, kLlama3 };

// A mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE). In a sparse layer the
// MLP is a router (`num_experts` logits per token, softmax in float32 over
// all of them, the `top_k` largest kept, renormalised to sum to 1 when
// `norm_topk_prob`) and `num_experts` gated MLPs of `expert_intermediate_size`
// (the config's activation), plus, when `shared_expert_intermediate_size` is
// set, a shared gated MLP of that width scaled by sigmoid(shared_expert_gate
// . x) (Qwen2-MoE). The other layers are dense, with `intermediate_size`.
struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense model
  int64_t top_k = 0;        // num_experts_per_tok
  int64_t expert_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = false;
  // Layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not
  // in mlp_only_layers (transformers' rule).
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};

bool operator==(const MoeConfig& a, const MoeConfig& b);

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // The leading dimensions of each head that rotate (rotate-half style);
  // smaller than head_dim for partial rotary (GPT-NeoX rotary_pct, Phi-3
  // partial_rotary_factor). Even, in (0, head_dim].
  int64_t rotary_dim = 0;
  double factor = 1.0;  // kLinear and kLlama3
  // kLlama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

bool operator==(const RopeConfig& a, const RopeConfig& b);
inline bool operator!=(const RopeConfig& a, const RopeConfig& b) { return !(a == b); }

struct ModelConfig {
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  // Set when attention is windowed: each token sees only the last
  // `sliding_window` positions. The engine runs only contexts that fit the
  // window (where windowed and full attention agree) and refuses longer ones.
  std::optional<int64_t> sliding_window;
  double norm_eps = 1e-6;

  NormKind norm = NormKind::kRms;
  Activation activation = Activation::kSilu;
  QkvLayout qkv_layout = QkvLayout::kSeparate;
  MlpKind mlp = MlpKind::kGated;
  bool qkv_bias = false;           // biases on the q/k/v (or fused qkv) projection
  bool o_bias = false;             // bias on the attention output projection
  bool mlp_bias = false;           // biases on every MLP projection
  bool qk_norm = false;            // RMSNorm over head_dim on q and k before RoPE (Qwen3)
  bool parallel_residual = false;  // x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX)
  bool tied_embeddings = false;    // the LM head is the token embedding
  bool scale_embeddings = false;   // embeddings x sqrt(hidden_size) (Gemma)
  RopeConfig rope;
  MoeConfig moe;

  // config.json `eos_token_id` (an id or a list); the engine prefers
  // generation_config.json's when present.
  std::vector<int64_t> eos_token_ids;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  bool is_moe() const { return moe.num_experts > 0; }
  // Whether layer `layer`'s MLP is a mixture of experts (MoeConfig's rule).
  bool IsSparseLayer(int64_t layer) const;
};

// Field by field (doubles compared exactly).
bool operator==(const ModelConfig& a, const ModelConfig& b);
inline bool operator!=(const ModelConfig& a, const ModelConfig& b) { return !(a == b); }

// Checks what every architecture relies on: positive sizes, heads divisible
// by KV heads, a rotary dimension that is even and at most head_dim, fused
// per-head qkv only without GQA, sane rope scaling numbers. Returns DataLoss
// "config.json: ..." naming the field, or OK.
Status ValidateModelConfig(const ModelConfig& config);

// Reads typed fields out of config.json, remembering the first error so a
// family's parser reads like a list of fields:
//
//   ConfigReader r(json);
//   c.hidden_size = r.RequiredInt("hidden_size");
//   c.norm_eps = r.Double("rms_norm_eps", 1e-6);
//   NS_RETURN_IF_ERROR(r.status());
//
// A key that is absent or JSON null takes the fallback; a required one is a
// DataLoss "config.json: required field 'x' is missing"; a value of the wrong
// type is a DataLoss naming the field. After an error every getter returns its
// fallback (0 for required fields). Not thread-safe; `json` must outlive it.
class ConfigReader {
 public:
  // `label` starts every error message ("config.json").
  explicit ConfigReader(const nlohmann::json& json, std::string label = "config.json");

  int64_t RequiredInt(const char* key);
  double RequiredDouble(const char* key);
  int64_t Int(const char* key, int64_t fallback);
  std::optional<int64_t> OptionalInt(const char* key);
  double Double(const char* key, double fallback);
  bool Bool(const char* key, bool fallback);
  std::string String(const char* key, const std::string& fallback);
  // An integer or a list of integers; absent or null gives an empty list.
  std::vector<int64_t> IntList(const char* key);
  // Activation named by `key` ("silu", "gelu", ...); an unknown name is
  // Unimplemented naming it.
  Activation ActivationField(const char* key, Activation fallback);
  // `rope_scaling` (null, or an object with `rope_type` or the legacy
  // `type`): default, linear and llama3 are read into *rope (theta and
  // rotary_dim untouched); any other type is Unimplemented naming it.
  void RopeScaling(RopeConfig* rope);
  // Whether `key` is present (null counts as present).
  bool Has(const char* key) const;

  const Status& status() const { return status_; }

 private:
  // The value at `key`, or nullptr when absent, null, or after an error.
  const nlohmann::json* Find(const char* key) const;
  void Fail(Status status);
  void WrongType(const char* key, const char* expected);
  void Missing(const char* key);
  std::string Field(const char* key) const;

  const nlohmann::json& json_;
  std::string label_;
  Status status_;
};

// Reads the fields every decoder family spells the same way (the Llama
// spelling): hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size, vocab_size, max_position_embeddings (required);
// num_key_value_heads (default: heads), head_dim (default: hidden / heads),
// rope_theta (default 10000), rope_scaling, eos_token_id, and the full rotary
// dimension. Families then set their flags and family-specific keys.
void ReadDecoderFields(ConfigReader& reader, ModelConfig* config);
// The inverse: writes those keys of `config` into *out (head_dim always,
// rope_scaling null for plain RoPE, eos_token_id an id when there is one, a
// list when several, absent when none).
void WriteDecoderFields(const ModelConfig& config, nlohmann::json* out);

// A registered config.json family: its parser and its writer, in the same
// spelling.
struct ModelFamily {
  std::string model_type;  // config.json "model_type"
  // Fills everything but model_type from config.json; the result is then
  // checked by ValidateModelConfig. Errors name the config field.
  Status (*parse)(const nlohmann::json& config, ModelConfig* out);
  // Writes every key `parse` reads (and model_type) for `config`, so that
  // parse(write(c)) == c for any valid c of this family whose flags are the
  // family's (the flags the family fixes, e.g. Qwen2's q/k/v biases, are not
  // written).
  void (*write)(const ModelConfig& config, nlohmann::json* out);
};

// Every registered family, in a fixed order (the engine's architecture table
// has one entry per family, in this order).
const std::vector<const ModelFamily*>& ModelFamilies();

// The family for `model_type`, or Unimplemented "model_type 'x' is not
// supported (supported: ...)". Mixture-of-experts families other than
// mixtral, qwen2_moe and qwen3_moe (DeepSeek, gpt-oss, OLMoE, ...) are
// refused naming what the engine lacks for them.
StatusOr<const ModelFamily*> FindModelFamily(const std::string& model_type);

// Finds the family of `config` (its "model_type"; DataLoss when absent),
// parses and validates it. The result's model_type is set. Pure.
StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& config);

// config.json keys for `config` in its family's spelling (model_type
// included); Unimplemented for a model_type that is not registered. The
// caller adds what is not model shape (architectures, bos_token_id,
// torch_dtype, ...). Pure.
StatusOr<nlohmann::json> ModelConfigJson(const ModelConfig& config);

// The sizes of a decoder model from the config.json of any family, for
// planning checkpoints the engine may not run. A registered family's config
// that ParseModelConfig accepts is read by it. Anything else (an unregistered
// family, or a registered one the engine refuses, e.g. for its rope type) is
// read from the top level, or from `text_config` when the top level has no
// hidden size (multimodal configs nest the language model there), under the
// names the families use:
//   hidden_size              hidden_size | n_embd | d_model
//   num_heads                num_attention_heads | n_head | num_heads
//   num_kv_heads             num_key_value_heads | num_kv_heads | n_head_kv,
//                            1 when multi_query is true, else = heads
//   head_dim                 head_dim when a positive integer, else hidden / heads
//   intermediate_size        intermediate_size | n_inner | ffn_dim | ffn_hidden_size,
//                            else 4 x hidden
//   vocab_size               vocab_size, else 0 (unknown)
//   num_layers               num_hidden_layers | n_layer | num_layers, else 0
//   max_position_embeddings  max_position_embeddings | n_positions | max_seq_len |
//                            seq_length, else 0
// (the first name holding a positive integer wins); flags keep their defaults
// and nothing else is validated: such a config sizes a plan, it never runs.
// A config without a hidden size or head count, or whose hidden size is
// smaller than its head count, is DataLoss "<label>: ..." naming the keys.
// Pure.
StatusOr<ModelConfig> ParseModelShape(const nlohmann::json& config,
                                      const std::string& label = "config.json");

}  // namespace nightshift::checkpoint
