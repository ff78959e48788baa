// y = x W^T for a few rows of x, reading the weight in its stored dtype.
//
// A decode pass feeds one token per sequence, so the projections are
// matrix-vector products: memory-bound, and converting a BF16/F16 weight to
// float32 first (then reading the float32 copy back in a GEMM) triples the
// memory traffic. This kernel widens each 8-element slice of a weight row in
// registers (F16C / a shift for BF16) and multiplies it straight into four
// rows of x at a time, two weight rows at once, so the weight is read once,
// in its stored size.
// Beyond kSmallMatmulMaxRows rows a blocked GEMM is faster (see kernels.h).
//
// libtorch-free pure functions; thread-safe (callers split the output rows
// between threads).
#pragma once

#include <cstdint>

#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

// Rows of x up to which Linear uses this kernel (when supported). Measured
// one thread on a 5632 x 2048 F16 weight, on a loaded 2-core machine:
// ~35-58 GFLOP/s at 16 and 32 rows against ~15-37 for converting blocks for a
// GEMM; at 64 rows the GEMM won (55-88 against 39-61).
inline constexpr int64_t kSmallMatmulMaxRows = 32;

// True when this CPU has AVX2, FMA and F16C (the fast path). Without them
// SmallMatmul still works, as plain loops, but is slower than a GEMM.
bool SmallMatmulFast();

// For every row t < rows of x [rows, in] (row stride in) and every weight row
// o in [out_begin, out_end) of `weight` [*, in] stored as `dtype` (F32, BF16
// or F16): y[t * y_stride + o] = sum_i x[t, i] * weight[o, i], accumulated in
// float32. The weight needs no alignment.
void SmallMatmul(const float* x, int64_t rows, int64_t in, const void* weight,
                 checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
                 int64_t y_stride);

}  // namespace nightshift::engine
