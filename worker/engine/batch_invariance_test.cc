// Batch invariance, the engine's default (EngineOptions::batch_invariant):
// on every fixture (each dense family and each quantized format), a prompt's
// last logits and label log-probabilities are bitwise the same, and its
// greedy and seeded-sampling tokens equal, whether it runs alone or inside
// batches of 2, 7, 33 and 64 sequences of random other prompts, at any
// position among them, with the layers' rows cut into micro-batches of 256
// or of 5, on 1 or 2 compute threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using checkpoint::testing::FixtureNames;

constexpr int64_t kNewTokens = 4;

// The sequences compared: greedy, sampled with a fixed seed, and the prompt
// classified over three labels (one of them two tokens long).
std::vector<SequenceRequest> Targets(const std::vector<TokenId>& prompt) {
  SequenceRequest greedy = testing::GreedyRequest(prompt, kNewTokens);
  greedy.return_last_logits = true;
  SequenceRequest sampled = greedy;
  sampled.sampling.temperature = 0.8;
  sampled.sampling.top_k = 20;
  sampled.sampling.seed = 1234;
  SequenceRequest classified;
  classified.prompt = prompt;
  classified.labels = {{3}, {5, 7}, {11}};
  return {greedy, sampled, classified};
}

struct Outcome {
  std::vector<float> last_logits;
  std::vector<TokenId> generated;
  std::vector<double> label_logprobs;  // every label token's, in order
};

Outcome OutcomeOf(const SequenceResult& r) {
  Outcome o{r.last_logits, r.generated, {}};
  for (const LabelScore& label : r.labels) {
    o.label_logprobs.insert(o.label_logprobs.end(), label.token_logprobs.begin(),
                            label.token_logprobs.end());
  }
  return o;
}

// Runs the targets among `others` random prompts (the targets at a random
// position) and returns the targets' results.
std::vector<Outcome> RunAmong(Engine& engine, const std::vector<TokenId>& prompt, int others,
                              std::mt19937& rng) {
  const int64_t vocab = engine.config().vocab_size;
  std::uniform_int_distribution<int64_t> token(0, vocab - 1), length(1, 12);
  std::vector<SequenceRequest> requests;
  for (int i = 0; i < others; ++i) {
    std::vector<TokenId> p(static_cast<size_t>(length(rng)));
    for (TokenId& t : p) t = static_cast<TokenId>(token(rng));
    SequenceRequest r =
        testing::GreedyRequest(p, std::uniform_int_distribution<int64_t>(0, 6)(rng));
    if (i % 3 == 1) {
      r.sampling.temperature = 1.0;
      r.sampling.seed = static_cast<uint64_t>(i);
    }
    requests.push_back(r);
  }
  const size_t at = std::uniform_int_distribution<size_t>(0, requests.size())(rng);
  const std::vector<SequenceRequest> targets = Targets(prompt);
  requests.insert(requests.begin() + static_cast<std::ptrdiff_t>(at), targets.begin(),
                  targets.end());
  std::vector<SequenceId> ids;
  for (const SequenceRequest& r : requests) {
    StatusOr<SequenceId> id = engine.Add(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(id.ok() ? *id : 0);
  }
  std::vector<SequenceResult> results = testing::Drain(engine);
  std::vector<Outcome> out;
  for (size_t k = at; k < at + targets.size(); ++k) {
    for (const SequenceResult& r : results) {
      if (r.id == ids[k]) out.push_back(OutcomeOf(r));
    }
  }
  EXPECT_EQ(out.size(), targets.size());
  return out;
}

class BatchInvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvarianceTest, APromptsResultDoesNotDependOnWhatRidesBesideIt) {
  const std::string fixture = GetParam();
  const testing::Golden golden = testing::LoadGolden(fixture);
  const std::vector<TokenId>& prompt = golden.prompts.back();
  std::mt19937 rng(42);

  EngineOptions alone_options;
  alone_options.threads = 1;
  alone_options.compute_dtype = ComputeDType::kAuto;
  std::unique_ptr<Engine> alone_engine = testing::OpenEngine(FixtureDir(fixture), alone_options);
  ASSERT_NE(alone_engine, nullptr);
  ASSERT_TRUE(IsInvariantPlan(alone_engine->compute().plan)) << alone_engine->compute().Describe();
  const std::vector<Outcome> alone = RunAmong(*alone_engine, prompt, 0, rng);
  ASSERT_EQ(alone.size(), 3u);
  ASSERT_EQ(alone[0].generated.size(), static_cast<size_t>(kNewTokens));
  ASSERT_EQ(alone[2].label_logprobs.size(), 4u);

  for (int threads : {1, 2}) {
    for (bool small_micro_batches : {false, true}) {
      EngineOptions options = alone_options;
      options.threads = threads;
      if (small_micro_batches) {
        options.activation_budget_bytes = 5 * ActivationBytesPerRow(alone_engine->config());
      }
      std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), options);
      ASSERT_NE(engine, nullptr);
      EXPECT_EQ(engine->micro_batch_rows(), small_micro_batches ? 5 : kMaxMicroBatchRows);
      for (int others : {2, 7, 33, 64}) {
        SCOPED_TRACE(std::to_string(others) + " others, " + std::to_string(threads) +
                     " threads, micro-batches of " + std::to_string(engine->micro_batch_rows()));
        const std::vector<Outcome> among = RunAmong(*engine, prompt, others, rng);
        ASSERT_EQ(among.size(), alone.size());
        for (size_t k = 0; k < among.size(); ++k) {
          const char* what = k == 0 ? "greedy" : k == 1 ? "sampled" : "classified";
          EXPECT_EQ(among[k].generated, alone[k].generated) << what;
          EXPECT_EQ(among[k].label_logprobs, alone[k].label_logprobs) << what;
          ASSERT_EQ(among[k].last_logits.size(), alone[k].last_logits.size());
          size_t differing = 0;
          for (size_t v = 0; v < among[k].last_logits.size(); ++v) {
            differing += among[k].last_logits[v] != alone[k].last_logits[v];
          }
          EXPECT_EQ(differing, 0u)
              << "logits differing bitwise, largest gap "
              << testing::MaxAbsDiff(among[k].last_logits, alone[k].last_logits);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvarianceTest, ::testing::ValuesIn(FixtureNames()),
                         testing::FixtureTestName);

}  // namespace
}  // namespace nightshift::engine
