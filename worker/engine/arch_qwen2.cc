// Qwen2 / Qwen2.5: Llama's block with biases on q/k/v (never on o_proj).
// `sliding_window` applies only when `use_sliding_window` is true.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParseQwen2(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_bias = true;
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  if (r.Bool("use_sliding_window", false)) c->sliding_window = r.OptionalInt("sliding_window");
  return r.status();
}

}  // namespace

const Architecture& Qwen2Architecture() {
  static const Architecture arch{"qwen2", ParseQwen2, LlamaStyleTensorNames()};
  return arch;
}

}  // namespace nightshift::engine
