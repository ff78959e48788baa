#include "worker/engine/bf16_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "worker/engine/convert.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;

float Bf16Bits(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

float RoundToBf16(float v) {
  uint16_t b;
  ConvertToBFloat16(&v, DType::kF32, 1, &b);
  return Bf16Bits(b);
}

// `values` stored as `dtype`: BF16 rounded to nearest; F16 exactly, so each
// value must be 0 or a normal F16 (FiniteF16 makes such values).
std::vector<uint16_t> Store(const std::vector<float>& values, DType dtype) {
  std::vector<uint16_t> out(values.size());
  if (dtype == DType::kBF16) {
    ConvertToBFloat16(values.data(), DType::kF32, static_cast<int64_t>(values.size()), out.data());
    return out;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    if (v == 0) {
      out[i] = static_cast<uint16_t>(bits >> 16);
      continue;
    }
    const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
    if (exponent < 1 || exponent > 30 || (bits & 0x1fff) != 0) {
      ADD_FAILURE() << v << " is not a normal F16 value";
      return out;
    }
    out[i] = static_cast<uint16_t>(
        ((bits >> 16) & 0x8000) | (static_cast<uint32_t>(exponent) << 10) | ((bits >> 13) & 0x3ff));
  }
  return out;
}

// A random normal F16 value of magnitude 2^-6 .. 2^2, as float32.
float FiniteF16(std::mt19937& rng) {
  std::uniform_int_distribution<int> mantissa(0, 1023), exponent(-6, 1), sign(0, 1);
  const float v = std::ldexp(1.0f + static_cast<float>(mantissa(rng)) / 1024, exponent(rng));
  return sign(rng) != 0 ? -v : v;
}

struct Case {
  int64_t rows, in, out_begin, out_end, out_total;
};

// Runs the kernel on x [rows, in] and weights [out_total, in] stored as
// `dtype`, into y of stride out_total + 3 filled with NaN beforehand; checks
// every written value against `expect(t, o, sum of |terms|)` and that nothing
// else was written.
template <typename Expect>
void Check(const Case& c, DType dtype, const std::vector<float>& x, const std::vector<float>& w,
           Expect expect) {
  const std::vector<uint16_t> stored = Store(w, dtype);
  std::vector<uint32_t> packed(static_cast<size_t>(Bf16PackedSize(c.rows, c.in)), 0xdeadbeef);
  const int64_t panels = Bf16Panels(c.rows);
  // Two calls, as two threads would split the panels.
  PackBf16Activations(x.data(), c.rows, c.in, 0, panels / 2, packed.data());
  PackBf16Activations(x.data(), c.rows, c.in, panels / 2, panels, packed.data());
  const int64_t stride = c.out_total + 3;
  std::vector<float> y(static_cast<size_t>(c.rows * stride),
                       std::numeric_limits<float>::quiet_NaN());
  Bf16Matmul(packed.data(), c.rows, c.in, stored.data(), dtype, c.out_begin, c.out_end, y.data(),
             stride);
  // The weights the kernel multiplies: F16 ones rounded to BF16 first.
  std::vector<uint16_t> as_bf16(stored.size());
  ConvertToBFloat16(stored.data(), dtype, static_cast<int64_t>(stored.size()), as_bf16.data());
  for (int64_t t = 0; t < c.rows; ++t) {
    for (int64_t o = 0; o < stride; ++o) {
      const float got = y[static_cast<size_t>(t * stride + o)];
      if (o < c.out_begin || o >= c.out_end) {
        ASSERT_TRUE(std::isnan(got)) << "wrote outside the rows asked for: " << t << "," << o;
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < c.in; ++i) {
        const double term =
            static_cast<double>(RoundToBf16(x[static_cast<size_t>(t * c.in + i)])) *
            static_cast<double>(Bf16Bits(as_bf16[static_cast<size_t>(o * c.in + i)]));
        sum += term;
        magnitude += std::fabs(term);
      }
      expect(got, sum, magnitude, t, o);
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // Rows around the 16-row vectors and 64-row panels; `in` even, odd, and
  // around the 16-pair packing blocks; weight rows around the 6-row tiles.
  for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 63, 64, 65, 130}) {
    for (int64_t in : {1, 2, 3, 31, 32, 33, 34, 70}) {
      cases.push_back({rows, in, 0, 13, 13});
      cases.push_back({rows, in, 5, 12, 14});
    }
    // Weight rows across the 24-row blocks and the 16-row transposes of
    // their products: a whole block, a part block of more than 16 rows.
    cases.push_back({rows, 34, 3, 50, 53});
    // Across the 16- and 32-row blocks of the few-rows path.
    cases.push_back({rows, 33, 7, 150, 151});
  }
  return cases;
}

// Products of multiples of 1/8 below 4 in magnitude, and their sums, are
// exact in float32, so the kernel's sum is the exact one in any order and
// the result must be its BF16 rounding, bit for bit.
TEST(Bf16MatmulTest, ExactSumsComeOutAsTheirBf16Rounding) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Case& c : Cases()) {
      std::vector<float> x(static_cast<size_t>(c.rows * c.in)),
          w(static_cast<size_t>(c.out_total * c.in));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int>(i * 5 % 31) - 15) / 8;
      for (size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(static_cast<int>(i * 3 % 29) - 14) / 8;
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " rows " << c.rows << " in " << c.in
                                      << " out " << c.out_begin << ".." << c.out_end);
      Check(c, dtype, x, w, [](float got, double sum, double, int64_t t, int64_t o) {
        ASSERT_EQ(got, RoundToBf16(static_cast<float>(sum))) << "row " << t << " out " << o;
      });
    }
  }
}

// Random values: the float32 sum is within in x 2^-24 x sum|terms| of the
// exact one, and each side's BF16 rounding moves it by at most 2^-9 of
// itself, so the result is within 2^-8 |sum| plus that of the exact sum.
TEST(Bf16MatmulTest, RandomProductsAreTheBf16RoundingOfAFloat32Sum) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Case& c : Cases()) {
      std::vector<float> x(static_cast<size_t>(c.rows * c.in)),
          w(static_cast<size_t>(c.out_total * c.in));
      for (float& v : x) v = normal(rng);
      for (float& v : w) v = FiniteF16(rng);
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " rows " << c.rows << " in " << c.in);
      Check(c, dtype, x, w, [&](float got, double sum, double magnitude, int64_t t, int64_t o) {
        const double bound =
            0x1p-8 * std::fabs(sum) * 1.01 + static_cast<double>(c.in) * 0x1p-23 * magnitude;
        ASSERT_LE(std::fabs(static_cast<double>(got) - sum), bound) << "row " << t << " out " << o;
        ASSERT_EQ(got, RoundToBf16(got)) << "the product is rounded to BF16";
      });
    }
  }
}

// Up to eight rows of x run another loop than a panel's (weight rows across
// the lanes): each row's products must be bitwise those it gets among 70
// rows, for BF16 and F16 weights, odd and even `in`, any output range.
TEST(Bf16MatmulTest, AFewRowsAloneAreBitwiseTheSameRowsInAFullPanel) {
  if (!Bf16MatmulSupported()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  constexpr int64_t kRows = 70;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t in : {1, 32, 33, 70, 515}) {
      for (const auto& [out_begin, out_end] : {std::pair<int64_t, int64_t>{0, 150}, {5, 77}}) {
        const int64_t out = 150;
        std::vector<float> x(static_cast<size_t>(kRows * in)), w(static_cast<size_t>(out * in));
        for (float& v : x) v = normal(rng);
        for (float& v : w) v = FiniteF16(rng);
        const std::vector<uint16_t> stored = Store(w, dtype);
        auto multiply = [&](int64_t rows) {
          std::vector<uint32_t> packed(static_cast<size_t>(Bf16PackedSize(rows, in)));
          PackBf16Activations(x.data(), rows, in, 0, Bf16Panels(rows), packed.data());
          std::vector<float> y(static_cast<size_t>(rows * out), 0);
          Bf16Matmul(packed.data(), rows, in, stored.data(), dtype, out_begin, out_end, y.data(),
                     out);
          return y;
        };
        const std::vector<float> all = multiply(kRows);
        for (int64_t rows = 1; rows <= 9; ++rows) {
          const std::vector<float> few = multiply(rows);
          SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " in " << in << " out "
                                          << out_begin << ".." << out_end << " rows " << rows);
          ASSERT_EQ(std::memcmp(few.data(), all.data(), few.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST(Bf16MatmulTest, PackedSizeCountsWholePanelsOfPairs) {
  EXPECT_EQ(Bf16Panels(64), 1);
  EXPECT_EQ(Bf16Panels(65), 2);
  EXPECT_EQ(Bf16PackedSize(65, 3), 2 * 2 * kBf16PanelRows);  // 2 panels of 2 pairs per row
}

}  // namespace
}  // namespace nightshift::engine
