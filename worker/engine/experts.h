// The sparse half of a mixture-of-experts layer (Mixtral, Qwen2-MoE,
// Qwen3-MoE; checkpoint::MoeConfig), run over a whole pass's rows once the
// attention half has run (decoder.h RunAttentionHalf):
//
//   SparseMlp mlp(config, dense_weights, hidden, rows);  // norm, route, shared expert
//   for each expert slice holding routed experts, in index order:
//     for e in the slice: if (mlp.routed()[e]) mlp.RunExpert(e, weights of e);
//   mlp.Finish(hidden);                                  // hidden += the sum
//
// Routing is transformers': router logits in float32, softmax over every
// expert, the top k kept (renormalised to sum to 1 when norm_topk_prob).
// Each expert runs once over the rows routed to it, gathered, and adds its
// output times the row's routing weight to a sum that Finish adds to the
// residual, so a row's sum is its experts' terms in ascending expert order
// (after the shared expert's, when there is one) whatever other rows share
// the pass. Temporaries: the normalised rows and the sum (each 4 x hidden
// bytes a row) for the whole pass, and one micro-batch of an expert's rows.
//
// Not thread-safe; one per layer and pass.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "worker/engine/decoder.h"

namespace nightshift::engine {

struct ExpertWeights {
  Weight gate;
  Weight up;
  Weight down;
};

class SparseMlp {
 public:
  // `hidden` [tokens, hidden] is the residual after the attention half;
  // `weights` the layer's dense part (post-attention norm, router, shared
  // expert). Rows are gathered at most `micro_batch_rows` at a time.
  SparseMlp(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& hidden,
            int64_t micro_batch_rows);

  // Per expert: whether a row of the pass routes to it.
  const std::vector<bool>& routed() const { return routed_; }
  // The routed experts, ascending.
  std::vector<int64_t> RoutedExperts() const;
  // The rows routed to `expert`.
  int64_t rows_routed(int64_t expert) const {
    return static_cast<int64_t>(rows_.at(static_cast<size_t>(expert)).size());
  }
  // Per row, its top-k experts, highest routing weight first.
  const std::vector<std::vector<int64_t>>& row_experts() const { return row_experts_; }

  // Runs expert `expert` over the rows routed to it (none: nothing), adding
  // its weighted output to their sum. Experts must come in ascending order.
  void RunExpert(int64_t expert, const ExpertWeights& weights);

  // hidden += the sum of every row's experts (and shared expert).
  void Finish(at::Tensor& hidden);

 private:
  const ModelConfig& config_;
  int64_t micro_batch_rows_;
  at::Tensor normed_;                       // [tokens, hidden]: post-attention norm of the residual
  at::Tensor sum_;                          // [tokens, hidden]
  std::vector<std::vector<int64_t>> rows_;  // per expert: rows routed to it, ascending
  std::vector<std::vector<float>> weights_;  // per expert: those rows' routing weights
  std::vector<std::vector<int64_t>> row_experts_;
  std::vector<bool> routed_;
  int64_t last_expert_ = -1;
};

}  // namespace nightshift::engine
