#include "worker/engine/decoder.h"

#include <ATen/ATen.h>

#include <cmath>

#include "planner/model_facts.h"

namespace nightshift::engine {
namespace {

using W = LayerWeight;

const Weight& Get(const LayerWeights& weights, LayerWeight role) {
  return weights[static_cast<size_t>(role)];
}

struct Projections {
  at::Tensor q;  // [tokens, heads, head_dim]
  at::Tensor k;  // [tokens, kv_heads, head_dim]
  at::Tensor v;
};

Projections Project(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x) {
  const int64_t tokens = x.size(0);
  const int64_t d = c.head_dim;
  at::Tensor q, k, v;
  switch (c.qkv_layout) {
    case QkvLayout::kSeparate:
      q = Linear(x, Get(w, W::kQ), Get(w, W::kQBias));
      k = Linear(x, Get(w, W::kK), Get(w, W::kKBias));
      v = Linear(x, Get(w, W::kV), Get(w, W::kVBias));
      break;
    case QkvLayout::kFusedBlocks: {
      at::Tensor qkv = Linear(x, Get(w, W::kQkv), Get(w, W::kQkvBias));
      q = qkv.narrow(1, 0, c.q_dim());
      k = qkv.narrow(1, c.q_dim(), c.kv_dim());
      v = qkv.narrow(1, c.q_dim() + c.kv_dim(), c.kv_dim());
      break;
    }
    case QkvLayout::kFusedPerHead: {
      at::Tensor qkv =
          Linear(x, Get(w, W::kQkv), Get(w, W::kQkvBias)).view({tokens, c.num_heads, 3 * d});
      q = qkv.narrow(2, 0, d);
      k = qkv.narrow(2, d, d);
      v = qkv.narrow(2, 2 * d, d);
      break;
    }
  }
  return {q.reshape({tokens, c.num_heads, d}), k.reshape({tokens, c.num_kv_heads, d}),
          v.reshape({tokens, c.num_kv_heads, d})};
}

at::Tensor SelfAttention(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                         const at::Tensor& x, const PassRows& rows) {
  Projections p = Project(c, w, x);
  if (c.qk_norm) {
    p.q = Norm(p.q, NormKind::kRms, Get(w, W::kQNorm), {}, c.norm_eps);
    p.k = Norm(p.k, NormKind::kRms, Get(w, W::kKNorm), {}, c.norm_eps);
  }
  at::Tensor q = ApplyRope(p.q, rows.rope);
  at::Tensor k = ApplyRope(p.k, rows.rope);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  at::Tensor out = at::empty({x.size(0), c.q_dim()}, x.options());
  for (const SequenceRows& s : rows.sequences) {
    auto [keys, values] = s.cache->Append(layer, s.past, k.narrow(0, s.begin, s.count),
                                          p.v.narrow(0, s.begin, s.count));
    out.narrow(0, s.begin, s.count)
        .copy_(Attention(q.narrow(0, s.begin, s.count), keys, values, s.allowed, scale));
  }
  return Linear(out, Get(w, W::kO), Get(w, W::kOBias));
}

at::Tensor Mlp(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x) {
  switch (c.mlp) {
    case MlpKind::kGated: {
      at::Tensor gate = Linear(x, Get(w, W::kGate), Get(w, W::kGateBias));
      at::Tensor up = Linear(x, Get(w, W::kUp), Get(w, W::kUpBias));
      return Linear(Activate(gate, c.activation) * up, Get(w, W::kDown), Get(w, W::kDownBias));
    }
    case MlpKind::kGatedFused: {
      at::Tensor gate_up = Linear(x, Get(w, W::kGateUp));
      at::Tensor gate = gate_up.narrow(1, 0, c.intermediate_size);
      at::Tensor up = gate_up.narrow(1, c.intermediate_size, c.intermediate_size);
      return Linear(Activate(gate, c.activation) * up, Get(w, W::kDown), Get(w, W::kDownBias));
    }
    case MlpKind::kPlain: {
      at::Tensor up = Linear(x, Get(w, W::kUp), Get(w, W::kUpBias));
      return Linear(Activate(up, c.activation), Get(w, W::kDown), Get(w, W::kDownBias));
    }
  }
  return x;
}

}  // namespace

KVCache::KVCache(const ModelConfig& config, int64_t capacity)
    : kv_heads_(config.num_kv_heads),
      head_dim_(config.head_dim),
      capacity_(capacity),
      keys_(static_cast<size_t>(config.num_layers)),
      values_(static_cast<size_t>(config.num_layers)) {}

uint64_t KVCache::bytes() const {
  static_assert(sizeof(float) == planner::kEngineKvDtypeBytes, "the KV cache is float32");
  return static_cast<uint64_t>(capacity_) *
         planner::KvBytesPerToken(static_cast<int64_t>(keys_.size()), kv_heads_, head_dim_,
                                  planner::kEngineKvDtypeBytes);
}


std::pair<at::Tensor, at::Tensor> KVCache::Append(int64_t layer, int64_t at, const at::Tensor& keys,
                                                  const at::Tensor& values) {
  at::Tensor& k = keys_[static_cast<size_t>(layer)];
  at::Tensor& v = values_[static_cast<size_t>(layer)];
  if (!k.defined()) {
    k = at::empty({kv_heads_, capacity_, head_dim_}, keys.options());
    v = at::empty({kv_heads_, capacity_, head_dim_}, values.options());
  }
  const int64_t rows = keys.size(0);
  k.narrow(1, at, rows).copy_(keys.transpose(0, 1));
  v.narrow(1, at, rows).copy_(values.transpose(0, 1));
  return {k.narrow(1, 0, at + rows), v.narrow(1, 0, at + rows)};
}

at::Tensor Embed(const ModelConfig& config, const Weight& table, const std::vector<int64_t>& ids) {
  at::Tensor hidden = GatherRows(table, ids);
  if (config.scale_embeddings) {
    // transformers rounds sqrt(hidden) to the activations' dtype (float32 here).
    hidden.mul_(static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size))));
  }
  return hidden;
}

at::Tensor RunDecoderLayer(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                           const at::Tensor& hidden, const PassRows& rows) {
  at::Tensor attn = SelfAttention(
      c, w, layer, Norm(hidden, c.norm, Get(w, W::kAttnNorm), Get(w, W::kAttnNormBias), c.norm_eps),
      rows);
  if (c.parallel_residual) {
    at::Tensor mlp_in =
        Norm(hidden, c.norm, Get(w, W::kMlpNorm), Get(w, W::kMlpNormBias), c.norm_eps);
    return hidden + attn + Mlp(c, w, mlp_in);
  }
  at::Tensor mid = hidden + attn;
  return mid +
         Mlp(c, w, Norm(mid, c.norm, Get(w, W::kMlpNorm), Get(w, W::kMlpNormBias), c.norm_eps));
}

}  // namespace nightshift::engine
