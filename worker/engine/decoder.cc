#include "worker/engine/decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

// A run of rows [first, first + m) of a feed that lie on one chain: row
// first + k attends to `length0 + k + 1` keys, those at key_rows[...] of
// the cache (null: positions 0, 1, ...).
struct ChainPart {
  int64_t first = 0;
  int64_t m = 0;
  int64_t length0 = 0;
  const int32_t* key_rows = nullptr;
};

// The chain parts of rows [first, first + m) of `s`, in order.
std::vector<ChainPart> ChainParts(const SequenceRows& s, int64_t first, int64_t m) {
  if (s.chains.empty()) return {{first, m, s.past + first, nullptr}};
  std::vector<ChainPart> parts;
  for (const TrieChain& chain : s.chains) {
    const int64_t lo = std::max(first, chain.begin), hi = std::min(first + m, chain.end);
    if (lo >= hi) continue;
    // The chain from a root along the first rows is laid out in order.
    const bool in_order = chain.keys.back() + 1 == static_cast<int32_t>(chain.keys.size());
    parts.push_back(
        {lo, hi - lo, chain.depth + lo - chain.begin, in_order ? nullptr : chain.keys.data()});
  }
  return parts;
}

// Attention of rows [first, first + m) of `s`, at rows [row, row + m) of q
// and out, each row alone over exactly the keys it may see
// (PassRows::batch_invariant): its chain's keys up to itself, read in
// place.
void AttendRowByRow(const SequenceRows& s, int64_t first, int64_t m, int64_t row,
                    const at::Tensor& keys, const at::Tensor& values, const at::Tensor& q,
                    double scale, at::Tensor& out) {
  std::vector<DecodeRow> rows;
  for (const ChainPart& part : ChainParts(s, first, m)) {
    for (int64_t k = 0; k < part.m; ++k) {
      const int64_t length = part.length0 + k + 1;
      const int64_t at = row + part.first - first + k;
      if (part.key_rows == nullptr) {
        rows.push_back({at, keys.narrow(1, 0, length), values.narrow(1, 0, length)});
      } else {
        rows.push_back({at, keys, values, part.key_rows, length});
      }
    }
  }
  AttendDecodeRows(q, rows, scale, out);
}

// The same through Attention: a chain part's rows at once under a causal
// mask over their keys (gathered when not in order), the mask built on the
// CPU and moved to `device`.
void AttendByChain(const SequenceRows& s, int64_t first, int64_t m, int64_t row,
                   const at::Tensor& keys, const at::Tensor& values, const at::Tensor& q,
                   double scale, const PassRows& rows, at::Tensor& out) {
  for (const ChainPart& part : ChainParts(s, first, m)) {
    const int64_t length = part.length0 + part.m;
    at::Tensor k = keys.narrow(1, 0, length), v = values.narrow(1, 0, length);
    if (part.key_rows != nullptr) {
      const at::Tensor index =
          at::from_blob(const_cast<int32_t*>(part.key_rows), {length}, at::kInt)
              .to(keys.device(), at::kLong);
      k = keys.index_select(1, index);
      v = values.index_select(1, index);
    }
    at::Tensor allowed;
    if (part.m > 1) {
      allowed = CausalMask(part.length0, part.m);
      if (rows.device) allowed = allowed.to(*rows.device);
    }
    const int64_t at = row + part.first - first;
    out.narrow(0, at, part.m)
        .copy_(Attention(q.narrow(0, at, part.m), k, v, allowed, scale, rows.max_score_bytes));
  }
}

// Attention of the micro-batch rows [a, a + x.size(0)) of the pass: each
// feed's rows in it append their keys and values and attend to the cache
// up to themselves (along their chains, in a trie).
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
    if (s.prefix != nullptr && first == 0) s.cache->CopyFrom(layer, *s.prefix, s.prefix_rows);
    if (s.cache->shared_positions() > 0 && s.chains.empty() && m == 1 && !rows.device &&
        s.cache->dtype() == KvDType::kFloat32) {
      // A decode row after a prefix it shares, read where it lies (Append
      // would copy it out of the shared cache, as it does for the other
      // dtypes and devices: the same numbers, a copy per layer and row).
      s.cache->Write(layer, s.past, k.narrow(0, lo - a, m), p.v.narrow(0, lo - a, m));
      decode_rows.push_back(s.cache->Attending(lo - a, layer, s.past + 1));
      continue;
    }
    auto [keys, values] =
        s.cache->Append(layer, s.past + first, k.narrow(0, lo - a, m), p.v.narrow(0, lo - a, m));
    if (rows.batch_invariant && !rows.device) {
      AttendRowByRow(s, first, m, lo - a, keys, values, q, scale, out);
      continue;
    }
    if (s.chains.empty() && m == 1) {  // a decode row: it sees all of its cache
      decode_rows.push_back({lo - a, std::move(keys), std::move(values)});
      if (rows.device || s.cache->dtype() != KvDType::kFloat32) {
        AttendDecodeRows(q, decode_rows, scale, out);
        decode_rows.clear();
      }
      continue;
    }
    AttendByChain(s, first, m, lo - a, keys, values, q, scale, rows, out);
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
  return static_cast<uint64_t>(own_capacity()) *
         planner::KvBytesPerToken(static_cast<int64_t>(keys_.size()), kv_heads_, head_dim_,
                                  KvDTypeBytes(dtype_));
}

void KVCache::Share(std::shared_ptr<const KVCache> shared, std::vector<int32_t> rows) {
  for (const at::Tensor& k : keys_) {
    if (k.defined()) throw std::logic_error("KVCache::Share after a layer was written");
  }
  if (static_cast<int64_t>(rows.size()) > capacity_) {
    throw std::invalid_argument("KVCache::Share: more shared positions than the capacity");
  }
  shared_ = std::move(shared);
  shared_rows_ = std::move(rows);
}

void KVCache::Write(int64_t layer, int64_t at, const at::Tensor& keys, const at::Tensor& values) {
  at::Tensor& k = keys_[static_cast<size_t>(layer)];
  at::Tensor& v = values_[static_cast<size_t>(layer)];
  if (!k.defined()) {
    const at::ScalarType type = dtype_ == KvDType::kBFloat16 ? at::kBFloat16 : at::kFloat;
    k = at::empty({kv_heads_, own_capacity(), head_dim_}, keys.options().dtype(type));
    v = at::empty({kv_heads_, own_capacity(), head_dim_}, values.options().dtype(type));
  }
  const int64_t rows = keys.size(0);
  const int64_t own = at - shared_positions();
  if (own < 0) throw std::invalid_argument("KVCache::Write into a shared position");
  k.narrow(1, own, rows).copy_(keys.transpose(0, 1));
  v.narrow(1, own, rows).copy_(values.transpose(0, 1));
}

std::pair<at::Tensor, at::Tensor> KVCache::Read(int64_t layer, int64_t length,
                                                at::ScalarType type) const {
  const int64_t n = shared_positions();
  at::Tensor k = keys_[static_cast<size_t>(layer)].narrow(1, 0, length - n);
  at::Tensor v = values_[static_cast<size_t>(layer)].narrow(1, 0, length - n);
  if (n > 0) {
    const at::Tensor index =
        at::tensor(std::vector<int64_t>(shared_rows_.begin(), shared_rows_.end()),
                   at::TensorOptions().dtype(at::kLong))
            .to(k.device());
    k = at::cat({shared_->keys_[static_cast<size_t>(layer)].index_select(1, index), k}, 1);
    v = at::cat({shared_->values_[static_cast<size_t>(layer)].index_select(1, index), v}, 1);
  }
  if (k.scalar_type() == type) return {k, v};
  return {k.to(type), v.to(type)};
}

std::pair<at::Tensor, at::Tensor> KVCache::Append(int64_t layer, int64_t at, const at::Tensor& keys,
                                                  const at::Tensor& values) {
  Write(layer, at, keys, values);
  return Read(layer, at + keys.size(0), keys.scalar_type());
}

DecodeRow KVCache::Attending(int64_t row, int64_t layer, int64_t length) const {
  const int64_t n = shared_positions();
  DecodeRow r;
  r.row = row;
  r.keys = keys_[static_cast<size_t>(layer)].narrow(1, 0, length - n);
  r.values = values_[static_cast<size_t>(layer)].narrow(1, 0, length - n);
  if (n > 0) {
    r.shared_keys = shared_->keys_[static_cast<size_t>(layer)];
    r.shared_values = shared_->values_[static_cast<size_t>(layer)];
    r.shared_rows = shared_rows_.data();
    r.shared = n;
  }
  return r;
}

void KVCache::AllocateLike(int64_t layer, const KVCache& source) {
  at::Tensor& k = keys_[static_cast<size_t>(layer)];
  if (k.defined()) return;
  k = at::empty({kv_heads_, own_capacity(), head_dim_},
                source.keys_[static_cast<size_t>(layer)].options());
  values_[static_cast<size_t>(layer)] = at::empty(
      {kv_heads_, own_capacity(), head_dim_}, source.values_[static_cast<size_t>(layer)].options());
}

void KVCache::CopyFrom(int64_t layer, const KVCache& source, const std::vector<int64_t>& rows) {
  AllocateLike(layer, source);
  const at::Tensor& from_k = source.keys_[static_cast<size_t>(layer)];
  const at::Tensor& from_v = source.values_[static_cast<size_t>(layer)];
  const at::Tensor index =
      at::tensor(rows, at::TensorOptions().dtype(at::kLong)).to(from_k.device());
  const int64_t n = static_cast<int64_t>(rows.size());
  keys_[static_cast<size_t>(layer)].narrow(1, 0, n).copy_(from_k.index_select(1, index));
  values_[static_cast<size_t>(layer)].narrow(1, 0, n).copy_(from_v.index_select(1, index));
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

uint64_t ActivationBytesPerRow(const ModelConfig& c) { return planner::ActivationBytesPerRow(c); }

int64_t MicroBatchRows(const ModelConfig& c, uint64_t budget_bytes) {
  static_assert(kMaxMicroBatchRows == 256, "planner::MicroBatchRows caps at 256 rows");
  return planner::MicroBatchRows(c, budget_bytes);
}

namespace {

// Once `layer` has run: the keys and values sequences keep from a shared
// feed's cache (SequenceRows::keeps), then the transient feeds' released.
void FinishLayer(int64_t layer, const PassRows& rows) {
  for (const SequenceRows& s : rows.sequences) {
    if (s.shared) s.shared->CopyFrom(layer, *s.cache, s.shared_rows);
    for (const SequenceRows::Keep& keep : s.keeps) keep.cache->CopyFrom(layer, *s.cache, keep.rows);
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
  FinishLayer(layer, rows);
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
  FinishLayer(layer, rows);
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
