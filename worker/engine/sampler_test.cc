#include "worker/engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace nightshift::engine {
namespace {

using ::testing::HasSubstr;

SamplingParams Sampling(double temperature, int64_t top_k, double top_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

// Token frequencies over `draws` samples.
std::map<int32_t, double> Frequencies(const SamplingParams& params,
                                      const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::map<int32_t, double> freq;
  for (int i = 0; i < draws; ++i) {
    freq[sampler.Sample(logits.data(), static_cast<int64_t>(logits.size()))] += 1.0 / draws;
  }
  return freq;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p;
  double total = 0;
  for (float l : logits) total += std::exp(l / temperature);
  for (float l : logits) p.push_back(std::exp(l / temperature) / total);
  return p;
}

TEST(SamplerTest, GreedyIsTheFirstLargestLogit) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  Sampler greedy(SamplingParams{});
  EXPECT_EQ(greedy.Sample(logits.data(), 4), 1);
  EXPECT_EQ(ArgMax(logits.data(), 4), 1);
  logits[0] = std::numeric_limits<float>::quiet_NaN();
  logits[2] = 7.0f;
  EXPECT_EQ(greedy.Sample(logits.data(), 4), 2);
}

TEST(SamplerTest, SameSeedSameDrawsOtherSeedOtherDraws) {
  std::vector<float> flat(50, 0.0f);
  auto draws = [&](uint64_t seed) {
    Sampler s(Sampling(1.0, 0, 1.0, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.Sample(flat.data(), 50));
    return out;
  };
  EXPECT_EQ(draws(7), draws(7));
  EXPECT_NE(draws(7), draws(8));
}

TEST(SamplerTest, TopKRestrictsTheSupportToTheKLargest) {
  std::vector<float> logits = {1.0f, 0.2f, 0.9f, 0.1f, 0.8f, 0.0f};
  std::map<int32_t, double> freq = Frequencies(Sampling(1.0, 3, 1.0, 1), logits, 3000);
  std::set<int32_t> support;
  for (const auto& [token, f] : freq) support.insert(token);
  EXPECT_EQ(support, (std::set<int32_t>{0, 2, 4}));
}

TEST(SamplerTest, TopKOneIsGreedy) {
  std::vector<float> logits = {0.1f, 0.3f, 0.2f};
  std::map<int32_t, double> freq = Frequencies(Sampling(5.0, 1, 1.0, 3), logits, 200);
  EXPECT_EQ(freq.size(), 1u);
  EXPECT_EQ(freq.begin()->first, 1);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto support = [&](double top_p) {
    std::set<int32_t> s;
    for (const auto& [token, f] : Frequencies(Sampling(1.0, 0, top_p, 5), logits, 3000))
      s.insert(token);
    return s;
  };
  EXPECT_EQ(support(0.4), (std::set<int32_t>{0}));
  EXPECT_EQ(support(0.75), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(support(0.9), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(support(1.0), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplerTest, TopPRenormalisesOverTheKeptSet) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  std::map<int32_t, double> freq = Frequencies(Sampling(1.0, 0, 0.75, 11), logits, 20000);
  EXPECT_NEAR(freq[0], 0.5 / 0.8, 0.02);
  EXPECT_NEAR(freq[1], 0.3 / 0.8, 0.02);
}

TEST(SamplerTest, FrequenciesFollowTheSoftmaxAtTheTemperature) {
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f};
  for (double temperature : {1.0, 0.5, 2.0}) {
    std::map<int32_t, double> freq = Frequencies(Sampling(temperature, 0, 1.0, 42), logits, 20000);
    std::vector<double> expected = Softmax(logits, temperature);
    for (int32_t t = 0; t < 4; ++t)
      EXPECT_NEAR(freq[t], expected[t], 0.015) << temperature << " " << t;
  }
}

TEST(SamplerTest, LowTemperatureConcentratesHighTemperatureFlattens) {
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f};
  double cold = Frequencies(Sampling(0.1, 0, 1.0, 9), logits, 5000)[0];
  double warm = Frequencies(Sampling(1.0, 0, 1.0, 9), logits, 5000)[0];
  double hot = Frequencies(Sampling(100.0, 0, 1.0, 9), logits, 5000)[0];
  EXPECT_GT(cold, 0.99);
  EXPECT_LT(warm, cold);
  EXPECT_NEAR(hot, 0.25, 0.03);
}

TEST(SamplerTest, NanLogitsAreNeverSampled) {
  std::vector<float> logits = {std::numeric_limits<float>::quiet_NaN(), 0.0f, 0.0f};
  std::map<int32_t, double> freq = Frequencies(Sampling(1.0, 0, 1.0, 2), logits, 500);
  EXPECT_EQ(freq.count(0), 0u);
}

TEST(SamplerTest, ValidatesParameters) {
  EXPECT_TRUE(ValidateSamplingParams(Sampling(0.7, 40, 0.9, 1)).ok());
  EXPECT_THAT(ValidateSamplingParams(Sampling(-1, 0, 1, 0)).message(), HasSubstr("temperature"));
  EXPECT_THAT(ValidateSamplingParams(Sampling(NAN, 0, 1, 0)).message(), HasSubstr("temperature"));
  EXPECT_THAT(ValidateSamplingParams(Sampling(1, -2, 1, 0)).message(), HasSubstr("top_k"));
  EXPECT_THAT(ValidateSamplingParams(Sampling(1, 0, 0, 0)).message(), HasSubstr("top_p"));
  EXPECT_THAT(ValidateSamplingParams(Sampling(1, 0, 1.5, 0)).message(), HasSubstr("top_p"));
  EXPECT_EQ(ValidateSamplingParams(Sampling(1, 0, 1.5, 0)).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nightshift::engine
