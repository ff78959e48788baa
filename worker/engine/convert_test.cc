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

// The BF16 nearest to finite `f` by comparing distances in double (ties to
// the even mantissa), independently of the bit trick under test.
uint16_t ReferenceBf16(float f) {
  const uint16_t down = static_cast<uint16_t>(Bits(f) >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  auto value = [](uint16_t b) {
    const uint32_t bits = static_cast<uint32_t>(b) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return static_cast<double>(v);
  };
  if ((Bits(f) & 0xffff) == 0) return down;
  const double to_down = std::fabs(static_cast<double>(f) - value(down));
  const double to_up = std::fabs(value(up) - static_cast<double>(f));
  if (to_down != to_up) return to_down < to_up ? down : up;
  return (down & 1) ? up : down;
}

// Every F16 pattern, through ConvertToBFloat16 and each loop this CPU has
// (the AVX-512 one where it has AVX512-BF16), at an odd address and with
// tails of every length the loops leave.
TEST(ConvertTest, ToBf16RoundsF16ToNearestEvenForEveryPattern) {
  std::vector<unsigned char> in = AllHalfPatterns(1);
  std::vector<uint16_t> out(65536);
  ConvertToBFloat16(in.data() + 1, DType::kF16, 65536, out.data());
  auto check = [](const std::vector<uint16_t>& got, uint32_t count, const char* name) {
    for (uint32_t h = 0; h < count; ++h) {
      const float expected = ReferenceHalf(h);
      if (std::isnan(expected)) {
        ASSERT_EQ(got[h] & 0x7f80, 0x7f80) << name << " " << h;
        ASSERT_NE(got[h] & 0x7f, 0) << name << " " << h;  // still a NaN, not an infinity
      } else {
        ASSERT_EQ(got[h], ReferenceBf16(expected)) << name << " " << h;
      }
    }
  };
  check(out, 65536, "best");
  int loops = 0;
  for (auto [loop, name] :
       {std::pair{F16ToBf16Loop::kAvx512Bf16, "avx512-bf16"},
        std::pair{F16ToBf16Loop::kAvx2, "avx2"}, std::pair{F16ToBf16Loop::kScalar, "scalar"}}) {
    if (!Supported(loop)) continue;
    ++loops;
    std::vector<uint16_t> with(65536, 0);
    F16ToBFloat16With(loop, in.data() + 1, 65536, with.data());
    EXPECT_EQ(with, out) << name << ": not the same bits as ConvertToBFloat16";
    check(with, 65536, name);
    for (uint32_t count = 1; count <= 40; ++count) {  // every tail length
      std::vector<uint16_t> tail(count + 1, 0xabcd);
      F16ToBFloat16With(loop, in.data() + 1 + 2 * 31744, count, tail.data());
      for (uint32_t k = 0; k < count; ++k) ASSERT_EQ(tail[k], out[31744 + k]) << name << count;
      ASSERT_EQ(tail[count], 0xabcd) << name << ": wrote past " << count;
    }
  }
  EXPECT_GE(loops, 1);
}

TEST(ConvertTest, ToBf16RoundsF32TiesToEvenAndCopiesBf16) {
  // BF16 steps by 2^-7 above 1. 1 + 2^-8 is halfway between 1 and 1 + 2^-7:
  // down to the even mantissa (1.0); 1 + 3 x 2^-8 is halfway between
  // 1 + 2^-7 and 1 + 2^-6: up to the even one.
  std::vector<float> in = {
      1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 1.0f + 0x1p-8f + 0x1p-20f, 3.0e38f, NAN};
  std::vector<unsigned char> bytes(1 + 4 * in.size());
  std::memcpy(bytes.data() + 1, in.data(), 4 * in.size());
  std::vector<uint16_t> out(in.size());
  ConvertToBFloat16(bytes.data() + 1, DType::kF32, static_cast<int64_t>(in.size()), out.data());
  EXPECT_EQ(out[0], 0x3f80);  // 1.0
  EXPECT_EQ(out[1], 0x3f82);  // 1 + 2^-6
  EXPECT_EQ(out[2], 0xc020);  // -2.5, exact
  EXPECT_EQ(out[3], 0x3f81);  // just above the tie: up
  for (size_t i = 0; i + 1 < in.size(); ++i) EXPECT_EQ(out[i], ReferenceBf16(in[i])) << i;
  EXPECT_NE(out[5] & 0x7f, 0);  // NaN stays NaN
  std::vector<unsigned char> halves = AllHalfPatterns(1);
  std::vector<uint16_t> copied(65536);
  ConvertToBFloat16(halves.data() + 1, DType::kBF16, 65536, copied.data());
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(copied[h], h) << h;
}

}  // namespace
}  // namespace nightshift::engine
