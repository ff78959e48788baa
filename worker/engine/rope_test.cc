#include "worker/engine/rope.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nightshift::engine {
namespace {

RopeConfig Rope(RopeType type, double theta, int64_t dim) {
  RopeConfig r;
  r.type = type;
  r.theta = theta;
  r.rotary_dim = dim;
  return r;
}

TEST(RopeTest, DefaultFrequencies) {
  std::vector<float> f = RopeInverseFrequencies(Rope(RopeType::kDefault, 10000, 16));
  ASSERT_EQ(f.size(), 8u);
  for (size_t i = 0; i < f.size(); ++i) {
    double expected = std::pow(10000.0, -2.0 * static_cast<double>(i) / 16);
    EXPECT_NEAR(f[i], expected, expected * 1e-6) << i;
  }
  EXPECT_EQ(f[0], 1.0f);
}

TEST(RopeTest, LinearScalingDividesByTheFactor) {
  RopeConfig linear = Rope(RopeType::kLinear, 10000, 16);
  linear.factor = 2;
  std::vector<float> base = RopeInverseFrequencies(Rope(RopeType::kDefault, 10000, 16));
  std::vector<float> scaled = RopeInverseFrequencies(linear);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], base[i] / 2) << i;
}

TEST(RopeTest, Llama3KeepsHighFrequenciesScalesLowOnesAndBlendsBetween) {
  RopeConfig r = Rope(RopeType::kLlama3, 500000, 16);
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position_embeddings = 64;
  std::vector<float> base = RopeInverseFrequencies(Rope(RopeType::kDefault, 500000, 16));
  std::vector<float> scaled = RopeInverseFrequencies(r);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    double wavelen = 2 * M_PI / base[i];
    if (wavelen < 64.0 / 4) {
      EXPECT_FLOAT_EQ(scaled[i], base[i]) << i;
      ++kept;
    } else if (wavelen > 64.0 / 1) {
      EXPECT_FLOAT_EQ(scaled[i], base[i] / 8) << i;
      ++divided;
    } else {
      double smooth = (64.0 / wavelen - 1) / (4 - 1);
      EXPECT_NEAR(scaled[i], (1 - smooth) * base[i] / 8 + smooth * base[i], base[i] * 1e-5) << i;
      EXPECT_LT(scaled[i], base[i]);
      EXPECT_GT(scaled[i], base[i] / 8);
      ++blended;
    }
  }
  // This configuration exercises all three bands.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(RopeTest, PartialRotaryUsesTheRotaryDimension) {
  std::vector<float> f = RopeInverseFrequencies(Rope(RopeType::kDefault, 10000, 4));
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[1], 0.01f, 1e-8);  // 10000^(-2/4)
}

}  // namespace
}  // namespace nightshift::engine
