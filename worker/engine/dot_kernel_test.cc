// The dot kernel (`f32-tile`) against the order dot_kernel.h promises, on
// every instruction set this CPU has, for each stored dtype, ragged input
// lengths and output blocks, and a weight that is not 4-byte aligned; and a
// row's products bitwise the same alone and in any batch.
#include "worker/engine/dot_kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "worker/engine/convert.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;

std::vector<Isa> IsasHere() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  return isas;
}

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// `w` stored as `dtype` (rounded as ATen would; F16 through F16C-free bit
// manipulation is not needed: values are read back through ConvertToFloat).
std::string Stored(const std::vector<float>& w, DType dtype) {
  std::string out;
  for (float f : w) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (dtype == DType::kF32) {
      out.append(reinterpret_cast<const char*>(&f), 4);
    } else if (dtype == DType::kBF16) {
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      out.append(reinterpret_cast<const char*>(&h), 2);
    } else {  // F16 of |f| < 4: exponent rebiased, mantissa truncated, small values to zero
      const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
      const uint16_t h =
          exponent <= 0 ? sign
                        : static_cast<uint16_t>(sign | (exponent << 10) | ((bits >> 13) & 0x3ff));
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return out;
}

float PromisedSum(const float* x, const float* w, int64_t in) {
  float s[16] = {};
  for (int64_t k0 = 0; k0 < in; k0 += 16) {
    for (int64_t l = 0; l < 16; ++l) {
      s[l] = std::fma(k0 + l < in ? x[k0 + l] : 0.0f, k0 + l < in ? w[k0 + l] : 0.0f, s[l]);
    }
  }
  for (int l = 0; l < 8; ++l) s[l] += s[l + 8];
  for (int l = 0; l < 4; ++l) s[l] += s[l + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

TEST(DotKernelTest, EveryPathSumsInThePromisedOrderForEveryStoredDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t in : {1, 15, 16, 33, 100}) {
      const int64_t out = 13, rows = 5;  // a block of 8 outputs and one of 5
      const std::vector<float> x = Random(rows * in, 1);
      // One byte of offset: the weight is not aligned to its element size.
      const std::string bytes = " " + Stored(Random(out * in, 2), dtype);
      const unsigned char* weight = reinterpret_cast<const unsigned char*>(bytes.data()) + 1;
      std::vector<float> w(static_cast<size_t>(out * in));
      ConvertToFloat(weight, dtype, out * in, w.data());
      for (Isa isa : IsasHere()) {
        std::vector<float> y(static_cast<size_t>(rows * out), -1.0f);
        DotMatmul(x.data(), rows, in, weight, dtype, 0, out, y.data(), out, isa);
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t o = 0; o < out; ++o) {
            ASSERT_EQ(y[t * out + o], PromisedSum(&x[t * in], &w[o * in], in))
                << IsaName(isa) << " " << checkpoint::DTypeName(dtype) << " in " << in << " row "
                << t << " output " << o;
          }
        }
      }
    }
  }
}

TEST(DotKernelTest, ARowIsBitwiseTheSameAloneAndInAnyBatch) {
  const int64_t in = 70, out = 24;
  const std::vector<float> w = Random(out * in, 3);
  for (Isa isa : IsasHere()) {
    for (int64_t rows : {2, 3, 4, 7, 64}) {
      const std::vector<float> x = Random(rows * in, 4 + static_cast<uint64_t>(rows));
      std::vector<float> batch(static_cast<size_t>(rows * out));
      DotMatmul(x.data(), rows, in, w.data(), DType::kF32, 0, out, batch.data(), out, isa);
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<float> alone(static_cast<size_t>(out));
        DotMatmul(&x[t * in], 1, in, w.data(), DType::kF32, 0, out, alone.data(), out, isa);
        ASSERT_EQ(alone, std::vector<float>(batch.begin() + t * out, batch.begin() + (t + 1) * out))
            << IsaName(isa) << " row " << t << " of " << rows;
      }
    }
  }
}

}  // namespace
}  // namespace nightshift::engine
