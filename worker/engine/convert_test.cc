#include "worker/engine/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace nightshift::engine {
namespace {

using checkpoint::DType;

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Every 16-bit pattern, little-endian, starting at byte `offset` of the result.
std::vector<unsigned char> AllHalfPatterns(size_t offset) {
  std::vector<unsigned char> bytes(offset + 2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    bytes[offset + 2 * h] = static_cast<unsigned char>(h & 0xff);
    bytes[offset + 2 * h + 1] = static_cast<unsigned char>(h >> 8);
  }
  return bytes;
}

// IEEE binary16 by its definition.
float ReferenceHalf(uint32_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

TEST(ConvertTest, Bf16IsTheTopHalfOfAFloatForEveryPattern) {
  std::vector<unsigned char> in = AllHalfPatterns(1);  // deliberately unaligned
  std::vector<float> out(65536);
  ConvertToFloat(in.data() + 1, DType::kBF16, 65536, out.data());
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(Bits(out[h]), h << 16) << h;
}

TEST(ConvertTest, F16MatchesTheDefinitionForEveryPattern) {
  std::vector<unsigned char> in = AllHalfPatterns(1);
  std::vector<float> out(65536);
  ConvertToFloat(in.data() + 1, DType::kF16, 65536, out.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    float expected = ReferenceHalf(h);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(out[h])) << h;
      ASSERT_EQ(Bits(out[h]) >> 31, h >> 15) << h;
    } else {
      ASSERT_EQ(Bits(out[h]), Bits(expected)) << h;  // exact, including -0 and subnormals
    }
  }
}

TEST(ConvertTest, F32IsCopied) {
  std::vector<float> in = {1.5f, -2.25f, 1e-30f};
  std::vector<unsigned char> bytes(1 + 12);
  std::memcpy(bytes.data() + 1, in.data(), 12);
  std::vector<float> out(3);
  ConvertToFloat(bytes.data() + 1, DType::kF32, 3, out.data());
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace nightshift::engine
