// Qwen3: Llama's block with RMSNorm over head_dim on q and k (q_norm, k_norm)
// applied before RoPE, an explicit `head_dim` (often != hidden / heads), and
// optional `attention_bias` on q/k/v/o. `sliding_window` applies only when
// `use_sliding_window` is true.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParseQwen3(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_bias = c->o_bias = r.Bool("attention_bias", false);
  c->qk_norm = true;
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  if (r.Bool("use_sliding_window", false)) c->sliding_window = r.OptionalInt("sliding_window");
  return r.status();
}

}  // namespace

const Architecture& Qwen3Architecture() {
  static const Architecture arch{"qwen3", ParseQwen3, LlamaStyleTensorNames()};
  return arch;
}

}  // namespace nightshift::engine
