#include "scheduler/eta.h"

#include <gtest/gtest.h>

#include <cctype>

namespace nightshift::scheduler {
namespace {

using Times = std::vector<std::optional<double>>;

TEST(EtaTest, SmoothingStartsAtTheFirstSampleThenMovesPartWay) {
  EXPECT_DOUBLE_EQ(SmoothSecondsPerPass(0, 4.0), 4.0);
  EXPECT_DOUBLE_EQ(SmoothSecondsPerPass(4.0, 2.0), 4.0 + 0.3 * (2.0 - 4.0));
}

TEST(PassTimesTest, ThePriorUntilAPassIsMeasuredThenTheMeasuredPasses) {
  PassTimes t;
  EXPECT_EQ(t.Cost(2.0).base_seconds, 2.0);
  EXPECT_FALSE(PassTimes().Cost(0).known());
  t.Add(1.0, 4);
  EXPECT_DOUBLE_EQ(t.Cost(2.0).base_seconds, 1.0);  // faster than the prior: the pass
  EXPECT_DOUBLE_EQ(t.Cost(0).base_seconds, 1.0);    // no prior: the pass alone
  // Slower than the prior: the prior is the base, the excess its 4 tokens'.
  EXPECT_DOUBLE_EQ(t.Cost(0.6).base_seconds, 0.6);
  EXPECT_DOUBLE_EQ(t.Cost(0.6).seconds_per_token, 0.1);
  t.Add(1.0, 4);
  EXPECT_DOUBLE_EQ(t.Cost(2.0).base_seconds, 1.0);
  EXPECT_DOUBLE_EQ(t.Cost(2.0).seconds_per_token, 0);
  PassTimes two;  // two passes of different tokens: the line through them
  two.Add(2.0, 100);
  two.Add(1.1, 10);
  EXPECT_NEAR(two.Cost(5.0).seconds_per_token, 0.01, 1e-12);
  EXPECT_NEAR(two.Cost(5.0).base_seconds, 1.0, 1e-12);
  EXPECT_EQ(t.count(), 2);
  t.Add(-1, 4);  // not a time
  EXPECT_EQ(t.count(), 2);
}

TEST(PassTimesTest, OneSlowPassMovesNothing) {
  PassTimes t;
  for (double s : {1.0, 1.02, 0.98, 6.0, 1.0}) t.Add(s, 8);
  const PassCost c = t.Cost(3.0);
  EXPECT_DOUBLE_EQ(c.seconds_per_token, 0);  // every pass fed 8 tokens: no slope to see
  EXPECT_DOUBLE_EQ(c.base_seconds, 1.0);
  EXPECT_DOUBLE_EQ(t.MedianSeconds(), 1.0);
}

TEST(PassTimesTest, PrefillHeavyPassesArePricedApartWhereTheyCostMore) {
  PassTimes t;
  // 1 s a pass plus 10 ms a token fed: prefills of 100 tokens, decodes of 4, one slow decode.
  for (int64_t tokens : {100, 4, 4, 100, 4, 4}) t.Add(1.0 + 0.01 * tokens, tokens);
  t.Add(3.0, 4);
  const PassCost c = t.Cost(0.5);
  EXPECT_NEAR(c.seconds_per_token, 0.01, 1e-9);
  EXPECT_NEAR(c.base_seconds, 1.0, 1e-9);
  EXPECT_NEAR(c.Seconds(100), 2.0, 1e-9);
  EXPECT_NEAR(c.Seconds(4), 1.04, 1e-9);
  // A streamed pass bound by the read: prefill costs nothing extra, one price.
  PassTimes io;
  for (int64_t tokens : {100, 4, 4, 100, 4}) io.Add(2.0, tokens);
  EXPECT_DOUBLE_EQ(io.Cost(1.0).seconds_per_token, 0);
  EXPECT_DOUBLE_EQ(io.Cost(1.0).base_seconds, 2.0);
}

TEST(PassTimesTest, KeepsOnlyTheRecentWindow) {
  PassTimes t;
  for (size_t i = 0; i < PassTimes::kWindow; ++i) t.Add(5.0, 1);
  for (size_t i = 0; i < PassTimes::kWindow; ++i) t.Add(1.0, 1);
  EXPECT_DOUBLE_EQ(t.Cost(0).base_seconds, 1.0);
}

TEST(EtaTest, ExpectedPassesShortenWithTheStopHazard) {
  EXPECT_EQ(ExpectedPasses(16, 0), 16);
  EXPECT_EQ(ExpectedPasses(1, 0.5), 1);
  EXPECT_EQ(ExpectedPasses(0, 0.5), 0);
  EXPECT_EQ(ExpectedPasses(16, 1), 1);
  // Sum of 0.9^k for k < 16 = (1 - 0.9^16) / 0.1 = 8.15.
  EXPECT_EQ(ExpectedPasses(16, 0.1), 8);
  EXPECT_EQ(ExpectedPasses(3, 0.01), 3);
}

// ---------------------------------------------------------------- Forecast

constexpr int64_t kKvBytesPerToken = 10;

// A worker of `model` "m": one pass costs `base` s (+ per_token a token fed).
EtaWorker W(const std::string& id, double base, int64_t kv_budget_tokens, int32_t max_jobs = 0,
            int64_t pass_token_budget = 0, double per_token = 0) {
  EtaWorker w;
  w.info.id = id;
  w.info.connected = true;
  w.info.kv_budget_bytes = kv_budget_tokens * kKvBytesPerToken;
  w.info.max_batch_jobs = max_jobs;
  ModelOffer offer;
  offer.name = "m";
  offer.kv_bytes_per_token = kKvBytesPerToken;
  offer.pass_token_budget = pass_token_budget;
  w.info.models.push_back(offer);
  w.cost = {base, per_token};
  return w;
}

// A queued generation job: a prompt of `prompt` tokens, `passes` new tokens
// (1 with labels: a classification of prompt + labels tokens).
QueuedJob Q(int64_t id, int64_t prompt, int64_t passes, int64_t submission = 1) {
  QueuedJob q;
  q.id = id;
  q.submission_id = submission;
  q.model = "m";
  q.passes = passes;
  q.kv_tokens = passes > 1 ? prompt + passes - 1 : prompt;
  return q;
}

struct ForecastCase {
  const char* name;
  std::vector<EtaWorker> workers;
  std::vector<QueuedJob> queue;
  bool late = true;
  std::map<int64_t, std::optional<double>> expected;  // job id -> seconds
};

EtaWorker Busy(EtaWorker w, double pass_left, std::vector<EtaJob> batch) {
  w.pass_left = pass_left;
  w.batch = std::move(batch);
  return w;
}

EtaWorker Later(EtaWorker w, double start_at) {
  w.start_at = start_at;
  return w;
}

EtaWorker Unknown(EtaWorker w) {
  w.cost = {};
  return w;
}

const ForecastCase kForecastCases[] = {
    {"a KV-bound worker runs two at a time, the third when they end",
     {W("w", 1.0, 20)},
     {Q(1, 6, 5), Q(2, 6, 5), Q(3, 6, 5)},  // 10 positions each
     true,
     {{1, 5.0}, {2, 5.0}, {3, 10.0}}},
    {"a job joins at the boundary after the one where room freed (the top-up lag)",
     {W("w", 1.0, 1000, 2)},
     {Q(1, 4, 2), Q(2, 4, 5), Q(3, 4, 3)},
     true,
     {{1, 2.0}, {2, 5.0}, {3, 6.0}}},
    {"without the lag it rides the very next pass",
     {W("w", 1.0, 1000, 2)},
     {Q(1, 4, 2), Q(2, 4, 5), Q(3, 4, 3)},
     false,
     {{1, 2.0}, {2, 5.0}, {3, 5.0}}},
    {"classifications take one pass, as many as the pass's tokens allow",
     {W("w", 2.0, 1000, 0, 10)},
     {Q(1, 6, 1), Q(2, 6, 1), Q(3, 3, 1)},  // 6 + 6 > 10: the second waits
     true,
     {{1, 2.0}, {3, 2.0}, {2, 4.0}}},
    {"a pass costs more for the tokens it feeds",
     {W("w", 1.0, 1000, 0, 0, 0.1)},
     {Q(1, 10, 3)},  // 1 + 10 x 0.1, then 1.1 twice
     true,
     {{1, 2.0 + 1.1 + 1.1}}},
    {"two workers share the queue, each at its pace",
     {W("fast", 1.0, 1000, 1), W("slow", 2.0, 1000, 1)},
     {Q(1, 4, 4), Q(2, 4, 4), Q(3, 4, 4)},
     true,
     {{1, 4.0}, {2, 8.0}, {3, 8.0}}},
    {"a worker that starts later takes its share from then",
     {W("now", 1.0, 1000, 1), Later(W("later", 1.0, 1000, 1), 3.0)},
     {Q(1, 4, 4), Q(2, 4, 4), Q(3, 4, 4)},
     true,
     {{1, 4.0}, {2, 7.0}, {3, 8.0}}},
    {"a running batch finishes its pass in flight, then the rest",
     {Busy(W("w", 1.0, 20), 0.5, {{7, 2, 10, 4, 3, true, true}})},
     {Q(1, 10, 2)},  // 11 positions: more than job 7 leaves, until it ends
     true,
     {{7, 2.5}, {1, 4.5}}},
    {"a top-up leased before the pass in flight joins after it",
     {Busy(W("w", 1.0, 1000), 0.5, {{7, 2, 10, 4, 3, true, true}, {8, 2, 10, 4, 2, false, false}})},
     {},
     true,
     {{7, 2.5}, {8, 2.5}}},
    {"a worker of unknown speed takes nothing: unknown",
     {Unknown(W("w", 1.0, 100))},
     {Q(1, 4, 3)},
     true,
     {{1, std::nullopt}}},
    {"a job no worker can ever hold fails at once; the rest go on",
     {W("w", 1.0, 20)},
     {Q(1, 6, 5), Q(2, 40, 5), Q(3, 6, 5)},
     true,
     {{1, 5.0}, {2, 0.0}, {3, 5.0}}},
    {"a job only the other worker holds is not rejected",
     {W("small", 1.0, 20), W("big", 3.0, 100)},
     {Q(1, 40, 2)},
     true,
     {{1, 6.0}}},
};

class ForecastTest : public ::testing::TestWithParam<ForecastCase> {};

TEST_P(ForecastTest, PlaysTheModelsWorkOut) {
  const ForecastCase& c = GetParam();
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.workers = c.workers;
  snapshot.queue = c.queue;
  snapshot.top_ups_join_late = c.late;
  const EtaForecast forecast = Forecast(snapshot);
  ASSERT_EQ(forecast.jobs.size(), c.expected.size());
  for (const auto& [job, expected] : c.expected) {
    SCOPED_TRACE("job " + std::to_string(job));
    ASSERT_EQ(forecast.jobs.count(job), 1u);
    const std::optional<double>& got = forecast.jobs.at(job);
    ASSERT_EQ(got.has_value(), expected.has_value());
    if (got) {
      EXPECT_NEAR(*got, *expected, 1e-9);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, ForecastTest, ::testing::ValuesIn(kForecastCases),
                         [](const ::testing::TestParamInfo<ForecastCase>& info) {
                           std::string name;
                           for (const char* p = info.param.name; *p != 0; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(ForecastTest, ASubmissionFinishesWithItsLastJobAndIsUnknownWithAnUnknownOne) {
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.workers = {W("w", 1.0, 1000, 1)};
  snapshot.queue = {Q(1, 4, 3, 10), Q(2, 4, 2, 11), Q(3, 4, 4, 10)};
  const EtaForecast f = Forecast(snapshot);
  // Dispatch order: the older submission's jobs first.
  EXPECT_EQ(f.submissions.at(10), 3.0 + 4.0);
  EXPECT_EQ(f.submissions.at(11), 3.0 + 4.0 + 2.0);
  snapshot.workers = {Unknown(W("w", 1.0, 1000, 1))};
  EXPECT_FALSE(Forecast(snapshot).submissions.at(10).has_value());
}

TEST(ForecastTest, APassIsPricedWithItsSharedPrefixOnce) {
  // Classifications of 40-token prompts sharing their first 32, 2 label
  // tokens each: the pass feeds 42 + 10 + 10 tokens, not 3 x 42.
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.workers = {W("w", 1.0, 1000, 0, 0, 0.01)};
  for (int64_t id = 1; id <= 3; ++id) {
    QueuedJob q = Q(id, 42, 1);
    for (int32_t t = 0; t < 40; ++t) q.prompt_ids.push_back(t < 32 ? t : 100 * id + t);
    snapshot.queue.push_back(q);
  }
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(3), 1.0 + 0.01 * 62, 1e-9);
  snapshot.min_shared_prefix_tokens = 33;  // too short to count
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(3), 1.0 + 0.01 * 126, 1e-9);
  // A pass-token budget holds the three only when the prefix counts once.
  snapshot.workers = {W("w", 1.0, 1000, 0, 70, 0.01)};
  snapshot.min_shared_prefix_tokens = 32;
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(3), 1.0 + 0.01 * 62, 1e-9);
}

// A top-up that agrees with a prefix the worker keeps feeds only the rest of
// its prompt, as Schedule charges it (KeptAgreement): the forecast keeps
// prefixes as the engine does, and starts from those a running batch's
// worker reported.
TEST(ForecastTest, ATopUpThatAgreesWithAKeptPrefixIsPricedWithoutIt) {
  // An instruction of 40 tokens; a generation of 10 tokens keeps the batch
  // running while classifications (43-token prompts, 2 label tokens) ride
  // one at a time beside it (two jobs a batch).
  std::vector<int32_t> instruction;
  for (int32_t t = 0; t < 40; ++t) instruction.push_back(t);
  auto job = [&](int64_t id, int64_t own, int64_t passes, int64_t labels) {
    QueuedJob q = Q(id, 40 + own + (passes > 1 ? 0 : labels), passes);
    q.prompt_ids = instruction;
    for (int64_t t = 0; t < own; ++t) q.prompt_ids.push_back(static_cast<int32_t>(100 * id + t));
    return q;
  };
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.top_ups_join_late = false;
  snapshot.workers = {W("w", 1.0, 1000, 2, 0, 0.01)};
  snapshot.queue = {job(1, 2, 10, 0), job(2, 3, 1, 2), job(3, 3, 1, 2), job(4, 3, 1, 2)};
  // Pass 1: 42 + 5 tokens (job 2 shares the instruction with job 1); the
  // engine keeps the 40 they share, so jobs 3 and 4 each feed 5 beside job
  // 1's one decoded token.
  EtaForecast forecast = Forecast(snapshot);
  EXPECT_NEAR(*forecast.jobs.at(2), 1.47, 1e-9);
  EXPECT_NEAR(*forecast.jobs.at(3), 1.47 + 1.06, 1e-9);
  EXPECT_NEAR(*forecast.jobs.at(4), 1.47 + 2 * 1.06, 1e-9);
  // A running batch whose worker reported the instruction kept: a joining
  // classification is priced 5 tokens, not 45.
  EtaJob running = {1, 1, 51, 42, 9, true, true};
  snapshot.queue = {job(5, 3, 1, 2)};
  snapshot.workers = {Busy(W("w", 1.0, 1000, 2, 0, 0.01), 0.5, {running})};
  snapshot.workers[0].kept_prefixes = {instruction};
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(5), 0.5 + 1.06, 1e-9);
  snapshot.workers[0].kept_prefixes.clear();
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(5), 0.5 + 1.46, 1e-9);
  // The batch is full until job 7 ends, three passes after the one in
  // flight: the reported prefix is still kept then, since job 1 (whose
  // prompt the forecast does not have) decodes in it.
  EtaJob ending = {7, 1, 51, 42, 4, true, true};
  snapshot.workers = {Busy(W("w", 1.0, 1000, 2, 0, 0.01), 0.5, {running, ending})};
  snapshot.workers[0].kept_prefixes = {instruction};
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(5), 0.5 + 3 * 1.02 + 1.06, 1e-9);
}

// A job whose prompt is `prefix` and 3 tokens of its own; a classification
// (one pass) also feeds 2 label tokens.
QueuedJob PrefixedJob(int64_t id, const std::vector<int32_t>& prefix, int64_t passes) {
  QueuedJob q = Q(id, static_cast<int64_t>(prefix.size()) + 3 + (passes > 1 ? 0 : 2), passes);
  q.prompt_ids = prefix;
  for (int32_t t = 0; t < 3; ++t) q.prompt_ids.push_back(static_cast<int32_t>(100 * id + t));
  return q;
}

// The engine keeps a prefix while jobs that decode hold it: a top-up that
// joins long after the pass that kept it is still priced without it.
TEST(ForecastTest, APrefixStaysKeptWhileADecodingJobHoldsIt) {
  std::vector<int32_t> instruction;
  for (int32_t t = 0; t < 40; ++t) instruction.push_back(t);
  // Jobs 1 and 2 generate (10 and 5 passes) and open the batch: pass 1
  // computes 40 + 3 + 3 tokens, 4 passes of 2 follow; job 3 classifies after
  // the instruction when job 2 ends (two jobs a batch).
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.top_ups_join_late = false;
  snapshot.workers = {W("w", 1.0, 1000, 2, 0, 0.01)};
  snapshot.queue = {PrefixedJob(1, instruction, 10), PrefixedJob(2, instruction, 5),
                    PrefixedJob(3, instruction, 1)};
  // Job 1 holds the instruction, kept since pass 1: job 3 feeds 5 tokens
  // beside job 1's one (computing the instruction again, 45, would add 0.4 s).
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(3), 1.46 + 4 * 1.02 + 1.06, 1e-9);
}

// Two instructions behind a 10-token header ride one batch: as the engine
// does, the forecast keeps each instruction the jobs that agree on their
// first 32 tokens share, so top-ups of either feed only their own tokens.
TEST(ForecastTest, EachInstructionOfABatchIsKept) {
  std::vector<int32_t> a, b;
  for (int32_t t = 0; t < 40; ++t) {
    a.push_back(t < 10 ? t : 1000 + t);
    b.push_back(t < 10 ? t : 2000 + t);
  }
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.top_ups_join_late = false;
  snapshot.workers = {W("w", 1.0, 1000, 4, 0, 0.01)};
  snapshot.schedule_window = 4;  // the batch opens with jobs 1-4
  snapshot.queue = {PrefixedJob(1, a, 10), PrefixedJob(2, a, 1), PrefixedJob(3, b, 10),
                    PrefixedJob(4, b, 1),  PrefixedJob(5, a, 1), PrefixedJob(6, b, 1)};
  // Pass 1: 43 + 5 + 43 + 5 tokens (as Schedule counts them: the header is
  // shorter than the 32 it counts once). Pass 2: jobs 1 and 3 decode, 5 and
  // 6 feed 5 each after their kept instruction (keeping only what all four
  // share, the header, they would feed 45 each).
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(5), 1.96 + 1.12, 1e-9);
  EXPECT_NEAR(*Forecast(snapshot).jobs.at(6), 1.96 + 1.12, 1e-9);
}

TEST(ForecastTest, EarlyStopsShortenTheJobsOfTheirSubmission) {
  EtaSnapshot snapshot;
  snapshot.model = "m";
  snapshot.workers = {W("w", 1.0, 1000, 1)};
  snapshot.queue = {Q(1, 4, 16, 10), Q(2, 4, 16, 11)};
  snapshot.stop_hazards[10] = 0.1;  // ExpectedPasses(16, 0.1) = 8
  const EtaForecast f = Forecast(snapshot);
  EXPECT_EQ(f.jobs.at(1), 8.0);
  EXPECT_EQ(f.jobs.at(2), 8.0 + 16.0);
}

}  // namespace
}  // namespace nightshift::scheduler
