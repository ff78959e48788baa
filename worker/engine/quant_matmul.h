// y = x W^T straight from a quantized projection's packed bytes
// (checkpoint/quantization.h), the engine's own kernels for every format.
//
// A tile of the weight is decoded to float32 into an L1-sized scratch (the
// values DequantInputRows / DequantOutputRows give: each the format's one
// exact float32 product) and multiplied into every row of x before the next
// tile is decoded, so the weight is read once, in its packed size, and is
// never widened whole:
//   int4 (AWQ, GPTQ, with or without g_idx), stored input-major: a panel of
//   64 input rows x 64 output columns, then register tiles of up to 6 rows
//   of x x 64 columns, one fused multiply-add per weight and row;
//   FP8 (per channel, 128x128 blocks), stored output-major: 8 whole output
//   rows, then dot_kernel.h's register tiles of rows of x x 8 outputs, 16
//   lanes along the input dimension.
// Vector paths: AVX-512 (16 lanes), AVX2 + FMA (8), and plain loops; the
// caller names one (ActiveIsa by default).
//
// The order of the float32 sums is fixed per format, never by the number of
// rows, the output range a call covers, or the instruction set:
//   int4: each output is one chain of fused multiply-adds over the inputs in
//         order, starting from +0;
//   FP8:  DotRows' order (dot_kernel.h): 16 such chains, chain l over
//         the inputs i = l (mod 16), then summed pairwise in a fixed tree.
// So a row's outputs are bitwise the same whatever other rows ride with it,
// however the outputs are split between threads, and on every path (the
// plain loops use std::fma): the batch invariance the engine promises.
//
// libtorch-free pure functions; thread-safe (each thread uses its own
// scratch; callers split the output range between threads).
#pragma once

#include <cstdint>

#include "worker/engine/isa.h"
#include "worker/engine/quant_dequant.h"

namespace nightshift::engine {

// Output columns per int4 tile: callers that split the outputs between
// threads split them at multiples of this.
inline constexpr int64_t kQuantTileColumns = 64;

// For every row t < rows of x [rows, in] (float32, row stride in) and every
// output o in [out_begin, out_end): y[t * y_stride + o] = sum over i of
// x[t, i] * W[o, i], summed as the file comment says. out_begin must be a
// multiple of 8 (int4 packs 8 outputs together), out_end a multiple of 8 or
// `out`. The scales must be finite and g_idx in range (CheckScalesFinite,
// CheckGroupIndex; not checked here). `isa` must be active on this CPU
// (IsaActive).
void QuantMatmul(const QuantView& w, const float* x, int64_t rows, int64_t out_begin,
                 int64_t out_end, float* y, int64_t y_stride, Isa isa);

// The same on the instruction set the kernels run by default (ActiveIsa).
inline void QuantMatmul(const QuantView& w, const float* x, int64_t rows, int64_t out_begin,
                        int64_t out_end, float* y, int64_t y_stride) {
  QuantMatmul(w, x, rows, out_begin, out_end, y, y_stride, ActiveIsa());
}

}  // namespace nightshift::engine
