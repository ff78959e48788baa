// Linear for quantized projections (Weight::info->quant; see
// checkpoint/quantization.h), which kernels.h's Linear hands over to.
//
// Host memory (the CPU path): the packed bytes are read as the loader
// placed them and dequantised to float32 a cache-sized block at a time
// (quant_dequant.h) into a per-thread scratch, each block multiplied as
// soon as it is decoded: never a float copy of the whole matrix. The int4
// formats decode blocks of input rows over a range of output columns (each
// compute thread owns its columns and accumulates over the blocks); FP8
// decodes blocks of output rows.
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

// Host blocks of decoded float32 are at most this many bytes (and at most
// Linear's block_bytes): they stay in a core's L2 until multiplied.
inline constexpr int64_t kQuantBlockBytes = 256 << 10;

// x [T, in] times the quantized weight [out, in] transposed, plus bias.
at::Tensor QuantLinear(const at::Tensor& x, const Weight& weight, const Weight& bias,
                       int64_t block_bytes);

// The whole quantized weight dequantised as `dtype` [out, in] (device
// weights: ATen ops on the device; host weights: float32 only). For tests
// and the accelerator path.
at::Tensor DequantizeWeight(const Weight& weight, at::ScalarType dtype);

}  // namespace nightshift::engine
