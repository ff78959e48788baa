// Bounded activations: a pass run in micro-batches of a few rows (the
// activation budget forcing R small, attention in small query blocks) gives
// the results of the default R = 256, on every fixture, for generation and
// classification, on the CPU path and the accelerator path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/model_facts.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/kernels.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using checkpoint::testing::FixtureNames;
using testing::Drain;
using testing::Golden;
using testing::GreedyRequest;
using testing::LoadGolden;
using testing::MaxAbsDiff;
using testing::OpenEngine;

constexpr double kTolerance = 1e-5;  // relative to the largest logit

struct FixtureRun {
  std::vector<SequenceResult> results;
  std::vector<PassStats> passes;
  int64_t micro_batch_rows = 0;
};

// The golden prompts generating together (so rows of several sequences share
// micro-batches, and decode steps follow the prompts), then a classification
// whose prompt and labels straddle micro-batch boundaries, beside one more
// generation.
FixtureRun RunFixture(const std::string& fixture, bool accelerator, uint64_t activation_budget) {
  EngineOptions options;
  options.threads = 1;
  options.accelerator_path_on_cpu = accelerator;
  options.activation_budget_bytes = activation_budget;
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(fixture), options);
  FixtureRun run;
  if (engine == nullptr) return run;
  run.micro_batch_rows = engine->micro_batch_rows();
  const Golden golden = LoadGolden(fixture);
  for (const std::vector<TokenId>& prompt : golden.prompts) {
    EXPECT_TRUE(engine->Add(GreedyRequest(prompt, 3)).ok());
  }
  std::vector<SequenceResult> generated = Drain(*engine, &run.passes);
  SequenceRequest classify;
  classify.prompt = golden.prompts[0];
  classify.labels = {{5, 6, 7, 8}, {9}, {10, 11}, {12, 13, 14, 15, 16}};
  classify.return_last_logits = true;
  EXPECT_TRUE(engine->Add(classify).ok());
  EXPECT_TRUE(engine->Add(GreedyRequest(golden.prompts.back(), 2)).ok());
  run.results = Drain(*engine, &run.passes);
  run.results.insert(run.results.begin(), generated.begin(), generated.end());
  return run;
}

void ExpectSameResults(const FixtureRun& want, const FixtureRun& got, const std::string& what) {
  ASSERT_EQ(want.results.size(), got.results.size()) << what;
  for (size_t i = 0; i < want.results.size(); ++i) {
    const SequenceResult& a = want.results[i];
    const SequenceResult& b = got.results[i];
    SCOPED_TRACE(what + ", sequence " + std::to_string(i));
    EXPECT_EQ(a.generated, b.generated);
    // Relative to the largest logit: micro-batches of up to kSmallMatmulMaxRows
    // (32) rows take the small-batch kernel, which sums in another order than
    // the GEMM a whole prompt takes (stories260k: 2.2e-5 at logits up to 11).
    // A label token's log-prob is a logit less the log-sum-exp of all, so it
    // inherits their error: 2.1e-5 on AMD EPYC family 25 model 17
    // (2026-12-03), where an absolute 1e-5 failed.
    double largest = 1;
    for (float v : a.last_logits) largest = std::max(largest, std::fabs(static_cast<double>(v)));
    EXPECT_LE(MaxAbsDiff(a.last_logits, b.last_logits), kTolerance * largest);
    EXPECT_EQ(a.best_label, b.best_label);
    ASSERT_EQ(a.labels.size(), b.labels.size());
    for (size_t j = 0; j < a.labels.size(); ++j) {
      ASSERT_EQ(a.labels[j].token_logprobs.size(), b.labels[j].token_logprobs.size());
      for (size_t k = 0; k < a.labels[j].token_logprobs.size(); ++k) {
        EXPECT_NEAR(a.labels[j].token_logprobs[k], b.labels[j].token_logprobs[k],
                    kTolerance * largest)
            << "label " << j << " token " << k;
      }
      EXPECT_NEAR(a.labels[j].probability, b.labels[j].probability, kTolerance * largest);
    }
  }
}

TEST(MicroBatchTest, BudgetSetsTheRowsAndDefaultsTo256) {
  const std::string fixture = "llama-gqa-sharded";
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(fixture), {});
  ASSERT_NE(engine, nullptr);
  const ModelConfig& c = engine->config();
  const uint64_t row = ActivationBytesPerRow(c);
  EXPECT_EQ(row, 4u * static_cast<uint64_t>(8 * c.hidden_size + 6 * c.q_dim() + 6 * c.kv_dim() +
                                            3 * c.intermediate_size));
  EXPECT_EQ(engine->micro_batch_rows(), kMaxMicroBatchRows);
  EXPECT_EQ(MicroBatchRows(c, 0), 256);
  EXPECT_EQ(MicroBatchRows(c, 256 * row), 256);
  EXPECT_EQ(MicroBatchRows(c, 1000 * row), 256);  // a larger budget does not raise R
  EXPECT_EQ(MicroBatchRows(c, 255 * row + row - 1), 255);
  EXPECT_EQ(MicroBatchRows(c, 3 * row), 3);
  EXPECT_EQ(MicroBatchRows(c, 1), 1);  // at least one row

  EngineOptions options;
  options.activation_budget_bytes = 3 * row;
  engine = OpenEngine(FixtureDir(fixture), options);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->micro_batch_rows(), 3);
  ASSERT_TRUE(engine->Add(GreedyRequest({1, 2, 3, 4, 5, 6, 7}, 1)).ok());
  StatusOr<PassStats> pass = engine->Step();
  ASSERT_TRUE(pass.ok()) << pass.status().ToString();
  EXPECT_EQ(pass->micro_batch_rows, 3);
}

// The planner prices a memory budget's activations (the worker's advert,
// `plan`) with the engine's own rows and score bound.
TEST(MicroBatchTest, ThePlannersActivationWorkingSetIsTheEngines) {
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir("llama-gqa-sharded"), {});
  ASSERT_NE(engine, nullptr);
  const ModelConfig& c = engine->config();
  const uint64_t row = ActivationBytesPerRow(c);
  for (uint64_t budget : {uint64_t{0}, uint64_t{1}, 3 * row, 1000 * row, uint64_t{1} << 30}) {
    const uint64_t scores = budget > 0 ? std::min<uint64_t>(budget, kMaxAttentionScoreBytes)
                                       : static_cast<uint64_t>(kMaxAttentionScoreBytes);
    EXPECT_EQ(planner::ActivationWorkingSetBytes(c, budget),
              static_cast<uint64_t>(MicroBatchRows(c, budget)) * row + 2 * scores)
        << budget;
  }
}

// Every fixture, both paths: R = 3 (and the budget's tiny attention blocks)
// against the default R.
TEST(MicroBatchTest, SmallMicroBatchesGiveTheDefaultResults) {
  for (const std::string& fixture : FixtureNames()) {
    for (bool accelerator : {false, true}) {
      const std::string what = fixture + (accelerator ? " (accelerator path)" : " (CPU path)");
      const FixtureRun want = RunFixture(fixture, accelerator, 0);
      ASSERT_EQ(want.micro_batch_rows, kMaxMicroBatchRows) << what;
      std::unique_ptr<Engine> probe = OpenEngine(FixtureDir(fixture), {});
      ASSERT_NE(probe, nullptr);
      const FixtureRun got =
          RunFixture(fixture, accelerator, 3 * ActivationBytesPerRow(probe->config()));
      ASSERT_EQ(got.micro_batch_rows, 3) << what;
      ASSERT_FALSE(got.passes.empty());
      for (const PassStats& p : got.passes) EXPECT_EQ(p.micro_batch_rows, 3) << what;
      // The first pass holds every prompt: more rows than one micro-batch.
      EXPECT_GT(got.passes[0].tokens, 3) << what;
      ExpectSameResults(want, got, what);
    }
  }
}

}  // namespace
}  // namespace nightshift::engine
