#include "worker/engine/small_matmul.h"

#include <algorithm>
#include <vector>

#include "worker/engine/convert.h"

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

// N rows of x (stride in) times one weight row: y[t * y_stride].
template <DType D, int N>
NS_TARGET void Tile(const float* x, int64_t in, const unsigned char* w, float* y,
                    int64_t y_stride) {
  constexpr int64_t kElem = D == DType::kF32 ? 4 : 2;
  __m256 acc[N][2];
  for (int t = 0; t < N; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    const __m256 w0 = Load8<D>(w + i * kElem);
    const __m256 w1 = Load8<D>(w + (i + 8) * kElem);
    for (int t = 0; t < N; ++t) {
      acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * in + i), acc[t][0]);
      acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * in + i + 8), acc[t][1]);
    }
  }
  float tail[N] = {};
  for (; i < in; ++i) {
    float wi;
    ConvertToFloat(w + i * kElem, D, 1, &wi);
    for (int t = 0; t < N; ++t) tail[t] += wi * x[t * in + i];
  }
  for (int t = 0; t < N; ++t) y[t * y_stride] = Sum8(_mm256_add_ps(acc[t][0], acc[t][1])) + tail[t];
}

template <DType D>
NS_TARGET void FastMatmul(const float* x, int64_t rows, int64_t in, const unsigned char* weight,
                          int64_t out_begin, int64_t out_end, float* y, int64_t y_stride) {
  constexpr int64_t kElem = D == DType::kF32 ? 4 : 2;
  for (int64_t o = out_begin; o < out_end; ++o) {
    const unsigned char* w = weight + o * in * kElem;
    // Four rows of x at a time: eight accumulators hide the FMA latency and
    // the weight row stays in L1 between tiles.
    for (int64_t t = 0; t < rows; t += 4) {
      const float* xt = x + t * in;
      float* yt = y + t * y_stride + o;
      switch (std::min<int64_t>(4, rows - t)) {
        case 1:
          Tile<D, 1>(xt, in, w, yt, y_stride);
          break;
        case 2:
          Tile<D, 2>(xt, in, w, yt, y_stride);
          break;
        case 3:
          Tile<D, 3>(xt, in, w, yt, y_stride);
          break;
        default:
          Tile<D, 4>(xt, in, w, yt, y_stride);
          break;
      }
    }
  }
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
  return fast;
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
