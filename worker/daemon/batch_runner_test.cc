#include "worker/daemon/batch_runner.h"

#include <gtest/gtest.h>

#include "worker/daemon/fake_engine.h"
#include "worker/daemon/test_util.h"

namespace nightshift::worker {
namespace {

using testing::FakeEngine;

const tokenizer::Tokenizer& TinyTokenizer() {
  static const tokenizer::Tokenizer* tok = [] {
    auto t = tokenizer::Tokenizer::FromModelDir(testutil::DataPath("scheduler/tiny-model"));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return new tokenizer::Tokenizer(std::move(*t));
  }();
  return *tok;
}

JobAssignment Generation(int64_t id, int32_t max_new_tokens) {
  JobAssignment job;
  job.job_id = id;
  job.custom_id = "job-" + std::to_string(id);
  job.prompt = {104, 105};  // "hi"
  job.max_new_tokens = max_new_tokens;
  job.sampling.temperature = 0;
  return job;
}

// Runs passes until the batch is empty; returns every outcome by job id.
std::map<int64_t, JobOutcome> RunToEnd(BatchRunner& runner, int max_passes = 100) {
  std::map<int64_t, JobOutcome> outcomes;
  for (int i = 0; i < max_passes && !runner.empty(); ++i) {
    auto pass = runner.RunPass();
    EXPECT_TRUE(pass.ok()) << pass.status().ToString();
    if (!pass.ok()) break;
    for (JobOutcome& o : pass->finished) outcomes[o.job_id] = std::move(o);
  }
  return outcomes;
}

TEST(BatchRunnerTest, GenerationRunsToLengthWithDecodedText) {
  FakeEngine engine;
  BatchRunner runner(7, &engine, &TinyTokenizer(), engine.kv_budget);
  ASSERT_TRUE(runner.Add({Generation(1, 3), Generation(2, 5)}).failed.empty());

  auto first = runner.RunPass();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->prompt_tokens, 4);
  EXPECT_EQ(first->generated_tokens, 2);
  EXPECT_EQ(first->generated, (std::map<int64_t, int64_t>{{1, 1}, {2, 1}}));
  EXPECT_TRUE(first->finished.empty());
  EXPECT_EQ(runner.free_kv_bytes(), engine.kv_budget - (2 + 3 + 2 + 5) * engine.kv_per_token);

  auto outcomes = RunToEnd(runner);
  EXPECT_EQ(runner.passes(), 5);
  ASSERT_EQ(outcomes.size(), 2u);
  const JobOutcome& one = outcomes[1];
  ASSERT_TRUE(one.ok);
  EXPECT_EQ(one.batch_id, 7);
  EXPECT_EQ(one.output.text, "abc");
  EXPECT_EQ(one.output.token_ids, (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(one.output.finish_reason, "length");
  EXPECT_EQ(one.output.prompt_tokens, 2);
  EXPECT_EQ(one.output.completion_tokens, 3);
  EXPECT_EQ(outcomes[2].output.text, "abcde");
  EXPECT_TRUE(runner.empty());
}

TEST(BatchRunnerTest, EosEndsWithStopAndIsNotText) {
  FakeEngine engine;
  engine.next_token = [](const engine::SequenceRequest&, int64_t step) {
    return step < 2 ? static_cast<engine::TokenId>('x' + step) : FakeEngine::kEos;
  };
  BatchRunner runner(1, &engine, &TinyTokenizer(), engine.kv_budget);
  runner.Add({Generation(1, 10)});
  auto outcomes = RunToEnd(runner);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[1].output.text, "xy");
  EXPECT_EQ(outcomes[1].output.finish_reason, "stop");
  EXPECT_EQ(outcomes[1].output.token_ids, (std::vector<int32_t>{'x', 'y', FakeEngine::kEos}));
}

TEST(BatchRunnerTest, StopStringSpanningTokensEndsTheSequenceEarly) {
  FakeEngine engine;
  const std::string script = "hello world and more";
  engine.next_token = [&](const engine::SequenceRequest&, int64_t step) {
    return static_cast<engine::TokenId>(script[step % script.size()]);
  };
  BatchRunner runner(1, &engine, &TinyTokenizer(), engine.kv_budget);
  JobAssignment job = Generation(1, 16);
  job.stop = {"zzz", "lo w"};
  JobAssignment plain = Generation(2, 3);
  runner.Add({job, plain});
  auto outcomes = RunToEnd(runner);
  ASSERT_EQ(outcomes.size(), 2u);
  const api::JobOutput& out = outcomes[1].output;
  EXPECT_EQ(out.text, "hel");
  EXPECT_EQ(out.finish_reason, "stop");
  EXPECT_EQ(out.completion_tokens, 7);  // through the 'w' that completed "lo w"
  EXPECT_EQ(engine.finished_by_caller.size(), 1u);
  EXPECT_EQ(runner.passes(), 7);
  EXPECT_EQ(outcomes[2].output.text, "hel");
  EXPECT_EQ(outcomes[2].output.finish_reason, "length");
}

TEST(BatchRunnerTest, ClassificationScoresLabelsInOnePass) {
  FakeEngine engine;
  BatchRunner runner(3, &engine, &TinyTokenizer(), engine.kv_budget);
  JobAssignment job = Generation(9, 0);
  job.labels = {" yes", " no"};
  job.label_ids = {{259}, {32, 110, 111}};
  runner.Add({job});
  auto pass = runner.RunPass();
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->prompt_tokens, 2 + 1 + 3);
  ASSERT_EQ(pass->finished.size(), 1u);
  const api::JobOutput& out = pass->finished[0].output;
  EXPECT_EQ(out.finish_reason, "label");
  EXPECT_EQ(out.text, " yes");
  ASSERT_EQ(out.labels.size(), 2u);
  EXPECT_EQ(out.labels[0].label, " yes");
  EXPECT_DOUBLE_EQ(out.labels[0].logprob, -0.5);
  EXPECT_EQ(out.labels[1].label, " no");
  EXPECT_DOUBLE_EQ(out.labels[1].logprob, -1.0);
  EXPECT_EQ(out.completion_tokens, 0);
  EXPECT_TRUE(runner.empty());
}

TEST(BatchRunnerTest, SharedPromptTokensBecomeTheOutputsCachedPromptTokens) {
  FakeEngine engine;
  // The engine's count of prompt tokens not computed for the sequence alone.
  engine.shared_prompt_tokens = [](const engine::SequenceRequest& r) {
    return r.labels.empty() ? int64_t{1} : static_cast<int64_t>(r.prompt.size());
  };
  BatchRunner runner(5, &engine, &TinyTokenizer(), engine.kv_budget);
  JobAssignment classify = Generation(2, 0);
  classify.prompt = {104, 105, 33};  // "hi!"
  classify.labels = {" yes", " no"};
  classify.label_ids = {{259}, {32, 110, 111}};
  ASSERT_TRUE(runner.Add({Generation(1, 2), classify}).failed.empty());
  auto outcomes = RunToEnd(runner);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[1].output.prompt_tokens, 2);
  EXPECT_EQ(outcomes[1].output.cached_prompt_tokens, 1);
  EXPECT_EQ(outcomes[2].output.finish_reason, "label");
  EXPECT_EQ(outcomes[2].output.prompt_tokens, 3);
  EXPECT_EQ(outcomes[2].output.cached_prompt_tokens, 3);
}

TEST(BatchRunnerTest, NothingSharedIsNoneCached) {
  FakeEngine engine;
  BatchRunner runner(5, &engine, &TinyTokenizer(), engine.kv_budget);
  ASSERT_TRUE(runner.Add({Generation(1, 1)}).failed.empty());
  auto outcomes = RunToEnd(runner);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[1].output.cached_prompt_tokens, 0);
}

TEST(BatchRunnerTest, LogprobsCarryTokenTexts) {
  FakeEngine engine;
  BatchRunner runner(1, &engine, &TinyTokenizer(), engine.kv_budget);
  JobAssignment job = Generation(1, 2);
  job.logprobs = true;
  job.top_logprobs = 2;
  runner.Add({job});
  auto outcomes = RunToEnd(runner);
  const auto& logprobs = outcomes[1].output.logprobs;
  ASSERT_EQ(logprobs.size(), 2u);
  EXPECT_EQ(logprobs[0].token, 'a');
  EXPECT_EQ(logprobs[0].text, "a");
  EXPECT_DOUBLE_EQ(logprobs[0].logprob, -0.25);
  ASSERT_EQ(logprobs[1].top.size(), 2u);
  EXPECT_EQ(logprobs[1].top[1].token, 'c');
  EXPECT_EQ(logprobs[1].top[1].text, "c");
}

TEST(BatchRunnerTest, WithoutATokenizerTokensComeBackWithoutText) {
  FakeEngine engine;
  BatchRunner runner(1, &engine, nullptr, engine.kv_budget);
  JobAssignment job = Generation(1, 2);
  job.stop = {"a"};  // cannot match without text
  runner.Add({job});
  auto outcomes = RunToEnd(runner);
  EXPECT_EQ(outcomes[1].output.text, "");
  EXPECT_EQ(outcomes[1].output.token_ids.size(), 2u);
  EXPECT_EQ(outcomes[1].output.finish_reason, "length");
}

TEST(BatchRunnerTest, AddFailsInvalidJobsAloneAndHandsBackWhatDoesNotFit) {
  FakeEngine engine;
  engine.kv_budget = 10 * engine.kv_per_token;
  BatchRunner runner(4, &engine, &TinyTokenizer(), engine.kv_budget);
  JobAssignment empty = Generation(1, 2);
  empty.prompt.clear();
  auto added = runner.Add({Generation(2, 4), empty, Generation(3, 4), Generation(2, 4)});
  ASSERT_EQ(added.failed.size(), 1u);
  EXPECT_EQ(added.failed[0].job_id, 1);
  EXPECT_FALSE(added.failed[0].ok);
  EXPECT_NE(added.failed[0].error.find("empty prompt"), std::string::npos);
  EXPECT_EQ(added.handed_back, std::vector<int64_t>{3});
  EXPECT_EQ(runner.size(), 1u);  // job 2 once
  EXPECT_EQ(runner.free_kv_bytes(), 4 * engine.kv_per_token);
}

TEST(BatchRunnerTest, ThePassTokenBudgetHandsBackWhatTheNextPassCannotFeed) {
  FakeEngine engine;
  engine.pass_token_budget = 5;  // two-token prompts: two per pass, then one per decoding job
  BatchRunner runner(6, &engine, &TinyTokenizer(), engine.kv_budget, engine.pass_token_budget);
  EXPECT_EQ(runner.free_pass_tokens(), 5);
  auto added = runner.Add({Generation(1, 3), Generation(2, 3), Generation(3, 3)});
  EXPECT_EQ(added.handed_back, std::vector<int64_t>{3});
  EXPECT_EQ(runner.free_pass_tokens(), 1);
  ASSERT_TRUE(runner.RunPass().ok());
  EXPECT_EQ(runner.free_pass_tokens(), 3);  // each decoding job feeds one token
  EXPECT_TRUE(runner.Add({Generation(3, 3)}).handed_back.empty());
  EXPECT_EQ(runner.free_pass_tokens(), 1);
  EXPECT_EQ(RunToEnd(runner).size(), 3u);

  BatchRunner unlimited(7, &engine, &TinyTokenizer(), engine.kv_budget);
  EXPECT_EQ(unlimited.free_pass_tokens(), 0);  // no budget: nothing to report
}

TEST(BatchRunnerTest, CancelTakeUnfinishedAndFailAll) {
  FakeEngine engine;
  BatchRunner runner(5, &engine, &TinyTokenizer(), engine.kv_budget);
  runner.Add({Generation(1, 9), Generation(2, 9), Generation(3, 9)});
  ASSERT_TRUE(runner.RunPass().ok());
  runner.Cancel({2, 42});
  EXPECT_EQ(runner.size(), 2u);
  EXPECT_EQ(engine.active(), 2);
  auto failed = runner.FailAll("disk on fire");
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].job_id, 1);
  EXPECT_EQ(failed[1].error, "disk on fire");
  EXPECT_EQ(engine.active(), 0);
  EXPECT_EQ(runner.RunPass().status().code(), StatusCode::kFailedPrecondition);

  runner.Add({Generation(4, 9)});
  EXPECT_EQ(runner.TakeUnfinished(), std::vector<int64_t>{4});
  EXPECT_TRUE(runner.empty());
}

TEST(BatchRunnerTest, EngineErrorsAreReturned) {
  FakeEngine engine;
  engine.step_error = DataLoss("model.safetensors: short read");
  BatchRunner runner(1, &engine, &TinyTokenizer(), engine.kv_budget);
  runner.Add({Generation(1, 2)});
  EXPECT_EQ(runner.RunPass().status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace nightshift::worker
