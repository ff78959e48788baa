#include "worker/engine/decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
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

// Rows [first, first + m) of `s`, at rows [row, row + m) of q and out, each
// attending alone over exactly the keys it may see (PassRows::batch_invariant):
// a causal row the prefix of its cache up to itself, a label branch's row
// the prompt's keys then its own branch's up to itself, gathered.
void AttendRowByRow(const SequenceRows& s, int64_t first, int64_t m, int64_t row,
                    const at::Tensor& keys, const at::Tensor& values, const at::Tensor& q,
                    double scale, at::Tensor& out) {
  int64_t prompt = s.count;
  for (int64_t length : s.branches) prompt -= length;
  std::vector<DecodeRow> prefix_rows;
  for (int64_t k = 0; k < m; ++k) {
    const int64_t feed = first + k;  // this row's index in the sequence's feed
    const int64_t seen = s.past + feed + 1;
    if (feed < prompt) {
      prefix_rows.push_back({row + k, keys.narrow(1, 0, seen), values.narrow(1, 0, seen)});
      continue;
    }
    int64_t segment = prompt;  // where this row's branch starts in the feed
    for (int64_t length : s.branches) {
      if (feed < segment + length) break;
      segment += length;
    }
    const int64_t context = s.past + prompt, own = feed + 1 - segment;
    const at::Tensor k_seen =
        at::cat({keys.narrow(1, 0, context), keys.narrow(1, s.past + segment, own)}, 1);
    const at::Tensor v_seen =
        at::cat({values.narrow(1, 0, context), values.narrow(1, s.past + segment, own)}, 1);
    AttendDecodeRows(q, {{row + k, k_seen, v_seen}}, scale, out);
  }
  AttendDecodeRows(q, prefix_rows, scale, out);
}

// Attention of the micro-batch rows [a, a + x.size(0)) of the pass: each
// sequence's rows in it append their keys and values and attend to the cache
// up to themselves.
at::Tensor SelfAttention(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                         const at::Tensor& x, int64_t a, const PassRows& rows) {
  const int64_t n = x.size(0);
  Projections p = Project(c, w, x);
  if (c.qk_norm) {
    p.q = Norm(p.q, NormKind::kRms, Get(w, W::kQNorm), {}, c.norm_eps);
    p.k = Norm(p.k, NormKind::kRms, Get(w, W::kKNorm), {}, c.norm_eps);
  }
  RopeAngles rope = ComputeRopeAngles(
      *rows.inv_freq,
      std::vector<int64_t>(rows.positions.begin() + a, rows.positions.begin() + a + n));
  if (rows.device) {
    rope.cos = rope.cos.to(*rows.device);
    rope.sin = rope.sin.to(*rows.device);
  }
  at::Tensor q = ApplyRope(p.q, rope);
  at::Tensor k = ApplyRope(p.k, rope);
  p.q.reset();
  p.k.reset();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  at::Tensor out = at::empty({n, c.q_dim()}, x.options());
  // Decode rows attended together after the loop, on the CPU: their keys
  // and values are views of their caches when those hold float32 (a BF16
  // cache's are copies, which would all be alive at once).
  std::vector<DecodeRow> decode_rows;
  for (const SequenceRows& s : rows.sequences) {
    const int64_t lo = std::max(a, s.begin);
    const int64_t hi = std::min(a + n, s.begin + s.count);
    if (lo >= hi) continue;
    const int64_t first = lo - s.begin;
    const int64_t m = hi - lo;
    auto [keys, values] =
        s.cache->Append(layer, s.past + first, k.narrow(0, lo - a, m), p.v.narrow(0, lo - a, m));
    if (rows.batch_invariant && !rows.device) {
      AttendRowByRow(s, first, m, lo - a, keys, values, q, scale, out);
      continue;
    }
    at::Tensor allowed = AllowedKeys(s, first, m);
    if (!allowed.defined() && m == 1) {  // a decode row: it sees all of its cache
      decode_rows.push_back({lo - a, std::move(keys), std::move(values)});
      if (rows.device || s.cache->dtype() != KvDType::kFloat32) {
        AttendDecodeRows(q, decode_rows, scale, out);
        decode_rows.clear();
      }
      continue;
    }
    if (rows.device && allowed.defined()) allowed = allowed.to(*rows.device);
    out.narrow(0, lo - a, m)
        .copy_(
            Attention(q.narrow(0, lo - a, m), keys, values, allowed, scale, rows.max_score_bytes));
  }
  if (!decode_rows.empty()) AttendDecodeRows(q, decode_rows, scale, out);
  return Linear(out, Get(w, W::kO), Get(w, W::kOBias));
}

at::Tensor Mlp(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x) {
  switch (c.mlp) {
    case MlpKind::kGated: {
      at::Tensor gate = Linear(x, Get(w, W::kGate), Get(w, W::kGateBias));
      at::Tensor up = Linear(x, Get(w, W::kUp), Get(w, W::kUpBias));
      at::Tensor act = Activate(gate, c.activation);
      gate.reset();
      act.mul_(up);
      up.reset();
      return Linear(act, Get(w, W::kDown), Get(w, W::kDownBias));
    }
    case MlpKind::kGatedFused: {
      at::Tensor gate_up = Linear(x, Get(w, W::kGateUp));
      at::Tensor act = Activate(gate_up.narrow(1, 0, c.intermediate_size), c.activation);
      act.mul_(gate_up.narrow(1, c.intermediate_size, c.intermediate_size));
      gate_up.reset();
      return Linear(act, Get(w, W::kDown), Get(w, W::kDownBias));
    }
    case MlpKind::kPlain: {
      at::Tensor up = Linear(x, Get(w, W::kUp), Get(w, W::kUpBias));
      return Linear(Activate(up, c.activation), Get(w, W::kDown), Get(w, W::kDownBias));
    }
  }
  return x;
}

}  // namespace

KVCache::KVCache(const ModelConfig& config, int64_t capacity, KvDType dtype)
    : kv_heads_(config.num_kv_heads),
      head_dim_(config.head_dim),
      capacity_(capacity),
      dtype_(dtype),
      keys_(static_cast<size_t>(config.num_layers)),
      values_(static_cast<size_t>(config.num_layers)) {}

uint64_t KVCache::bytes() const {
  return static_cast<uint64_t>(capacity_) *
         planner::KvBytesPerToken(static_cast<int64_t>(keys_.size()), kv_heads_, head_dim_,
                                  KvDTypeBytes(dtype_));
}

std::pair<at::Tensor, at::Tensor> KVCache::Append(int64_t layer, int64_t at, const at::Tensor& keys,
                                                  const at::Tensor& values) {
  at::Tensor& k = keys_[static_cast<size_t>(layer)];
  at::Tensor& v = values_[static_cast<size_t>(layer)];
  if (!k.defined()) {
    const at::ScalarType type = dtype_ == KvDType::kBFloat16 ? at::kBFloat16 : at::kFloat;
    k = at::empty({kv_heads_, capacity_, head_dim_}, keys.options().dtype(type));
    v = at::empty({kv_heads_, capacity_, head_dim_}, values.options().dtype(type));
  }
  const int64_t rows = keys.size(0);
  k.narrow(1, at, rows).copy_(keys.transpose(0, 1));
  v.narrow(1, at, rows).copy_(values.transpose(0, 1));
  at::Tensor cached_k = k.narrow(1, 0, at + rows), cached_v = v.narrow(1, 0, at + rows);
  if (dtype_ == KvDType::kFloat32) return {cached_k, cached_v};
  return {cached_k.to(keys.scalar_type()), cached_v.to(values.scalar_type())};
}

void KVCache::Release(int64_t layer) {
  keys_[static_cast<size_t>(layer)].reset();
  values_[static_cast<size_t>(layer)].reset();
}

at::Tensor Embed(const ModelConfig& config, const Weight& table, const std::vector<int64_t>& ids) {
  at::Tensor hidden = GatherRows(table, ids);
  if (config.scale_embeddings) {
    // transformers rounds sqrt(hidden) to the activations' dtype (float32 here).
    hidden.mul_(static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size))));
  }
  return hidden;
}

at::Tensor AllowedKeys(const SequenceRows& s, int64_t first, int64_t n) {
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong);
  // Feed row r may attend to cached keys, to feed rows 0..r of its prompt
  // and, in a branch, to the rows of its own branch up to itself.
  if (n == 1 && s.branches.empty()) return {};  // a causal row sees every key before it
  int64_t prompt = s.count;
  for (int64_t length : s.branches) prompt -= length;
  at::Tensor segment = at::zeros({n}, longs);  // where row r's own segment starts in the feed
  int64_t begin = prompt;
  for (int64_t length : s.branches) {
    const int64_t lo = std::max(begin, first);
    const int64_t hi = std::min(begin + length, first + n);
    if (lo < hi) segment.narrow(0, lo - first, hi - lo).fill_(begin);
    begin += length;
  }
  at::Tensor key = at::arange(s.past + first + n, longs).unsqueeze(0);
  at::Tensor query = at::arange(first, first + n, longs).unsqueeze(1);
  return (key <= query + s.past) &
         ((key < s.past + prompt) | (key >= segment.unsqueeze(1) + s.past));
}

uint64_t ActivationBytesPerRow(const ModelConfig& c) { return planner::ActivationBytesPerRow(c); }

int64_t MicroBatchRows(const ModelConfig& c, uint64_t budget_bytes) {
  static_assert(kMaxMicroBatchRows == 256, "planner::MicroBatchRows caps at 256 rows");
  return planner::MicroBatchRows(c, budget_bytes);
}

namespace {

void ReleaseTransient(int64_t layer, const PassRows& rows) {
  for (const SequenceRows& s : rows.sequences) {
    if (s.transient) s.cache->Release(layer);
  }
}

}  // namespace

void RunDecoderLayer(const ModelConfig& c, const LayerWeights& w, int64_t layer, at::Tensor& hidden,
                     const PassRows& rows) {
  const int64_t tokens = hidden.size(0);
  const int64_t step = std::max<int64_t>(1, rows.micro_batch_rows);
  for (int64_t a = 0; a < tokens; a += step) {
    at::Tensor x = hidden.narrow(0, a, std::min(step, tokens - a));
    at::Tensor attn = SelfAttention(
        c, w, layer, Norm(x, c.norm, Get(w, W::kAttnNorm), Get(w, W::kAttnNormBias), c.norm_eps), a,
        rows);
    at::Tensor out;
    if (c.parallel_residual) {
      at::Tensor mlp =
          Mlp(c, w, Norm(x, c.norm, Get(w, W::kMlpNorm), Get(w, W::kMlpNormBias), c.norm_eps));
      out = x + attn + mlp;
    } else {
      at::Tensor mid = x + attn;
      attn.reset();
      out = mid +
            Mlp(c, w, Norm(mid, c.norm, Get(w, W::kMlpNorm), Get(w, W::kMlpNormBias), c.norm_eps));
    }
    x.copy_(out);  // this micro-batch's old rows are no longer read
  }
  ReleaseTransient(layer, rows);
}

void RunAttentionHalf(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                      at::Tensor& hidden, const PassRows& rows) {
  const int64_t tokens = hidden.size(0);
  const int64_t step = std::max<int64_t>(1, rows.micro_batch_rows);
  for (int64_t a = 0; a < tokens; a += step) {
    at::Tensor x = hidden.narrow(0, a, std::min(step, tokens - a));
    x.add_(SelfAttention(
        c, w, layer, Norm(x, c.norm, Get(w, W::kAttnNorm), Get(w, W::kAttnNormBias), c.norm_eps), a,
        rows));
  }
  ReleaseTransient(layer, rows);
}

at::Tensor GatedMlp(const at::Tensor& x, const Weight& gate, const Weight& up, const Weight& down,
                    Activation activation) {
  at::Tensor g = Linear(x, gate);
  at::Tensor act = Activate(g, activation);
  g.reset();
  act.mul_(Linear(x, up));
  return Linear(act, down);
}

}  // namespace nightshift::engine
