#include "worker/engine/small_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace nightshift::engine {
namespace {

using checkpoint::DType;

// Weight values exactly representable in F32, BF16 and F16.
float WeightValue(int64_t k) { return static_cast<float>((k * 7) % 13 - 6) * 0.125f; }

// `count` weights stored as `dtype`.
std::vector<unsigned char> Stored(int64_t count, DType dtype) {
  std::vector<unsigned char> out;
  for (int64_t k = 0; k < count; ++k) {
    const float v = WeightValue(k);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    uint16_t half = 0;
    if (dtype == DType::kBF16) half = static_cast<uint16_t>(bits >> 16);
    if (dtype == DType::kF16 && v != 0) {
      // Normal halves only: |v| is 0.125 .. 0.75.
      const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      half = static_cast<uint16_t>(((bits >> 16) & 0x8000) | (exponent << 10) |
                                   ((bits >> 13) & 0x3ff));
    }
    const auto* p = dtype == DType::kF32 ? reinterpret_cast<const unsigned char*>(&v)
                                         : reinterpret_cast<const unsigned char*>(&half);
    out.insert(out.end(), p, p + (dtype == DType::kF32 ? 4 : 2));
  }
  return out;
}

TEST(SmallMatmulTest, EqualsADoublePrecisionProductForEveryDTypeAndShape) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9}) {
      for (int64_t in : {1, 15, 16, 17, 40, 257}) {
        const int64_t out = 6;
        std::vector<float> x(static_cast<size_t>(rows * in));
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.7f);
        // One byte of offset: the weight needs no alignment.
        std::vector<unsigned char> storage = Stored(out * in, dtype);
        storage.insert(storage.begin(), 0);
        const int64_t stride = out + 3;
        std::vector<float> y(static_cast<size_t>(rows * stride), -99.0f);
        SmallMatmul(x.data(), rows, in, storage.data() + 1, dtype, 1, out, y.data(), stride);
        for (int64_t t = 0; t < rows; ++t) {
          EXPECT_EQ(y[static_cast<size_t>(t * stride)], -99.0f);  // row 0 was not asked for
          for (int64_t o = 1; o < out; ++o) {
            double want = 0;
            for (int64_t i = 0; i < in; ++i) {
              want +=
                  static_cast<double>(WeightValue(o * in + i)) * x[static_cast<size_t>(t * in + i)];
            }
            EXPECT_NEAR(y[static_cast<size_t>(t * stride + o)], want, 1e-4 * (1 + std::fabs(want)))
                << "dtype " << static_cast<int>(dtype) << " rows " << rows << " in " << in;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace nightshift::engine
