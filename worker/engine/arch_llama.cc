// Llama (1, 2, 3, 3.1 with rope_scaling llama3 or linear, also under the
// legacy key `type`): RMSNorm, SiLU-gated MLP, grouped-query attention,
// optional biases (`attention_bias` on q/k/v/o, `mlp_bias`), optionally tied
// embeddings.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParseLlama(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->qkv_bias = c->o_bias = r.Bool("attention_bias", false);
  c->mlp_bias = r.Bool("mlp_bias", false);
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  return r.status();
}

}  // namespace

const Architecture& LlamaArchitecture() {
  static const Architecture arch{"llama", ParseLlama, LlamaStyleTensorNames()};
  return arch;
}

}  // namespace nightshift::engine
