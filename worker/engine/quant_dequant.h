// Dequantising blocks of a quantized projection (checkpoint/quantization.h)
// to float32, exactly as the formats define them, just before the multiply:
// never more than the block the caller asks for.
//
//   AWQ   W^T[i, o] = (q[i, o] - z[i / g, o]) * s[i / g, o]
//   GPTQ  W^T[i, o] = (q[i, o] - (zstored[g_idx[i], o] + 1)) * s[g_idx[i], o]
//   FP8   W[o, i]   = e4m3(w[o, i]) * s[o]                      (per channel)
//   FP8   W[o, i]   = e4m3(w[o, i]) * s_inv[o / bo, i / bi]     (block)
//
// Each value is one float32 product of exact factors (the difference of two
// small integers, the decoded 8-bit float, the scale widened from its
// dtype), so the results are the float32 values the reference decodes.
// The int4 formats are stored input-major, so they are decoded a block of
// input rows (and a range of output columns) at a time; FP8 output-major, a
// block of output rows at a time. AVX2 paths are chosen at run time.
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

// A quantized tensor's parts in memory: `data` is the tensor's first byte as
// a loader placed it (the other parts at QuantizedTensor::part_offsets).
struct QuantView {
  const checkpoint::QuantizedTensor* q = nullptr;
  const unsigned char* part[4] = {};

  QuantView(const checkpoint::TensorInfo& info, const unsigned char* data);
  bool input_major() const;  // AWQ and GPTQ
};

// DataLoss naming the scale tensor and element when a scale is not finite
// (NaN or infinite), else OK. Reads every scale once.
Status CheckScalesFinite(const QuantView& w);

// AWQ/GPTQ: W^T rows [i_begin, i_end), columns [c_begin, c_end) (multiples
// of 8, c_end may be out) as float32 [i_end - i_begin, c_end - c_begin]
// row-major at `out`. g_idx entries must be < groups (CheckGroupIndex).
void DequantInputRows(const QuantView& w, int64_t i_begin, int64_t i_end, int64_t c_begin,
                      int64_t c_end, float* out);

// GPTQ: DataLoss when a g_idx entry is outside [0, groups); OK otherwise
// (and for every other format).
Status CheckGroupIndex(const QuantView& w);

// FP8: W rows [o_begin, o_end) as float32 [o_end - o_begin, in] at `out`.
void DequantOutputRows(const QuantView& w, int64_t o_begin, int64_t o_end, float* out);

// Whether the AVX2 paths run on this CPU.
bool QuantDequantFast();

}  // namespace nightshift::engine
