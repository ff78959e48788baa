// The seed's doctest figures for the catalog arithmetic, one table per
// function, plus the edges the seed's prose promises.
#include "planner/estimate.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace nightshift::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ModelSpec Sized(double size_b, double bytes_per_param = 2.0) {
  ModelSpec spec;
  spec.size_b = size_b;
  spec.bytes_per_param = bytes_per_param;
  return spec;
}

TEST(BytesPerParamTest, KnownNamesAndAliases) {
  struct Case {
    const char* name;
    double bytes;
  };
  for (const Case& c : {Case{"fp32", 4.0}, Case{"f32", 4.0}, Case{"fp16", 2.0}, Case{"f16", 2.0},
                        Case{"bf16", 2.0}, Case{"fp8", 1.0}, Case{"int8", 1.0}, Case{"q8", 1.0},
                        Case{"q4", 0.5}, Case{"int4", 0.5}, Case{" BF16 ", 2.0}}) {
    StatusOr<double> bytes = BytesPerParam(c.name);
    ASSERT_TRUE(bytes.ok()) << c.name;
    EXPECT_EQ(*bytes, c.bytes) << c.name;
  }
}

TEST(BytesPerParamTest, UnknownNameIsAnErrorNotADefault) {
  for (const char* name : {"nonsense", "", "fp4", "bf16x"}) {
    StatusOr<double> bytes = BytesPerParam(name);
    ASSERT_FALSE(bytes.ok()) << name;
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bytes.status().message().find("'" + std::string(name) + "'"), std::string::npos);
  }
}

struct LayerCase {
  ModelSpec spec;
  std::optional<int> layers;
  bool estimated;
};

class CountLayersTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(CountLayersTest, MatchesSeed) {
  LayerCount got = CountLayers(GetParam().spec);
  EXPECT_EQ(got.layers, GetParam().layers);
  EXPECT_EQ(got.estimated, GetParam().estimated);
}

ModelSpec WithLayers(int layers) {
  ModelSpec spec;
  spec.layers = layers;
  return spec;
}

ModelSpec Moe(double size_b) {
  ModelSpec spec = Sized(size_b);
  spec.moe = true;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(
    Seed, CountLayersTest,
    ::testing::Values(LayerCase{WithLayers(80), 80, false},  // declared
                      LayerCase{Sized(70), 80, true},        // on a table point
                      LayerCase{Sized(20), 56, true},        // between 14B and 27B
                      LayerCase{Moe(671), std::nullopt, false},
                      LayerCase{ModelSpec{}, std::nullopt, false},  // no size at all
                      // Beyond the seed's doctests: the clamps and other points.
                      LayerCase{Sized(0.5), 16, true}, LayerCase{Sized(1000), 126, true},
                      LayerCase{Sized(8), 32, true}, LayerCase{Sized(3), 28, true},
                      LayerCase{Sized(5), 30, true},  // 28 + 4 x log(5/3)/log(7/3) = 30.41
                      LayerCase{Sized(-3), std::nullopt, false}));

TEST(CountLayersTest, DeclaredDepthWinsEvenForMoe) {
  ModelSpec spec = Moe(671);
  spec.layers = 61;
  EXPECT_EQ(CountLayers(spec).layers, 61);
  EXPECT_FALSE(CountLayers(spec).estimated);
}

TEST(CheckpointGbTest, MatchesSeed) {
  EXPECT_EQ(CheckpointGb(Sized(70)), 140.0);
  EXPECT_EQ(CheckpointGb(Sized(70, 0.5)), 35.0);
  EXPECT_EQ(CheckpointGb(ModelSpec{}), kInf);  // unsized is never free
  EXPECT_EQ(CheckpointGb(Sized(1.2345678)), 2.469);
}

TEST(KvCacheGbTest, MatchesSeed) {
  EXPECT_EQ(KvCacheGb(80), 1.25);
  EXPECT_EQ(KvCacheGb(32), 0.5);
  EXPECT_EQ(KvCacheGb(80, 32), 10.0);
  EXPECT_EQ(KvCacheGb(std::nullopt), 0.0);
  EXPECT_EQ(KvCacheGb(61, 4), 0.953);  // 0.953125
}

TEST(DiskRequiredGbTest, MatchesSeed) {
  DiskRequired full = DiskRequiredGb(CheckpointGb(Sized(70)));
  EXPECT_EQ(full.peak_gb, 140.0);
  EXPECT_EQ(full.steady_gb, 140.0);
  DiskRequired q4 = DiskRequiredGb(CheckpointGb(Sized(70, 0.5)));
  EXPECT_EQ(q4.peak_gb, 35.0);
  EXPECT_EQ(q4.steady_gb, 35.0);
  DiskRequired unsized = DiskRequiredGb(CheckpointGb(ModelSpec{}));
  EXPECT_EQ(unsized.peak_gb, kInf);
  EXPECT_EQ(unsized.steady_gb, kInf);
}

TEST(StreamEfficiencyTest, MatchesSeed) {
  EXPECT_EQ(StreamEfficiency(true), 0.85);
  EXPECT_EQ(StreamEfficiency(false), 0.7);
}

TEST(SecondsPerPassTest, MatchesSeed) {
  EXPECT_EQ(SecondsPerPass(140.0, 4.0, true), 41.176);
  EXPECT_EQ(SecondsPerPass(35.0, 4.0, true), 10.294);
  EXPECT_EQ(SecondsPerPass(140.0, std::nullopt, true), std::nullopt);
  EXPECT_EQ(SecondsPerPass(140.0, 0.0, true), std::nullopt);
  EXPECT_EQ(SecondsPerPass(140.0, -1.0, true), std::nullopt);
  EXPECT_EQ(SecondsPerPass(kInf, 4.0, true), std::nullopt);
  EXPECT_EQ(SecondsPerPass(140.0, 4.0, false), 50.0);
}

TEST(GenerationTimeTest, MatchesSeed) {
  GenerationRequest request;
  request.new_tokens = 100;
  std::optional<GenerationTime> t = EstimateGenerationTime(140.0, 4.0, request);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->seconds_per_pass, 41.176);
  EXPECT_EQ(t->passes, 100);
  EXPECT_EQ(t->decode_tps, 0.024);
  EXPECT_EQ(t->total_seconds, 4117.6);
  EXPECT_EQ(std::round(t->total_seconds / 3600 * 100) / 100, 1.14);  // hours for 100 tokens
  EXPECT_EQ(t->time_to_first_token_s, t->seconds_per_pass);
  EXPECT_EQ(t->tokens_delivered, 100);
  EXPECT_TRUE(t->prompt_is_free);

  // A 2000-token prompt reads the same bytes: no extra time.
  GenerationRequest long_prompt = request;
  long_prompt.prompt_tokens = 2000;
  std::optional<GenerationTime> lp = EstimateGenerationTime(140.0, 4.0, long_prompt);
  ASSERT_TRUE(lp.has_value());
  EXPECT_EQ(lp->total_seconds, t->total_seconds);
  EXPECT_TRUE(lp->prompt_is_free);
  EXPECT_EQ(lp->prompt_tokens, 2000);

  // Eight sequences share the same passes and deliver eight times the tokens.
  GenerationRequest batched = request;
  batched.batch = 8;
  std::optional<GenerationTime> b = EstimateGenerationTime(140.0, 4.0, batched);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->total_seconds, t->total_seconds);
  EXPECT_EQ(b->effective_tps, 0.194);
  EXPECT_EQ(b->tokens_delivered, 800);
  EXPECT_NEAR(b->effective_tps / t->effective_tps, 8.1, 0.05);  // the seed prints 8.1

  EXPECT_FALSE(EstimateGenerationTime(140.0, std::nullopt, request).has_value());
}

TEST(GenerationTimeTest, LongPromptIsFlaggedAndClampsApply) {
  GenerationRequest request;
  request.prompt_tokens = 4097;
  request.new_tokens = 0;  // at least one token: the prompt's own pass
  request.batch = 0;
  std::optional<GenerationTime> t = EstimateGenerationTime(140.0, 4.0, request);
  ASSERT_TRUE(t.has_value());
  EXPECT_FALSE(t->prompt_is_free);
  EXPECT_EQ(t->passes, 1);
  EXPECT_EQ(t->batch, 1);
  request.prompt_tokens = 4096;
  EXPECT_TRUE(EstimateGenerationTime(140.0, 4.0, request)->prompt_is_free);
}

TEST(HumanDurationTest, MatchesSeed) {
  EXPECT_EQ(HumanDuration(0.4), "0.4 s");
  EXPECT_EQ(HumanDuration(42), "42 s");
  EXPECT_EQ(HumanDuration(185), "3 min");
  EXPECT_EQ(HumanDuration(7200), "2.0 h");
  EXPECT_EQ(HumanDuration(200000), "2.3 days");
  EXPECT_EQ(HumanDuration(std::nullopt), "?");
  EXPECT_EQ(HumanDuration(12352.8), "3.4 h");
  EXPECT_EQ(HumanDuration(89.5), "90 s");  // Python formats 89.5 as "90" (tie to even)
  EXPECT_EQ(HumanDuration(90), "2 min");   // 1.5 min, tie to even
}

TEST(TokensPerSecondTest, MatchesSeed) {
  EXPECT_EQ(TokensPerSecond(CheckpointGb(Sized(70)), 4.0, true), 0.024);
  EXPECT_EQ(TokensPerSecond(CheckpointGb(Sized(70, 0.5)), 4.0, true), 0.097);
  EXPECT_EQ(TokensPerSecond(CheckpointGb(Sized(7)), 4.0, true), 0.243);
  EXPECT_EQ(TokensPerSecond(CheckpointGb(Sized(70)), std::nullopt, true), std::nullopt);
  EXPECT_EQ(TokensPerSecond(CheckpointGb(ModelSpec{}), 4.0, true), std::nullopt);
}

TEST(SecondsPerTokenTest, MatchesSeed) {
  EXPECT_EQ(SecondsPerToken(0.024), 41.7);
  EXPECT_EQ(SecondsPerToken(2.0), 0.5);
  EXPECT_EQ(SecondsPerToken(std::nullopt), std::nullopt);
  EXPECT_EQ(SecondsPerToken(0.0), std::nullopt);
}

TEST(BudgetGbTest, MatchesSeed) {
  EXPECT_EQ(BudgetGb({std::nullopt, 8.0, 8.0}), 5.28);          // unified memory
  EXPECT_EQ(BudgetGb({4.0, std::nullopt, 32.0}), 3.68);         // VRAM
  EXPECT_EQ(BudgetGb({std::nullopt, 96.0, 96.0}, 12.0), 12.0);  // capped by free RAM
}

TEST(BudgetGbTest, CpuOnlyMachineGetsEightyPercentOfRam) {
  EXPECT_EQ(BudgetGb({std::nullopt, std::nullopt, 64.0}), 51.2);
  EXPECT_EQ(BudgetGb({std::nullopt, std::nullopt, 64.0}, 20.0), 20.0);
  EXPECT_EQ(BudgetGb({std::nullopt, std::nullopt, 64.0}, 80.0), 51.2);
  EXPECT_EQ(BudgetGb({}), std::nullopt);
}

TEST(FootprintGbTest, SeedFigures) {
  ModelSpec llama70 = Sized(70);
  llama70.layers = 80;
  // 1.25 x 140/80 x 2 + 0.5 + 1.25 = 6.125
  EXPECT_EQ(FootprintGb(llama70, true, 4, 1), 6.1);
  // one resident layer: 2.1875 + 0.5 + 1.25 = 3.9375
  EXPECT_EQ(FootprintGb(llama70, false, 4, 1), 3.9);
  // the KV term scales with the batch: 4.875 + 8 x 1.25
  EXPECT_EQ(FootprintGb(llama70, true, 4, 8), 14.9);
  // and with the context: 4.875 + 10.0
  EXPECT_EQ(FootprintGb(llama70, true, 32, 1), 14.9);
  ModelSpec deepseek = Sized(671, 1.0);
  deepseek.layers = 61;
  // 1.25 x 671/61 x 2 + 0.5 + 0.953 = 28.953
  EXPECT_EQ(FootprintGb(deepseek, true, 4, 1), 29.0);
  // interpolated depth counts: 7B -> 32 layers: 1.09375 + 0.5 + 0.5
  EXPECT_EQ(FootprintGb(Sized(7), true, 4, 1), 2.1);
}

TEST(FootprintGbTest, UnsizedIsInfinite) {
  EXPECT_EQ(FootprintGb(ModelSpec{}, true, 4, 1), kInf);
  EXPECT_EQ(FootprintGb(Moe(671), true, 4, 1), kInf);
}

}  // namespace
}  // namespace nightshift::planner
