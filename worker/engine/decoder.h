// The generic decoder: one block implementation wired by ModelConfig flags
// (norm flavour, fused or separate projections, biases, q/k-norm, partial
// rotary, parallel or sequential residual, gated or plain MLP), plus the
// embedding (the engine runs the final norm and LM head). It runs every sequence of a pass through
// the same loaded weights: their rows are packed into one [tokens, hidden] matrix, which a layer
// walks in micro-batches of at most PassRows::micro_batch_rows rows (projections, MLP), updating
// it in place; attention runs per sequence against that sequence's KV cache, in query blocks whose
// score matrix stays under PassRows::max_score_bytes, with each block's mask built when it runs
// (EngineOptions::activation_budget_bytes in engine.h sizes both).
// So a layer's temporaries are bounded by the micro-batch, not by the tokens in the pass: what
// grows with them is the packed hidden states (4 x hidden bytes per token) and the KV cache.
//
// Thread-compatible: a KVCache belongs to one sequence and is written only by
// the pass running it.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "worker/engine/architecture.h"
#include "worker/engine/engine.h"
#include "worker/engine/kernels.h"
#include "worker/engine/model_config.h"
#include "worker/engine/pass_trie.h"

namespace nightshift::engine {

// One sequence's keys and values for every layer: [kv_heads, capacity,
// head_dim] per layer in `dtype` (float32 by default, or BF16: half the
// bytes; see EngineOptions::kv_dtype), allocated on the keys' device when a
// layer first writes. A cache may share its first positions with other
// sequences' caches (Share: a prompt prefix they hold once); it then holds
// only the positions after them.
class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t capacity, KvDType dtype = KvDType::kFloat32);

  int64_t capacity() const { return capacity_; }
  KvDType dtype() const { return dtype_; }
  // Bytes this cache will hold itself once every layer is allocated: the
  // positions it does not share x planner::KvBytesPerToken of the config in
  // its dtype.
  uint64_t bytes() const;

  // Positions [0, rows.size()) are those at `rows` of `shared` (another
  // cache, which holds them for every sequence that shares them, and lives
  // while one does); this cache holds positions [rows.size(), capacity)
  // itself. Before any layer is written.
  void Share(std::shared_ptr<const KVCache> shared, std::vector<int32_t> rows);
  // Positions held by the shared cache (0: none), and that cache.
  int64_t shared_positions() const { return static_cast<int64_t>(shared_rows_.size()); }
  const KVCache* shared() const { return shared_.get(); }

  // Writes `keys`/`values` [rows, kv_heads, head_dim] at positions
  // [at, at + rows) of `layer` (rounded to the cache's dtype); at must not
  // be a shared position, at + rows must not exceed capacity().
  void Write(int64_t layer, int64_t at, const at::Tensor& keys, const at::Tensor& values);
  // The keys and values of positions [0, length) of `layer` as `type`: a
  // view when the cache holds that type and shares nothing, else a copy.
  std::pair<at::Tensor, at::Tensor> Read(int64_t layer, int64_t length, at::ScalarType type) const;
  // Write, then Read of positions [0, at + rows) as the keys' type.
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer, int64_t at, const at::Tensor& keys,
                                           const at::Tensor& values);
  // Row `row` of a pass attending to positions [0, length) of `layer`, as
  // AttendDecodeRows takes it: the shared positions where they are, then
  // this cache's own, read in place (no copy).
  DecodeRow Attending(int64_t row, int64_t layer, int64_t length) const;

  // Writes the keys and values `source` holds at positions `rows` of
  // `layer` into the first rows.size() positions this cache holds itself
  // (after the shared ones) of its `layer`.
  void CopyFrom(int64_t layer, const KVCache& source, const std::vector<int64_t>& rows);
  // Frees `layer`'s keys and values (a later Append allocates them again).
  void Release(int64_t layer);

 private:
  // Positions this cache holds itself.
  int64_t own_capacity() const { return capacity_ - shared_positions(); }
  // Allocates `layer` as `source` holds it (dtype, device) when unallocated.
  void AllocateLike(int64_t layer, const KVCache& source);

  int64_t kv_heads_;
  int64_t head_dim_;
  int64_t capacity_;
  KvDType dtype_;
  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
  std::shared_ptr<const KVCache> shared_;
  std::vector<int32_t> shared_rows_;
};

// One feed of a pass into one cache: a sequence's new tokens after those it
// has cached, or the rows of a pass trie (pass_trie.h) that several
// sequences in their first pass share.
struct SequenceRows {
  int64_t begin = 0;  // its first row in the packed hidden states
  int64_t count = 0;  // rows (tokens) it feeds in this pass
  int64_t past = 0;   // tokens already in its cache; the new ones go after them
  // Empty: the new rows are causal after the cached ones. Otherwise the rows
  // are a trie's, each attending along its chain (whose keys begin with the
  // `past` cached positions, when there are some).
  std::vector<TrieChain> chains;
  KVCache* cache = nullptr;
  // A prefix kept from an earlier pass: before this feed's first rows of a
  // layer, its keys and values of that layer at positions `prefix_rows` (of
  // `prefix`) are copied into positions [0, past) of `cache` (null: the
  // cache holds them already).
  const KVCache* prefix = nullptr;
  std::vector<int64_t> prefix_rows;
  // The feed ends in this pass: its cache drops each layer's keys and
  // values once the layer has run (KVCache::Release).
  bool transient = false;
  // Sequences that go on after sharing this feed's cache: once a layer has
  // run, each takes the keys and values of `rows` (its path through the
  // trie, in order) into positions 0, 1, ... of its own cache.
  struct Keep {
    KVCache* cache = nullptr;
    std::vector<int64_t> rows;
  };
  std::vector<Keep> keeps;
  // Rows two or more of those sequences share: once a layer has run, and
  // before `keeps`, `shared` takes their keys and values (in this order)
  // into its positions 0, 1, ..., holding them once for all of them
  // (KVCache::Share; each Keep's rows then start after them).
  std::shared_ptr<KVCache> shared;
  std::vector<int64_t> shared_rows;
};

struct PassRows {
  std::vector<SequenceRows> sequences;  // in packed order
  std::vector<int64_t> positions;       // per packed row
  // RoPE inverse frequencies (rope.h); the angles are computed per micro-batch.
  const std::vector<float>* inv_freq = nullptr;
  // Where the masks and angles go (the hidden states' device); unset: CPU.
  std::optional<at::Device> device;
  int64_t micro_batch_rows = kMaxMicroBatchRows;
  int64_t max_score_bytes = kMaxAttentionScoreBytes;
  // Batch invariance (EngineOptions::batch_invariant; CPU only): every row
  // attends alone, over exactly the keys it may see (a trie row's gathered
  // in place), through the decode rows' loops (AttendDecodeRows), so its
  // scores and sums never depend on which rows share its micro-batch, how
  // long the keys are at the time, or which sequences share its prefix.
  bool batch_invariant = false;
};

using LayerWeights = std::array<Weight, kLayerWeightCount>;

// Token embeddings [ids.size(), hidden] (x sqrt(hidden) when scale_embeddings).
at::Tensor Embed(const ModelConfig& config, const Weight& table, const std::vector<int64_t>& ids);

// Runs decoder block `layer` on `hidden` [tokens, hidden], a micro-batch of
// rows at a time, overwriting it with the new hidden states; appends each
// sequence's new keys and values to its cache, and releases the layer's from
// the caches of transient sequences once every row has run. `hidden` must be
// writable and not shared.
void RunDecoderLayer(const ModelConfig& config, const LayerWeights& weights, int64_t layer,
                     at::Tensor& hidden, const PassRows& rows);

// The first half of a sparse layer (ModelConfig::IsSparseLayer; sequential
// residual): hidden <- hidden + attention(norm(hidden)) for every
// micro-batch, as RunDecoderLayer does before its MLP, with its caches
// updated and released as there. The experts (experts.h) then run on the
// whole pass's rows.
void RunAttentionHalf(const ModelConfig& config, const LayerWeights& weights, int64_t layer,
                      at::Tensor& hidden, const PassRows& rows);

// down(act(gate(x)) * up(x)) without biases: an expert, or a shared expert.
at::Tensor GatedMlp(const at::Tensor& x, const Weight& gate, const Weight& up, const Weight& down,
                    Activation activation);

}  // namespace nightshift::engine
