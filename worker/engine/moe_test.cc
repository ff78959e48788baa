// Mixtures of experts (experts.h, the engine's expert slices): the fixtures
// route every token to the experts the independent reference does, and a
// pass reads only the slices its rows route to.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using testing::Drain;
using testing::GreedyRequest;
using testing::OpenEngine;

const std::vector<std::string>& MoeFixtures() {
  static const std::vector<std::string> names = {"mixtral", "qwen2-moe", "qwen3-moe"};
  return names;
}

nlohmann::json ReadGolden(const std::string& fixture) {
  std::ifstream in(FixtureDir(fixture) + "/golden.json");
  return nlohmann::json::parse(in);
}

struct RoutingCase {
  std::string fixture;
  bool accelerator = false;
  bool resident = false;
};

class RoutingTest : public ::testing::TestWithParam<RoutingCase> {};

// Each prompt alone: its first pass routes exactly the reference's experts
// at every sparse layer (the union over its tokens), and nothing at the dense
// ones; the pass reads the routed experts and no others.
TEST_P(RoutingTest, EachPromptRoutesToTheReferenceExperts) {
  const RoutingCase& c = GetParam();
  const nlohmann::json golden = ReadGolden(c.fixture);
  const auto prompts = golden["prompts"].get<std::vector<std::vector<TokenId>>>();
  const nlohmann::json& used = golden["experts_used"];
  const int64_t experts = golden["num_experts"].get<int64_t>();
  const size_t sparse_layers = golden["sparse_layers"].size();
  EngineOptions options;
  options.threads = 1;
  options.accelerator_path_on_cpu = c.accelerator;
  options.residency = c.resident ? Residency::kResident : Residency::kStream;
  options.expert_reads = ExpertReads::kRouted;
  options.expert_slice_bytes = 1;  // a slice per expert: reads show the routing
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(c.fixture), options);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->Add(GreedyRequest(prompts[p], 1)).ok());
    std::vector<PassStats> passes;
    Drain(*engine, &passes);
    ASSERT_EQ(passes.size(), 1u);
    const PassStats& pass = passes[0];
    ASSERT_EQ(pass.routed_experts.size(), used[p].size());
    int64_t routed = 0;
    for (size_t layer = 0; layer < used[p].size(); ++layer) {
      const std::vector<int64_t> want = used[p][layer].is_null()
                                            ? std::vector<int64_t>{}
                                            : used[p][layer].get<std::vector<int64_t>>();
      EXPECT_EQ(pass.routed_experts[layer], want)
          << c.fixture << " prompt " << p << " layer " << layer;
      routed += static_cast<int64_t>(want.size());
    }
    EXPECT_EQ(pass.experts_total, experts * static_cast<int64_t>(sparse_layers));
    EXPECT_EQ(pass.experts_routed, routed);
    EXPECT_EQ(pass.experts_read, routed);  // a slice per expert: only the routed ones
  }
}

std::vector<RoutingCase> RoutingCases() {
  std::vector<RoutingCase> cases;
  for (const std::string& name : MoeFixtures()) {
    cases.push_back({name, false, false});
    cases.push_back({name, true, false});
    cases.push_back({name, false, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RoutingTest, ::testing::ValuesIn(RoutingCases()),
                         [](const ::testing::TestParamInfo<RoutingCase>& info) {
                           std::string name = info.param.fixture;
                           for (char& ch : name)
                             ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           if (info.param.accelerator) name += "_accelerator";
                           if (info.param.resident) name += "_resident";
                           return name;
                         });

// All prompts of a fixture in one batch, every way the experts can be read
// (routed only, every expert ahead, slices of several experts or one),
// streamed and resident: the same logits and tokens, bit for bit, as the
// default run, which matches the reference (engine_golden_test.cc).
TEST(MoeReadsTest, EveryWayOfReadingTheExpertsGivesTheSameResults) {
  for (const std::string& fixture : MoeFixtures()) {
    const nlohmann::json golden = ReadGolden(fixture);
    const auto prompts = golden["prompts"].get<std::vector<std::vector<TokenId>>>();
    auto run = [&](const EngineOptions& options, int64_t* experts_read, int64_t* experts_total) {
      std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(fixture), options);
      std::vector<SequenceResult> results;
      if (engine == nullptr) return results;
      for (const auto& prompt : prompts) EXPECT_TRUE(engine->Add(GreedyRequest(prompt, 4)).ok());
      std::vector<PassStats> passes;
      results = Drain(*engine, &passes);
      *experts_read = *experts_total = 0;
      for (const PassStats& p : passes) {
        *experts_read += p.experts_read;
        *experts_total += p.experts_total;
      }
      return results;
    };
    EngineOptions base;
    base.threads = 1;
    int64_t read = 0, total = 0;
    const std::vector<SequenceResult> want = run(base, &read, &total);
    ASSERT_EQ(want.size(), prompts.size());
    for (ExpertReads reads : {ExpertReads::kRouted, ExpertReads::kAll}) {
      for (uint64_t slice : {uint64_t{1}, uint64_t{40000}, uint64_t{1} << 30}) {
        for (Residency residency : {Residency::kStream, Residency::kResident}) {
          EngineOptions options = base;
          options.expert_reads = reads;
          options.expert_slice_bytes = slice;
          options.residency = residency;
          const std::vector<SequenceResult> got = run(options, &read, &total);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].generated, want[i].generated) << fixture << " slice " << slice;
            EXPECT_EQ(got[i].last_logits, want[i].last_logits) << fixture << " slice " << slice;
          }
          if (reads == ExpertReads::kAll && residency == Residency::kStream) {
            EXPECT_EQ(read, total) << fixture;  // every expert, every pass
          }
          if (reads == ExpertReads::kRouted && residency == Residency::kStream && slice == 1) {
            EXPECT_LT(read, total) << fixture;  // the decode passes route to few
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace nightshift::engine
