// Choosing the next token from a row of logits: greedy, or sampling with
// temperature, top-k and top-p (nucleus), applied in transformers' order
// (temperature, then top-k, then top-p over what top-k kept).
//
// libtorch-free. Each sequence owns its Sampler (its own seeded generator),
// so results do not depend on what else is in the batch. Not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nightshift::engine {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (top_k, top_p and seed unused)
  int64_t top_k = 0;         // 0: no top-k cut
  double top_p = 1.0;        // 1: no nucleus cut
  uint64_t seed = 0;         // seeds this sequence's generator
};

// InvalidArgument naming the field for temperature < 0 (or not finite),
// top_k < 0, top_p outside (0, 1].
Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  // `params` must pass ValidateSamplingParams.
  explicit Sampler(const SamplingParams& params);

  // The next token for `logits[0..vocab)`. Greedy returns the first index of
  // the largest logit. Sampling keeps the top_k largest logits (ties with the
  // k-th kept too), then the smallest set of those whose probabilities at
  // `temperature` reach top_p, and draws from them renormalised. Logits that
  // are NaN are never chosen; vocab must be > 0.
  int32_t Sample(const float* logits, int64_t vocab);

 private:
  SamplingParams params_;
  std::mt19937_64 generator_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch, reused between calls
  std::vector<double> weights_;                        // scratch
};

// The index of the largest logit (the first on ties, NaN skipped); 0 when all
// are NaN.
int32_t ArgMax(const float* logits, int64_t vocab);

}  // namespace nightshift::engine
