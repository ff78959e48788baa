// GPT-NeoX / Pythia: LayerNorm with bias, one fused `query_key_value` laid out
// per head as [q k v], partial rotary (`rotary_pct` of each head, base
// `rotary_emb_base`), plain GELU MLP with biases, parallel residual
// (x + attn(ln1(x)) + mlp(ln2(x))) unless `use_parallel_residual` is false,
// untied `embed_out`.
#include "worker/engine/architecture.h"

namespace nightshift::engine {
namespace {

Status ParseGptNeox(const nlohmann::json& json, ModelConfig* c) {
  ConfigReader r(json);
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

TensorNames GptNeoxTensorNames() {
  TensorNames n;
  n.embedding = "gpt_neox.embed_in.weight";
  n.final_norm = "gpt_neox.final_layer_norm.weight";
  n.final_norm_bias = "gpt_neox.final_layer_norm.bias";
  n.lm_head = "embed_out.weight";
  n.layer_prefix = "gpt_neox.layers.";
  auto set = [&n](LayerWeight role, const char* name) {
    n.layer[static_cast<size_t>(role)] = name;
  };
  set(LayerWeight::kAttnNorm, "input_layernorm.weight");
  set(LayerWeight::kAttnNormBias, "input_layernorm.bias");
  set(LayerWeight::kQkv, "attention.query_key_value.weight");
  set(LayerWeight::kQkvBias, "attention.query_key_value.bias");
  set(LayerWeight::kO, "attention.dense.weight");
  set(LayerWeight::kOBias, "attention.dense.bias");
  set(LayerWeight::kMlpNorm, "post_attention_layernorm.weight");
  set(LayerWeight::kMlpNormBias, "post_attention_layernorm.bias");
  set(LayerWeight::kUp, "mlp.dense_h_to_4h.weight");
  set(LayerWeight::kUpBias, "mlp.dense_h_to_4h.bias");
  set(LayerWeight::kDown, "mlp.dense_4h_to_h.weight");
  set(LayerWeight::kDownBias, "mlp.dense_4h_to_h.bias");
  // Older Pythia checkpoints persist the causal mask buffers too.
  n.ignored_suffixes = {".inv_freq", ".attention.bias", ".attention.masked_bias"};
  return n;
}

}  // namespace

const Architecture& GptNeoxArchitecture() {
  static const Architecture arch{"gpt_neox", ParseGptNeox, GptNeoxTensorNames()};
  return arch;
}

}  // namespace nightshift::engine
