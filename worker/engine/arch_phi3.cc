// Phi-3: Llama's block with one fused `qkv_proj` (all q rows, then k, then v)
// and one fused `gate_up_proj` (gate half first), `partial_rotary_factor`
// when present, an optional `sliding_window`. Its long-context rope types
// (longrope, su) are refused by the rope parser.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParsePhi3(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
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

TensorNames Phi3TensorNames() {
  TensorNames n = LlamaStyleTensorNames();
  n.layer[static_cast<size_t>(LayerWeight::kQkv)] = "self_attn.qkv_proj.weight";
  n.layer[static_cast<size_t>(LayerWeight::kGateUp)] = "mlp.gate_up_proj.weight";
  return n;
}

}  // namespace

const Architecture& Phi3Architecture() {
  static const Architecture arch{"phi3", ParsePhi3, Phi3TensorNames()};
  return arch;
}

}  // namespace nightshift::engine
