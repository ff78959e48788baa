// The generic decoder: one block implementation wired by ModelConfig flags
// (norm flavour, fused or separate projections, biases, q/k-norm, partial
// rotary, parallel or sequential residual, gated or plain MLP), plus the
// embedding (the engine runs the final norm and LM head). It runs every sequence of a pass at once:
// their rows are packed into one [tokens, hidden] matrix for the projections and MLP, and attention
// runs per sequence against that sequence's KV cache.
//
// Thread-compatible: a KVCache belongs to one sequence and is written only by
// the pass running it.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "worker/engine/architecture.h"
#include "worker/engine/kernels.h"
#include "worker/engine/model_config.h"

namespace nightshift::engine {

// One sequence's keys and values for every layer: [kv_heads, capacity,
// head_dim] float32 per layer (on every device; planner::kEngineKvDtypeBytes
// is this size), allocated on the keys' device when a layer first writes.
class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  // Bytes this cache will hold once every layer is allocated: capacity x
  // planner::KvBytesPerToken of the config in float32.
  uint64_t bytes() const;

  // Writes `keys`/`values` [rows, kv_heads, head_dim] at positions
  // [at, at + rows) of `layer` and returns the cached keys and values of
  // positions [0, at + rows). at + rows must not exceed capacity().
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer, int64_t at, const at::Tensor& keys,
                                           const at::Tensor& values);

 private:
  int64_t kv_heads_;
  int64_t head_dim_;
  int64_t capacity_;
  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
};

// One sequence's share of a pass.
struct SequenceRows {
  int64_t begin = 0;   // its first row in the packed hidden states
  int64_t count = 0;   // rows (tokens) it feeds in this pass
  int64_t past = 0;    // tokens already in its cache; the new ones go after them
  at::Tensor allowed;  // [count, past + count] bool: keys each new row may attend to
  KVCache* cache = nullptr;
};

struct PassRows {
  std::vector<SequenceRows> sequences;
  RopeAngles rope;  // per packed row
};

using LayerWeights = std::array<Weight, kLayerWeightCount>;

// Token embeddings [ids.size(), hidden] (x sqrt(hidden) when scale_embeddings).
at::Tensor Embed(const ModelConfig& config, const Weight& table, const std::vector<int64_t>& ids);

// Runs decoder block `layer` on `hidden` [tokens, hidden] and returns the new
// hidden states; appends each sequence's new keys and values to its cache.
at::Tensor RunDecoderLayer(const ModelConfig& config, const LayerWeights& weights, int64_t layer,
                           const at::Tensor& hidden, const PassRows& rows);

}  // namespace nightshift::engine
