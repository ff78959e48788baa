// The seed's doctests for plan, rank and pick, with the same inputs and
// figures, and the four resident-versus-streamed verdict cases.
#include "planner/plan.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/plan_json.h"

namespace nightshift::planner {
namespace {

ModelSpec Entry(const std::string& id, double size_b, int layers, double bytes_per_param = 2.0) {
  ModelSpec spec;
  spec.id = id;
  spec.kind = "llm";
  spec.size_b = size_b;
  spec.layers = layers;
  spec.bytes_per_param = bytes_per_param;
  return spec;
}

PlanOptions Options(std::optional<double> budget_gb, double read_gbs, double free_gb) {
  PlanOptions options;
  options.budget_gb = budget_gb;
  options.disk = {read_gbs, free_gb};
  return options;
}

TEST(PlanTest, Llama70bOnAnElevenGigabyteBudget) {
  PlanResult p = Plan(Entry("llama3.3:70b", 70, 80), Options(11.0, 4.0, 900.0));
  EXPECT_EQ(p.resident_gb, 6.1);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.est_tokens_per_s, 0.024);
  EXPECT_EQ(p.answer_human, "3.4 h");
  EXPECT_EQ(p.time_to_first_token_s, 41.176);
  EXPECT_EQ(p.seconds_per_token, 41.7);
  EXPECT_TRUE(p.usable);
  EXPECT_TRUE(p.blockers.empty());
  // The rest of the plan, from the same formulas.
  EXPECT_EQ(p.checkpoint_gb, 140.0);
  EXPECT_EQ(p.layers, 80);
  EXPECT_FALSE(p.layers_estimated);
  EXPECT_EQ(p.kv_cache_gb, 1.25);
  EXPECT_EQ(p.disk.peak_gb, 140.0);
  EXPECT_TRUE(p.disk_fits);
  EXPECT_EQ(p.seconds_per_pass, 41.176);
  EXPECT_EQ(p.answer_tokens, 300);
  EXPECT_EQ(p.answer_seconds, 12352.8);
  EXPECT_EQ(p.effective_tps, 0.024);
}

TEST(PlanTest, DeepSeekV3IsUnderTheBatchFloor) {
  PlanResult p = Plan(Entry("y", 671, 61, 1.0), Options(50.0, 4.0, 4000.0));
  EXPECT_FALSE(p.usable);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.resident_gb, 29.0);
  EXPECT_EQ(p.est_tokens_per_s, 0.005);
  EXPECT_EQ(p.seconds_per_token, 200.0);
  ASSERT_EQ(p.blockers.size(), 1u);
  // The seed's sentence carries these three figures; ours says the same.
  EXPECT_NE(p.blockers[0].find("0.005 tok/s"), std::string::npos) << p.blockers[0];
  EXPECT_NE(p.blockers[0].find("200.0 s/token"), std::string::npos) << p.blockers[0];
  EXPECT_NE(p.blockers[0].find("0.01 tok/s"), std::string::npos) << p.blockers[0];
}

TEST(PlanTest, TightMemoryAndDisk) {
  PlanResult p = Plan(Entry("x", 70, 80), Options(2.0, 4.0, 20.0));
  EXPECT_FALSE(p.fits);
  EXPECT_FALSE(p.disk_fits);
  EXPECT_FALSE(p.usable);
  ASSERT_EQ(p.blockers.size(), 2u);
  EXPECT_NE(p.blockers[0].find("6.1 GB"), std::string::npos) << p.blockers[0];
  EXPECT_NE(p.blockers[0].find("2.0 GB"), std::string::npos) << p.blockers[0];
  EXPECT_NE(p.blockers[1].find("140 GB"), std::string::npos) << p.blockers[1];
  EXPECT_NE(p.blockers[1].find("20 GB"), std::string::npos) << p.blockers[1];
}

TEST(PlanTest, UnsizedModelIsNullNotFree) {
  ModelSpec moe;
  moe.size_b = 671;
  moe.moe = true;  // no declared depth: cannot be sized
  PlanResult p = Plan(moe, Options(50.0, 4.0, 4000.0));
  EXPECT_EQ(p.resident_gb, std::nullopt);
  EXPECT_EQ(p.checkpoint_gb, 1342.0);
  EXPECT_EQ(p.layers, std::nullopt);
  EXPECT_FALSE(p.fits);
  EXPECT_FALSE(p.usable);
  ASSERT_FALSE(p.blockers.empty());
  EXPECT_NE(p.blockers[0].find("cannot be sized"), std::string::npos);

  PlanResult none = Plan(ModelSpec{}, Options(50.0, 4.0, 4000.0));
  EXPECT_EQ(none.checkpoint_gb, std::nullopt);
  EXPECT_EQ(none.est_tokens_per_s, std::nullopt);
  EXPECT_EQ(none.answer_human, "?");
  EXPECT_FALSE(none.disk_fits);
  nlohmann::ordered_json j = PlanJson(none);
  EXPECT_TRUE(j["resident_gb"].is_null());
  EXPECT_TRUE(j["disk"]["peak_gb"].is_null());  // infinity is not a JSON number
}

TEST(PlanTest, UnknownBandwidthAndBudget) {
  PlanOptions options;
  PlanResult p = Plan(Entry("x", 70, 80), options);
  EXPECT_FALSE(p.fits);  // no budget, no fit verdict
  EXPECT_FALSE(p.disk_fits);
  EXPECT_EQ(p.est_tokens_per_s, std::nullopt);
  EXPECT_EQ(p.seconds_per_pass, std::nullopt);
  ASSERT_EQ(p.blockers.size(), 1u);
  EXPECT_NE(p.blockers[0].find("bandwidth is unknown"), std::string::npos);
}

TEST(PlanTest, BatchMultipliesKvAndDeliveredTokens) {
  PlanOptions options = Options(20.0, 4.0, 900.0);
  options.batch = 8;
  PlanResult p = Plan(Entry("x", 70, 80), options);
  EXPECT_EQ(p.resident_gb, 14.9);        // 4.875 + 8 x 1.25
  EXPECT_EQ(p.answer_seconds, 12352.8);  // same passes
  EXPECT_EQ(p.effective_tps, 0.194);     // 2400 tokens / 12352.8 s
  EXPECT_EQ(p.batch, 8);
}

TEST(PlanTest, LongPromptIsWarnedNotBlocked) {
  PlanOptions options = Options(11.0, 4.0, 900.0);
  options.prompt_tokens = 5000;
  PlanResult p = Plan(Entry("x", 70, 80), options);
  EXPECT_TRUE(p.usable);
  EXPECT_FALSE(p.prompt_is_free);
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("5000-token"), std::string::npos);
}

std::vector<std::pair<std::string, bool>> IdsAndUsable(const std::vector<PlanResult>& plans) {
  std::vector<std::pair<std::string, bool>> out;
  for (const PlanResult& p : plans) out.emplace_back(p.id, p.usable);
  return out;
}

TEST(RankTest, MatchesSeed) {
  std::vector<ModelSpec> rows = {Entry("a", 70, 80), Entry("b", 7, 32)};
  RankOptions options;
  options.budget_gb = 11.0;
  options.disk = {4.0, 900.0};
  using Row = std::pair<std::string, bool>;
  EXPECT_EQ(IdsAndUsable(Rank(rows, options)), (std::vector<Row>{{"a", true}, {"b", true}}));
  // Tighten the disk and the 70B stops being an option at all.
  options.disk = {4.0, 100.0};
  EXPECT_EQ(IdsAndUsable(Rank(rows, options)), (std::vector<Row>{{"b", true}, {"a", false}}));
}

TEST(RankTest, FallsBackToNoPrefetchWhenThatFits) {
  RankOptions options;
  options.budget_gb = 5.0;  // 6.1 GB with prefetch, 3.9 GB without
  options.disk = {4.0, 900.0};
  std::vector<PlanResult> plans = Rank({Entry("a", 70, 80)}, options);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_FALSE(plans[0].prefetching);
  EXPECT_EQ(plans[0].resident_gb, 3.9);
  EXPECT_TRUE(plans[0].fits);
  EXPECT_EQ(plans[0].seconds_per_pass, 50.0);  // 140 / 4 / 0.70
  // Nothing to gain: the prefetched plan is kept when neither fits.
  options.budget_gb = 1.0;
  plans = Rank({Entry("a", 70, 80)}, options);
  EXPECT_TRUE(plans[0].prefetching);
  EXPECT_FALSE(plans[0].fits);
}

TEST(RankTest, KindFilter) {
  ModelSpec vlm = Entry("v", 8, 32);
  vlm.kind = "vlm";
  ModelSpec embed = Entry("e", 1, 16);
  embed.kind = "embedding";
  std::vector<ModelSpec> rows = {Entry("t", 8, 32), vlm, embed};
  RankOptions options;
  options.budget_gb = 40.0;
  options.disk = {4.0, 4000.0};
  options.kind = "llm";
  EXPECT_EQ(Rank(rows, options).size(), 2u);  // a vlm answers text too
  options.kind = "vlm";
  ASSERT_EQ(Rank(rows, options).size(), 1u);
  EXPECT_EQ(Rank(rows, options)[0].id, "v");
  options.kind = "";
  EXPECT_EQ(Rank(rows, options).size(), 3u);
}

std::vector<ModelSpec> PickRows() {
  return {Entry("s", 8, 32), Entry("m", 70, 80), Entry("xl", 671, 61, 1.0)};
}

RankOptions PickOptions(double read_gbs) {
  RankOptions options;
  options.budget_gb = 40.0;
  options.disk = {read_gbs, 4000.0};
  return options;
}

TEST(PickTest, UnscoredSizeDecides) {
  std::optional<PlanResult> picked = Pick(Rank(PickRows(), PickOptions(4.0)));
  ASSERT_TRUE(picked.has_value());
  EXPECT_EQ(picked->id, "m");
}

TEST(PickTest, CapabilityBeatsSize) {
  std::vector<ModelSpec> rows = PickRows();
  ModelSpec big = rows[1], small = rows[0];
  big.score = 84;
  small.score = 87;
  std::optional<PlanResult> picked = Pick(Rank({big, small}, PickOptions(4.0)));
  ASSERT_TRUE(picked.has_value());
  EXPECT_EQ(picked->id, "s");
}

TEST(PickTest, NothingClearsTheFloorSoTheFastestWins) {
  std::vector<PlanResult> slow = Rank(PickRows(), PickOptions(0.12));
  for (const PlanResult& p : slow) EXPECT_FALSE(p.usable) << p.id;
  std::optional<PlanResult> picked = Pick(slow);
  ASSERT_TRUE(picked.has_value());
  EXPECT_EQ(picked->id, "s");
  EXPECT_EQ(picked->est_tokens_per_s, 0.006);
}

TEST(PickTest, EmptyAndNothingFits) {
  EXPECT_FALSE(Pick({}).has_value());
  RankOptions options = PickOptions(4.0);
  options.budget_gb = 0.5;
  EXPECT_FALSE(Pick(Rank(PickRows(), options)).has_value());
}

Sizing Heuristic70b(const PlanOptions& options) {
  return HeuristicSizing(Entry("x", 70, 80), options.prefetching, options.context_k, options.batch);
}

TEST(CompareResidentTest, OnlyStreamingRuns) {
  PlanOptions options = Options(11.0, 4.0, 900.0);
  Sizing sizing = Heuristic70b(options);
  Comparison c = CompareResident(sizing, PlanSized(sizing, options), options, 1008.0);
  EXPECT_EQ(c.resident_whole_gb, 141.75);  // 140 + 0.5 + 1.25
  EXPECT_FALSE(c.resident_fits);
  EXPECT_TRUE(c.streamed_runs);
  EXPECT_EQ(c.resident_seconds, std::nullopt);
  EXPECT_EQ(c.streamed_seconds, 12352.8);
  EXPECT_EQ(c.slowdown, std::nullopt);
  EXPECT_NE(c.verdict.find("only way"), std::string::npos) << c.verdict;
  EXPECT_NE(c.verdict.find("3.4 h"), std::string::npos) << c.verdict;
}

TEST(CompareResidentTest, BothRunSoTheTradeIsStated) {
  PlanOptions options = Options(160.0, 4.0, 900.0);
  Sizing sizing = Heuristic70b(options);
  Comparison c = CompareResident(sizing, PlanSized(sizing, options), options, 1008.0);
  EXPECT_TRUE(c.resident_fits);
  EXPECT_TRUE(c.streamed_runs);
  // 300 tokens x 140 GB / (1008 GB/s x 0.7) = 59.52 s
  EXPECT_EQ(c.resident_seconds, 59.5);
  EXPECT_EQ(c.slowdown, 207.6);  // 12352.8 / 59.5
  EXPECT_NE(c.verdict.find("208x"), std::string::npos) << c.verdict;
  EXPECT_NE(c.verdict.find("run it resident"), std::string::npos) << c.verdict;
  nlohmann::ordered_json j = ComparisonJson(c);
  EXPECT_EQ(j["resident_seconds"], 59.5);
  EXPECT_EQ(j["streamed_seconds"], 12352.8);
  EXPECT_EQ(j["slowdown"], 207.6);
  EXPECT_EQ(j["verdict"], c.verdict);
}

TEST(CompareResidentTest, OnlyResidentRuns) {
  PlanOptions options = Options(160.0, 4.0, 10.0);  // no disk room to stream from
  Sizing sizing = Heuristic70b(options);
  Comparison c = CompareResident(sizing, PlanSized(sizing, options), options, 1008.0);
  EXPECT_TRUE(c.resident_fits);
  EXPECT_FALSE(c.streamed_runs);
  EXPECT_EQ(c.streamed_seconds, std::nullopt);
  EXPECT_NE(c.verdict.find("Streaming is not possible"), std::string::npos) << c.verdict;
  EXPECT_NE(c.verdict.find("60 s"), std::string::npos) << c.verdict;
}

TEST(CompareResidentTest, NeitherRuns) {
  PlanOptions options = Options(2.0, 4.0, 10.0);
  Sizing sizing = Heuristic70b(options);
  Comparison c = CompareResident(sizing, PlanSized(sizing, options), options, 1008.0);
  EXPECT_FALSE(c.resident_fits);
  EXPECT_FALSE(c.streamed_runs);
  EXPECT_NE(c.verdict.find("neither"), std::string::npos) << c.verdict;
}

TEST(PlanJsonTest, SeedKeysAndValues) {
  nlohmann::ordered_json j =
      PlanJson(Plan(Entry("llama3.3:70b", 70, 80), Options(11.0, 4.0, 900.0)));
  for (const char* key : {"resident_gb",
                          "checkpoint_gb",
                          "layers",
                          "layers_estimated",
                          "kv_cache_gb",
                          "disk",
                          "disk_fits",
                          "est_tokens_per_s",
                          "seconds_per_token",
                          "seconds_per_pass",
                          "time_to_first_token_s",
                          "answer_seconds",
                          "answer_human",
                          "effective_tps",
                          "fits",
                          "usable",
                          "blockers",
                          "prefetching",
                          "context_k",
                          "batch",
                          "answer_tokens"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["model"], "llama3.3:70b");
  EXPECT_EQ(j["resident_gb"], 6.1);
  EXPECT_EQ(j["answer_human"], "3.4 h");
  EXPECT_EQ(j["disk"]["steady_gb"], 140.0);
  EXPECT_TRUE(j["blockers"].empty());
  EXPECT_EQ(j.dump().find("inf"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::planner
