// Eight F8_E4M3 bytes as float32 in an AVX2 register, exactly (the values
// of checkpoint::Fp8E4M3Table), for the FP8 dequantiser (quant_dequant.cc)
// and the FP8 kernel's AVX2 path (quant_matmul.cc). Include only where
// <immintrin.h> is, on x86-64.
//
// No denormal float is made on the way: an operation on one costs a
// microcode assist, and a random FP8 weight's vector has a subnormal byte
// more often than not (multiplying the shifted bits by 2^120 did, and cost
// more than the rest of the decode). Normal values: the magnitude's exponent
// and mantissa bits moved into a float's and the exponent rebiased by
// integer addition (+120); subnormals: m x 2^-9; NaN for 0x7f; the sign
// OR-ed in.
#pragma once

#include <immintrin.h>

namespace nightshift::engine {

__attribute__((target("avx2"))) inline __m256 DecodeE4M3x8(__m128i eight_bytes) {
  const __m256i b = _mm256_cvtepu8_epi32(eight_bytes);
  const __m256i magnitude = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
  const __m256 normal = _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_slli_epi32(magnitude, 20), _mm256_set1_epi32(120 << 23)));
  const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(magnitude), _mm256_set1_ps(0x1p-9f));
  const __m256 is_subnormal = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
      _mm256_and_si256(magnitude, _mm256_set1_epi32(0x78)), _mm256_setzero_si256()));
  __m256 v = _mm256_blendv_ps(normal, subnormal, is_subnormal);
  const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7f)));
  v = _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")), is_nan);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

}  // namespace nightshift::engine
