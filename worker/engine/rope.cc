#include "worker/engine/rope.h"

#include <cmath>

namespace nightshift::engine {
namespace {

constexpr float kPi = 3.14159265358979323846f;

// transformers' _compute_llama3_parameters, element by element, in float32.
float Llama3Scale(float inv_freq, const RopeConfig& rope) {
  const float factor = static_cast<float>(rope.factor);
  const float low = static_cast<float>(rope.low_freq_factor);
  const float high = static_cast<float>(rope.high_freq_factor);
  const float old_context = static_cast<float>(rope.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / low;
  const float high_freq_wavelen = old_context / high;
  const float wavelen = 2 * kPi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / factor;
  const float smooth = (old_context / wavelen - low) / (high - low);
  return (1 - smooth) * inv_freq / factor + smooth * inv_freq;
}

}  // namespace

std::vector<float> RopeInverseFrequencies(const RopeConfig& rope) {
  const int64_t dim = rope.rotary_dim;
  const float base = static_cast<float>(rope.theta);
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    float value = 1.0f / std::pow(base, exponent);
    switch (rope.type) {
      case RopeType::kDefault:
        break;
      case RopeType::kLinear:
        value /= static_cast<float>(rope.factor);
        break;
      case RopeType::kLlama3:
        value = Llama3Scale(value, rope);
        break;
    }
    inv_freq[static_cast<size_t>(i)] = value;
  }
  return inv_freq;
}

}  // namespace nightshift::engine
