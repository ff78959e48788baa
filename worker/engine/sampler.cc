#include "worker/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace nightshift::engine {
namespace {

// A uniform double in [0, 1) from 53 random bits: the same on every platform,
// unlike std::uniform_real_distribution.
double Uniform(std::mt19937_64& generator) {
  return static_cast<double>(generator() >> 11) * 0x1.0p-53;
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return InvalidArgument("temperature must be a finite number >= 0, got " +
                           std::to_string(p.temperature));
  }
  if (p.top_k < 0) return InvalidArgument("top_k must be >= 0, got " + std::to_string(p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return InvalidArgument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  }
  return Status::Ok();
}

int32_t ArgMax(const float* logits, int64_t vocab) {
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), generator_(params.seed) {}

int32_t Sampler::Sample(const float* logits, int64_t vocab) {
  if (params_.temperature == 0) return ArgMax(logits, vocab);

  candidates_.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  if (candidates_.empty()) return 0;
  // "a ranks before b": larger logit first, lower id first on ties.
  auto larger = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < candidates_.size()) {
    auto kth = candidates_.begin() + (params_.top_k - 1);
    std::nth_element(candidates_.begin(), kth, candidates_.end(), larger);
    float threshold = kth->first;
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                     [threshold](const auto& c) { return c.first < threshold; }),
                      candidates_.end());
  }
  // Only the nucleus needs the order; a full-vocabulary sort costs milliseconds.
  if (params_.top_p < 1) std::sort(candidates_.begin(), candidates_.end(), larger);

  // Probabilities at the temperature, relative to the largest logit.
  const double max_logit = std::min_element(candidates_.begin(), candidates_.end(), larger)->first;
  weights_.resize(candidates_.size());
  double total = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = std::exp((candidates_[i].first - max_logit) / params_.temperature);
    total += weights_[i];
  }
  // Nucleus: the shortest prefix whose mass reaches top_p (at least one token).
  size_t kept = candidates_.size();
  if (params_.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      mass += weights_[i];
      if (mass >= params_.top_p * total) {
        kept = i + 1;
        break;
      }
    }
  }
  double kept_total = 0;
  for (size_t i = 0; i < kept; ++i) kept_total += weights_[i];
  double u = Uniform(generator_) * kept_total;
  for (size_t i = 0; i < kept; ++i) {
    if (u < weights_[i]) return candidates_[i].second;
    u -= weights_[i];
  }
  return candidates_[kept - 1].second;
}

}  // namespace nightshift::engine
