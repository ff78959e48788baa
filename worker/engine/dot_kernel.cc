#include "worker/engine/dot_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "worker/engine/convert.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics pass an undefined vector through (GCC bug
// 105593, fixed in 13): -W(maybe-)uninitialized fires inside its own headers
// at -O3. The maskz forms bf16_matmul.cc uses avoid it one intrinsic at a
// time; here nothing is masked, so the warning is off for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define NS_DOT_X86 1
#endif

namespace nightshift::engine {
namespace {

constexpr int64_t kLanes = 16;  // the chains of each output

// The inputs a call covers, rounded up to whole steps of the 16 chains.
int64_t Padded(int64_t in) { return (in + kLanes - 1) / kLanes * kLanes; }

// s[l] + s[l + 8], then + s[l + 4], + s[l + 2], + s[l + 1]: the order the
// vector paths' reductions add in.
float SumLanes(const float* s) {
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = s[l] + s[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

void DotRowsScalar(const float* x, int64_t in, int64_t rows, const float* w, int64_t w_stride,
                   int64_t outputs, float* y, int64_t y_stride) {
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < outputs; ++o) {
      float s[kLanes] = {};
      for (int64_t k0 = 0; k0 < Padded(in); k0 += kLanes) {
        for (int64_t l = 0; l < kLanes; ++l) {
          const bool inside = k0 + l < in;
          s[l] = std::fma(inside ? x[t * in + k0 + l] : 0.0f,
                          inside ? w[o * w_stride + k0 + l] : 0.0f, s[l]);
        }
      }
      y[t * y_stride + o] = SumLanes(s);
    }
  }
}

#ifdef NS_DOT_X86
#define NS_AVX2 __attribute__((target("avx2,fma")))
#define NS_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))

// The rows o >= outputs of a call read row 0 instead, and their sums are
// dropped: every tile is full-width without reading past the weight.
void RowPointers(const float* w, int64_t w_stride, int64_t outputs,
                 const float* rows[kDotOutputs]) {
  for (int64_t o = 0; o < kDotOutputs; ++o) rows[o] = w + (o < outputs ? o : 0) * w_stride;
}

// 8 values at [k, k + 8) of a row of length `in`, zeros past it.
NS_AVX2 inline __m256 Load8(const float* row, int64_t k, int64_t in) {
  if (k + 8 <= in) return _mm256_loadu_ps(row + k);
  const int64_t left = std::max<int64_t>(0, in - k);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_ps(row + std::min(k, in), mask);
}

// The 16 chains of an output as two 8-lane halves, reduced as SumLanes.
NS_AVX2 inline float SumLanesAvx2(__m256 lo, __m256 hi) {
  const __m256 a = _mm256_add_ps(lo, hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// One row of x against 4 weight rows: 8 accumulators (two halves each).
NS_AVX2 void DotRowsAvx2(const float* x, int64_t in, int64_t rows, const float* w, int64_t w_stride,
                         int64_t outputs, float* y, int64_t y_stride) {
  const float* wr[kDotOutputs];
  RowPointers(w, w_stride, outputs, wr);
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * in;
    for (int64_t o0 = 0; o0 < outputs; o0 += 4) {
      __m256 lo[4], hi[4];
      for (int o = 0; o < 4; ++o) lo[o] = hi[o] = _mm256_setzero_ps();
      for (int64_t k = 0; k < Padded(in); k += kLanes) {
        const __m256 x0 = Load8(xr, k, in), x1 = Load8(xr, k + 8, in);
        for (int o = 0; o < 4; ++o) {
          lo[o] = _mm256_fmadd_ps(x0, Load8(wr[o0 + o], k, in), lo[o]);
          hi[o] = _mm256_fmadd_ps(x1, Load8(wr[o0 + o], k + 8, in), hi[o]);
        }
      }
      for (int o = 0; o < 4 && o0 + o < outputs; ++o) {
        y[t * y_stride + o0 + o] = SumLanesAvx2(lo[o], hi[o]);
      }
    }
  }
}

NS_AVX512 inline float SumLanesAvx512(__m512 s) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// R rows of x against kDotOutputs weight rows: 8R accumulators.
template <int R>
NS_AVX512 void RowsAvx512(const float* x, int64_t in, const float* const wr[kDotOutputs],
                          int64_t outputs, float* y, int64_t y_stride) {
  // Every index below is a constant once unrolled, so the 8R accumulators
  // stay in registers (a loop to `outputs` indexing them kept them on the
  // stack: every step stored and reloaded them, a fifth of the rate).
  __m512 acc[R][kDotOutputs];
#pragma GCC unroll 3
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int o = 0; o < kDotOutputs; ++o) acc[r][o] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < in; k += kLanes) {
    const __mmask16 mask = k + kLanes <= in ? static_cast<__mmask16>(0xffff)
                                            : static_cast<__mmask16>((1u << (in - k)) - 1);
    __m512 xv[R];
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * in + k);
#pragma GCC unroll 8
    for (int o = 0; o < kDotOutputs; ++o) {
      const __m512 wv = _mm512_maskz_loadu_ps(mask, wr[o] + k);
#pragma GCC unroll 3
      for (int r = 0; r < R; ++r) acc[r][o] = _mm512_fmadd_ps(xv[r], wv, acc[r][o]);
    }
  }
  float sums[R][kDotOutputs];
#pragma GCC unroll 3
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int o = 0; o < kDotOutputs; ++o) sums[r][o] = SumLanesAvx512(acc[r][o]);
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t o = 0; o < outputs; ++o) y[r * y_stride + o] = sums[r][o];
  }
}

NS_AVX512 void DotRowsAvx512(const float* x, int64_t in, int64_t rows, const float* w,
                             int64_t w_stride, int64_t outputs, float* y, int64_t y_stride) {
  const float* wr[kDotOutputs];
  RowPointers(w, w_stride, outputs, wr);
  int64_t t = 0;
  for (; t + 3 <= rows; t += 3)
    RowsAvx512<3>(x + t * in, in, wr, outputs, y + t * y_stride, y_stride);
  if (rows - t == 2) RowsAvx512<2>(x + t * in, in, wr, outputs, y + t * y_stride, y_stride);
  if (rows - t == 1) RowsAvx512<1>(x + t * in, in, wr, outputs, y + t * y_stride, y_stride);
}
#endif  // NS_DOT_X86

}  // namespace

void DotRows(const float* x, int64_t in, int64_t rows, const float* w, int64_t w_stride,
             int64_t outputs, float* y, int64_t y_stride, Isa isa) {
  if (rows <= 0 || outputs <= 0) return;
  switch (isa) {
#ifdef NS_DOT_X86
    case Isa::kAvx512Bf16:
    case Isa::kAvx512:
      return DotRowsAvx512(x, in, rows, w, w_stride, outputs, y, y_stride);
    case Isa::kAvx2:
      return DotRowsAvx2(x, in, rows, w, w_stride, outputs, y, y_stride);
#endif
    default:
      return DotRowsScalar(x, in, rows, w, w_stride, outputs, y, y_stride);
  }
}

void DotMatmul(const float* x, int64_t rows, int64_t in, const void* weight,
               checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
               int64_t y_stride, Isa isa) {
  const auto* bytes = static_cast<const unsigned char*>(weight);
  const int64_t elem = static_cast<int64_t>(checkpoint::DTypeSize(dtype));
  const bool in_place =
      dtype == checkpoint::DType::kF32 && reinterpret_cast<uintptr_t>(weight) % alignof(float) == 0;
  thread_local std::vector<float> scratch;
  if (!in_place) scratch.resize(static_cast<size_t>(kDotOutputs * in));
  for (int64_t o = out_begin; o < out_end; o += kDotOutputs) {
    const int64_t n = std::min(kDotOutputs, out_end - o);
    const float* w;
    if (in_place) {
      w = reinterpret_cast<const float*>(bytes + o * in * elem);
    } else {
      ConvertToFloat(bytes + o * in * elem, dtype, n * in, scratch.data());
      w = scratch.data();
    }
    DotRows(x, in, rows, w, in, n, y + o, y_stride, isa);
  }
}

}  // namespace nightshift::engine
