// The registry-wide test: every architecture in the table has a fixture, and
// every fixture in tests/data/models runs through the engine to the logits and
// greedy tokens of an independent float32 reference (golden.json), each
// prompt alone and all prompts in one batch.
#include <gtest/gtest.h>

#include <set>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/architecture.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using checkpoint::testing::FixtureNames;
using testing::Golden;
using testing::LoadGolden;
using testing::MaxAbsDiff;

// Runs `requests` as one batch until all finish; results in request order and
// the number of passes through `passes`.
std::vector<SequenceResult> RunBatch(Engine& engine, const std::vector<SequenceRequest>& requests,
                                     int64_t* passes) {
  for (const SequenceRequest& r : requests) EXPECT_TRUE(engine.Add(r).ok());
  std::vector<SequenceResult> results;
  *passes = 0;
  while (engine.active() > 0) {
    StatusOr<PassStats> stats = engine.Step();
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (!stats.ok()) break;
    ++*passes;
    for (SequenceResult& r : engine.TakeFinished()) results.push_back(std::move(r));
  }
  return results;
}

SequenceRequest GreedyRequest(const std::vector<TokenId>& prompt, size_t steps) {
  SequenceRequest r;
  r.prompt = prompt;
  r.max_new_tokens = static_cast<int64_t>(steps);
  r.ignore_eos = true;  // the reference generates a fixed number of steps
  r.return_last_logits = true;
  return r;
}

void ExpectMatchesGolden(const Golden& golden, size_t i, const SequenceResult& result) {
  EXPECT_EQ(result.prompt, golden.prompts[i]);
  EXPECT_LE(MaxAbsDiff(result.last_logits, golden.last_logits[i]), golden.atol) << "prompt " << i;
  EXPECT_EQ(result.generated, golden.greedy[i]) << "prompt " << i;
  EXPECT_EQ(result.finish_reason, FinishReason::kLength);
}

TEST(GoldenRegistryTest, EveryArchitectureHasAFixtureAndEveryFixtureAnArchitecture) {
  std::set<std::string> fixture_types;
  for (const std::string& name : FixtureNames()) {
    std::string type = testing::FixtureModelType(name);
    fixture_types.insert(type);
    EXPECT_TRUE(FindArchitecture(type).ok()) << name << " has unregistered model_type " << type;
  }
  for (const Architecture* arch : Architectures()) {
    EXPECT_TRUE(fixture_types.count(arch->model_type)) << arch->model_type << " has no fixture";
  }
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.threads =
        1;  // shared test cores: a waiting second OpenMP thread costs more than it gives
    StatusOr<std::unique_ptr<Engine>> opened = Engine::Open(FixtureDir(GetParam()), options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    engine_ = std::move(opened).value();
    golden_ = LoadGolden(GetParam());
    ASSERT_FALSE(golden_.prompts.empty());
  }

  std::unique_ptr<Engine> engine_;
  Golden golden_;
};

TEST_P(GoldenTest, EachPromptAloneMatchesTheReference) {
  for (size_t i = 0; i < golden_.prompts.size(); ++i) {
    int64_t passes = 0;
    std::vector<SequenceResult> results =
        RunBatch(*engine_, {GreedyRequest(golden_.prompts[i], golden_.greedy[i].size())}, &passes);
    ASSERT_EQ(results.size(), 1u);
    ExpectMatchesGolden(golden_, i, results[0]);
    EXPECT_EQ(passes, static_cast<int64_t>(golden_.greedy[i].size()));
  }
}

TEST_P(GoldenTest, AllPromptsInOneBatchMatchTheReference) {
  std::vector<SequenceRequest> requests;
  for (size_t i = 0; i < golden_.prompts.size(); ++i) {
    requests.push_back(GreedyRequest(golden_.prompts[i], golden_.greedy[i].size()));
  }
  int64_t passes = 0;
  std::vector<SequenceResult> results = RunBatch(*engine_, requests, &passes);
  ASSERT_EQ(results.size(), golden_.prompts.size());
  for (size_t i = 0; i < results.size(); ++i) ExpectMatchesGolden(golden_, i, results[i]);
  size_t longest = 0;
  for (const auto& g : golden_.greedy) longest = std::max(longest, g.size());
  EXPECT_EQ(passes, static_cast<int64_t>(longest));  // one pass per token, whatever the batch
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace nightshift::engine
