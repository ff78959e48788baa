// Quantizing the generator's projections into the published formats
// (checkpoint/quantization.h), round to nearest, for benchmarks: the layout
// is exact, the rounding is the simplest (no calibration).
//
//   awq        AutoAWQ GEMM int4, zero point per group of `group_size` input
//              rows: qweight [in, out/8], qzeros [in/g, out/8] (AWQ nibble
//              order), scales F16 [in/g, out]
//   gptq       GPTQ v1 int4, asymmetric: qweight [in/8, out], qzeros storing
//              zero - 1, scales F16, g_idx = i / g
//   fp8        compressed-tensors float-quantized: weight F8_E4M3 [out, in],
//              weight_scale [out, 1] in the model dtype (absmax / 448)
//   fp8-block  weight F8_E4M3, weight_scale_inv F32 per 128 x 128 block
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::generator {

struct QuantizeSpec {
  checkpoint::QuantFormat format = checkpoint::QuantFormat::kNone;
  int64_t group_size = 128;  // awq, gptq
  int64_t block = 128;       // fp8-block: weight_block_size [block, block]
};

// "awq", "gptq", "fp8", "fp8-block" (make-checkpoint --quantize), or
// InvalidArgument listing them.
StatusOr<checkpoint::QuantFormat> ParseQuantizeFormat(const std::string& name);

// config.json's quantization_config, as each format's tool writes it.
nlohmann::json QuantizationConfigJson(const QuantizeSpec& spec);

// InvalidArgument naming `module` when its [out, in] does not pack: int4
// needs out % 8 == 0 and in % group_size == 0 (and in % 8 for GPTQ).
Status CheckQuantizable(const QuantizeSpec& spec, const std::string& module, int64_t out,
                        int64_t in);

struct PartPlan {
  std::string name;
  checkpoint::DType dtype;
  std::vector<int64_t> shape;
};

// The stored tensors of projection `module` ("model.layers.0.mlp.up_proj")
// of [out, in]; `model_dtype` is the compressed-tensors scale's dtype.
std::vector<PartPlan> QuantizedParts(const QuantizeSpec& spec, const std::string& module,
                                     int64_t out, int64_t in, checkpoint::DType model_dtype);

// W [out, in] (row-major float32) as the bytes of each QuantizedParts entry,
// in that order.
std::vector<std::string> QuantizeMatrix(const QuantizeSpec& spec, const float* w, int64_t out,
                                        int64_t in, checkpoint::DType model_dtype);

// The F8_E4M3 byte nearest to `x` (ties to even), saturating at +-448.
uint8_t ToE4M3(float x);

}  // namespace nightshift::generator
