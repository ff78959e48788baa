// Linear for quantized projections (Weight::info->quant; see
// checkpoint/quantization.h), which kernels.h's Linear hands over to.
//
// Host memory (the CPU path): the engine's own kernel (quant_matmul.h)
// multiplies straight from the packed bytes as the loader placed them, a
// cache-sized tile decoded at a time, never a float copy of the matrix; the
// compute threads share the output tiles. Its sums are in a fixed order per
// format, so a row's outputs do not depend on the other rows of the pass.
// Whatever kernel plan the projection's Weight carries, a quantized weight
// runs this kernel (the plan chooses among the 16-bit kernels).
//
// On a device (the accelerator path): the packed bytes are what was staged;
// ATen ops unpack and scale them there into the projection's matmul dtype,
// F16 on CUDA (BF16 would move small models' logits past the goldens'
// tolerance), float32 on the CPU stand-in (libtorch 1.13's CPU has no F16
// matmul, as kernels.h's MatmulDtype says for F16 weights), and the product
// is taken in that dtype and cast back to x's.
//
// Throws std::invalid_argument (which the engine reports) for a non-finite
// scale or an out-of-range g_idx on the host path.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "worker/engine/kernels.h"

namespace nightshift::engine {

// x [T, in] times the quantized weight [out, in] transposed, plus bias.
at::Tensor QuantLinear(const at::Tensor& x, const Weight& weight, const Weight& bias);

// The whole quantized weight dequantised as `dtype` [out, in] (device
// weights: ATen ops on the device; host weights: float32 only). For tests
// and the accelerator path.
at::Tensor DequantizeWeight(const Weight& weight, at::ScalarType dtype);

}  // namespace nightshift::engine
