// Gemma (1): RMSNorm scaled by (1 + weight), embeddings multiplied by
// sqrt(hidden_size) in the activations' dtype, GeGLU with the activation named
// by `hidden_activation` (transformers falls back to tanh-approximated GELU
// when it is absent), explicit `head_dim` (transformers' default 256), tied
// embeddings by default.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParseGemma(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
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

}  // namespace

const Architecture& GemmaArchitecture() {
  static const Architecture arch{"gemma", ParseGemma, LlamaStyleTensorNames()};
  return arch;
}

}  // namespace nightshift::engine
