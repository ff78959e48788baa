// y = x W^T in BF16 with AVX512-BF16, the engine's own kernel.
//
// The BF16 projections through oneDNN (kernels.h, `bf16-gemm`) convert an
// F16 weight to BF16 a 4 MB block at a time, round x to BF16 and multiply
// each block in its own GEMM call, then transpose and widen the product: a
// profile of a 64-sequence pass had the conversion alone at half the GEMM's
// samples. This kernel does the same arithmetic in one sweep:
// - x is rounded to BF16 once and packed in panels of up to 64 rows, each
//   row's values in pairs (k, k + 1), one 32-bit pair per row and pair index,
//   so that one 64-byte load holds a pair index of 16 rows
//   (PackBf16Activations);
// - a tile of R weight rows (converted to BF16 into an L1-sized scratch when
//   F16, read in place when BF16) is multiplied into every panel with
//   `vdpbf16ps`, each weight pair broadcast to all 16 rows of a load:
//   R x (panel rows / 16) float32 accumulators (24 of the 32 registers);
// - up to 8 rows of x (decode passes) turn it around: 16 weight rows lie
//   across a vector's lanes (16 x 16 blocks of their pairs transposed in
//   registers) and each pair of x is broadcast, so that a row of x does not
//   use one lane in 16; each output is still the same chain of `vdpbf16ps`,
//   so the products are bitwise those of a full panel;
// - each product is rounded to BF16 and widened back as it is stored.
// So the numerics are the BF16 kernel's (and the accelerator path's): x and
// the weights in BF16, products summed in float32, the result rounded to
// BF16. Only the order of the float32 sums differs from oneDNN's.
//
// libtorch-free pure functions; thread-safe (callers split the weight rows
// between threads, and the panels when packing).
#pragma once

#include <cstdint>

#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

// True when this CPU has AVX512F, AVX512BW and AVX512-BF16 (checked at run
// time). Without them the functions below must not be called.
bool Bf16MatmulSupported();

// Rows per packed panel of x.
inline constexpr int64_t kBf16PanelRows = 64;
// Panels for `rows` rows of x.
inline int64_t Bf16Panels(int64_t rows) { return (rows + kBf16PanelRows - 1) / kBf16PanelRows; }
// 32-bit values the packed form of x [rows, in] takes.
int64_t Bf16PackedSize(int64_t rows, int64_t in);

// Packs panels [panel_begin, panel_end) of x [rows, in] (float32, row stride
// in) into `packed` (Bf16PackedSize values for all panels): each value
// rounded to BF16 to nearest even as ATen's `.to(kBFloat16)` does, except
// that `vcvtne2ps2bf16` flushes float32 subnormals (below 2^-126) to zero;
// rows past `rows` and the pair past an odd `in` zero.
void PackBf16Activations(const float* x, int64_t rows, int64_t in, int64_t panel_begin,
                         int64_t panel_end, uint32_t* packed);

// Weight rows that one Bf16Matmul call over `rows` rows of x multiplies
// at a time: callers that split the weight rows between threads give each
// call a multiple of this (but for the range's end), or leave lanes idle.
int64_t Bf16MatmulBlockRows(int64_t rows);

// For every row t < rows of the packed x and every weight row o in
// [out_begin, out_end) of `weight` [*, in] stored as `dtype` (BF16 or F16;
// no alignment needed): y[t * y_stride + o] = the BF16 rounding of
// sum_i bf16(x[t, i]) * bf16(weight[o, i]), summed in float32.
void Bf16Matmul(const uint32_t* packed, int64_t rows, int64_t in, const void* weight,
                checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
                int64_t y_stride);

}  // namespace nightshift::engine
