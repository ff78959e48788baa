// The engine's dot-product micro-kernel: rows of x against a few rows of a
// float32 weight, with one summation order on every instruction set.
//
// Each output is 16 chains of fused multiply-adds, chain l over the inputs
// i = l (mod 16) in order from +0 (inputs past `in` count as 0 x 0), then
// s[l] + s[l + 8] for l < 8, then + s[l + 4], + s[l + 2], + s[l + 1]. The
// AVX-512 path holds the 16 chains in one register, the AVX2 path in two
// halves, the plain loops in an array with std::fma: the same operations in
// the same order, so the same bits. Nothing depends on how many rows or
// outputs a call covers: a row's outputs are bitwise the same whatever rides
// beside it (the engine's batch invariance).
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "worker/checkpoint/checkpoint.h"
#include "worker/engine/isa.h"

namespace nightshift::engine {

// Weight rows per DotRows call at most.
inline constexpr int64_t kDotOutputs = 8;

// y[t * y_stride + o] = sum over i < in of x[t * in + i] * w[o * w_stride + i]
// for t < rows and o < outputs (<= kDotOutputs), summed as above. Reads
// nothing past `in` in a row of x or w; neither needs alignment. `isa` must
// be active on this CPU (kAvx512Bf16 runs the AVX-512 path).
void DotRows(const float* x, int64_t in, int64_t rows, const float* w, int64_t w_stride,
             int64_t outputs, float* y, int64_t y_stride, Isa isa);

// The engine's batch-invariant float32 projection (`f32-tile`,
// compute_choice.h): for every row t < rows of x [rows, in] and weight row
// o in [out_begin, out_end) of `weight` [*, in] stored as `dtype` (F32,
// BF16 or F16; no alignment needed), y[t * y_stride + o] = DotRows' sum of
// x[t, :] times the weight row widened to float32 (exactly). kDotOutputs
// rows are widened at a time into the calling thread's scratch (F32 rows
// read in place when 4-byte aligned).
void DotMatmul(const float* x, int64_t rows, int64_t in, const void* weight,
               checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
               int64_t y_stride, Isa isa);

}  // namespace nightshift::engine
