// Converting stored weights to float32 just before use.
//
// `bf16.to(kFloat32)` in libtorch 1.13 runs at ~0.9 GB/s, slower than the
// disk; these loops are plain integer shifts and one multiply per element,
// which the compiler vectorises (this file is built with -O3).
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

// Writes `count` float32 values to `out` from `count` elements of `dtype` at
// `in`, which need no alignment. F32, BF16 and F16 only (BindTensors refuses
// the rest); F16 subnormals, infinities and NaNs convert exactly.
void ConvertToFloat(const void* in, checkpoint::DType dtype, int64_t count, float* out);

// Writes `count` BF16 values (the top halves of float32, as uint16) to
// `out` from `count` elements of `dtype` (F32, BF16 or F16) at `in`, rounding
// to nearest even as ATen's `.to(kBFloat16)` does (NaNs stay NaN); BF16 is
// copied. This is how F16 and F32 weights enter BF16 projections, a block
// at a time.
void ConvertToBFloat16(const void* in, checkpoint::DType dtype, int64_t count, uint16_t* out);

// The loops ConvertToBFloat16 picks among for F16, fastest first where the
// CPU has them (checked at run time): AVX512-BF16's rounding conversion (32
// at a time), AVX2 with F16C (8 at a time, rounding with integer ops), plain
// loops. All give the same bits.
enum class F16ToBf16Loop { kAvx512Bf16, kAvx2, kScalar };
bool Supported(F16ToBf16Loop loop);
// ConvertToBFloat16 of F16 through `loop`, which must be Supported (tests).
void F16ToBFloat16With(F16ToBf16Loop loop, const void* in, int64_t count, uint16_t* out);

}  // namespace nightshift::engine
