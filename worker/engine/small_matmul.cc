#include "worker/engine/small_matmul.h"

#include <algorithm>
#include <vector>

#include "worker/engine/convert.h"
#include "worker/engine/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define NS_SMALL_MATMUL_X86 1
#endif

namespace nightshift::engine {
namespace {

using checkpoint::DType;

// Plain loops: widen a weight row, then one dot product per row of x.
void PortableMatmul(const float* x, int64_t rows, int64_t in, const unsigned char* weight,
                    DType dtype, int64_t out_begin, int64_t out_end, float* y, int64_t y_stride) {
  const int64_t elem = static_cast<int64_t>(checkpoint::DTypeSize(dtype));
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t o = out_begin; o < out_end; ++o) {
    ConvertToFloat(weight + o * in * elem, dtype, in, row.data());
    for (int64_t t = 0; t < rows; ++t) {
      float sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += row[static_cast<size_t>(i)] * x[t * in + i];
      y[t * y_stride + o] = sum;
    }
  }
}

#ifdef NS_SMALL_MATMUL_X86

#define NS_TARGET __attribute__((target("avx2,fma,f16c")))

// Eight weights as float32, from F32, BF16 or F16 storage.
template <DType D>
NS_TARGET inline __m256 Load8(const unsigned char* p) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (D == DType::kF16) return _mm256_cvtph_ps(half);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  }
}

NS_TARGET inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// N rows of x (stride in) times R consecutive weight rows (stride in
// elements): y[t * y_stride + r]. Each step widens R slices of 8 weights
// once and multiplies them into all N rows; R x N x U accumulators (U
// slices per step when R x N is small) hide the FMA latency.
template <DType D, int R, int N>
NS_TARGET void Tile(const float* x, int64_t in, const unsigned char* w, float* y,
                    int64_t y_stride) {
  constexpr int64_t kElem = D == DType::kF32 ? 4 : 2;
  constexpr int U = R * N >= 4 ? 1 : 2;
  __m256 acc[R][N][U];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < N; ++t) {
      for (int u = 0; u < U; ++u) acc[r][t][u] = _mm256_setzero_ps();
    }
  }
  int64_t i = 0;
  for (; i + 8 * U <= in; i += 8 * U) {
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      __m256 wv[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) wv[r] = Load8<D>(w + (r * in + i + 8 * u) * kElem);
#pragma GCC unroll 4
      for (int t = 0; t < N; ++t) {
        const __m256 xv = _mm256_loadu_ps(x + t * in + i + 8 * u);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) acc[r][t][u] = _mm256_fmadd_ps(wv[r], xv, acc[r][t][u]);
      }
    }
  }
  float tail[R][N] = {};
  for (; i < in; ++i) {
    for (int r = 0; r < R; ++r) {
      float wi;
      ConvertToFloat(w + (r * in + i) * kElem, D, 1, &wi);
      for (int t = 0; t < N; ++t) tail[r][t] += wi * x[t * in + i];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < N; ++t) {
      __m256 sum = acc[r][t][0];
      for (int u = 1; u < U; ++u) sum = _mm256_add_ps(sum, acc[r][t][u]);
      y[t * y_stride + r] = Sum8(sum) + tail[r][t];
    }
  }
}

// All rows of x times R weight rows starting at `w`, four rows of x at a time.
template <DType D, int R>
NS_TARGET void RowBlock(const float* x, int64_t rows, int64_t in, const unsigned char* w, float* y,
                        int64_t y_stride) {
  for (int64_t t = 0; t < rows; t += 4) {
    const float* xt = x + t * in;
    float* yt = y + t * y_stride;
    switch (std::min<int64_t>(4, rows - t)) {
      case 1:
        Tile<D, R, 1>(xt, in, w, yt, y_stride);
        break;
      case 2:
        Tile<D, R, 2>(xt, in, w, yt, y_stride);
        break;
      case 3:
        Tile<D, R, 3>(xt, in, w, yt, y_stride);
        break;
      default:
        Tile<D, R, 4>(xt, in, w, yt, y_stride);
        break;
    }
  }
}

template <DType D>
NS_TARGET void FastMatmul(const float* x, int64_t rows, int64_t in, const unsigned char* weight,
                          int64_t out_begin, int64_t out_end, float* y, int64_t y_stride) {
  constexpr int64_t kElem = D == DType::kF32 ? 4 : 2;
  int64_t o = out_begin;
  // Two weight rows at a time (their slices stay in L1 between row tiles of x).
  for (; o + 2 <= out_end; o += 2) {
    RowBlock<D, 2>(x, rows, in, weight + o * in * kElem, y + o, y_stride);
  }
  if (o < out_end) RowBlock<D, 1>(x, rows, in, weight + o * in * kElem, y + o, y_stride);
}

bool DetectFast() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & bit_F16C) == 0) return false;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

#endif  // NS_SMALL_MATMUL_X86

}  // namespace

bool SmallMatmulFast() {
#ifdef NS_SMALL_MATMUL_X86
  static const bool fast = DetectFast();
  return fast && IsaActive(Isa::kAvx2);
#else
  return false;
#endif
}

void SmallMatmul(const float* x, int64_t rows, int64_t in, const void* weight, DType dtype,
                 int64_t out_begin, int64_t out_end, float* y, int64_t y_stride) {
  const auto* w = static_cast<const unsigned char*>(weight);
#ifdef NS_SMALL_MATMUL_X86
  if (SmallMatmulFast()) {
    switch (dtype) {
      case DType::kF16:
        return FastMatmul<DType::kF16>(x, rows, in, w, out_begin, out_end, y, y_stride);
      case DType::kBF16:
        return FastMatmul<DType::kBF16>(x, rows, in, w, out_begin, out_end, y, y_stride);
      default:
        return FastMatmul<DType::kF32>(x, rows, in, w, out_begin, out_end, y, y_stride);
    }
  }
#endif
  PortableMatmul(x, rows, in, w, dtype, out_begin, out_end, y, y_stride);
}

}  // namespace nightshift::engine
