// Mistral: Llama's block without biases, plus `sliding_window` (transformers'
// default 4096 when the key is absent; null disables it). Windowed attention
// is not implemented: the engine runs contexts up to the window, where it
// equals full attention, and refuses longer ones.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParseMistral(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
  ReadDecoderFields(r, c);
  c->norm_eps = r.Double("rms_norm_eps", 1e-6);
  c->activation = r.ActivationField("hidden_act", Activation::kSilu);
  c->tied_embeddings = r.Bool("tie_word_embeddings", false);
  c->sliding_window = json.contains("sliding_window") ? r.OptionalInt("sliding_window") : 4096;
  return r.status();
}

}  // namespace

const Architecture& MistralArchitecture() {
  static const Architecture arch{"mistral", ParseMistral, LlamaStyleTensorNames()};
  return arch;
}

}  // namespace nightshift::engine
