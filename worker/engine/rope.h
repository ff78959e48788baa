// Rotary position embedding frequencies, as transformers computes them
// (modeling_rope_utils.py) in float32: default, linear and llama3 scaling.
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <vector>

#include "worker/engine/model_config.h"

namespace nightshift::engine {

// The rotary_dim / 2 inverse frequencies: theta^(-2i / rotary_dim), divided
// by `factor` for linear scaling, and for llama3 divided by `factor` at long
// wavelengths (> original_max / low_freq_factor), kept at short ones
// (< original_max / high_freq_factor) and smoothly interpolated between.
// `rope` must satisfy ValidateModelConfig.
std::vector<float> RopeInverseFrequencies(const RopeConfig& rope);

}  // namespace nightshift::engine
