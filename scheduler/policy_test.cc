#include "scheduler/policy.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace nightshift::scheduler {
namespace {

// A compact worker description for the tables: id, KV budget in bytes and
// "model:bytes_per_token" offers.
struct W {
  std::string id;
  int64_t budget;
  std::map<std::string, int64_t> models;  // model -> KV bytes per token
  std::string open_model = "";
  bool connected = true;
  int64_t batch_id = 0;
  std::string batch_model = "";
  bool wants_top_up = false;
  int64_t free_kv = 0;
  int32_t max_jobs = 0;
  int32_t batch_jobs = 0;
  int64_t pass_budget = 0;  // tokens per pass of every model; 0 = no limit
  int64_t free_pass = 0;    // of it, left at the running batch's last boundary
};

// A queued job: id, submission, model, priority, KV positions, passes (by
// default 2: a generation of two tokens, holding its positions across
// passes and feeding kv_tokens - 1 of them in its first pass).
struct J {
  int64_t id;
  int64_t submission;
  std::string model;
  int32_t priority;
  int64_t kv_tokens;
  int64_t passes = 2;
};

// An expected assignment: worker, batch (0 = new), job ids in order.
struct A {
  std::string worker;
  int64_t batch_id;
  std::vector<int64_t> jobs;
};

struct Case {
  const char* name;
  std::vector<W> workers;
  std::vector<J> queue;
  std::vector<A> assignments;
  std::map<int64_t, std::string> rejected;  // job id -> substring of the reason
};

Snapshot Build(const Case& c) {
  Snapshot snapshot;
  for (const W& w : c.workers) {
    WorkerSlot slot;
    slot.info.id = w.id;
    slot.info.kv_budget_bytes = w.budget;
    slot.info.connected = w.connected;
    slot.info.open_model = w.open_model;
    slot.info.max_batch_jobs = w.max_jobs;
    for (const auto& [model, per_token] : w.models) {
      ModelOffer offer;
      offer.name = model;
      offer.kv_bytes_per_token = per_token;
      offer.pass_token_budget = w.pass_budget;
      slot.info.models.push_back(offer);
    }
    slot.batch_id = w.batch_id;
    slot.batch_model = w.batch_model;
    slot.batch_jobs = w.batch_jobs;
    slot.wants_top_up = w.wants_top_up;
    slot.free_kv_bytes = w.free_kv;
    slot.free_pass_tokens = w.free_pass;
    snapshot.workers.push_back(slot);
  }
  for (const J& j : c.queue) {
    snapshot.queue.push_back({j.id, j.submission, j.model, j.priority, j.kv_tokens, j.passes, {}});
  }
  return snapshot;
}

const Case kCases[] = {
    {"nothing queued", {{"w1", 100, {{"m", 1}}}}, {}, {}, {}},
    {"fills an idle worker up to its KV budget, skipping what no longer fits",
     {{"w1", 100, {{"m", 1}}}},
     {{1, 1, "m", 0, 60}, {2, 1, "m", 0, 60}, {3, 1, "m", 0, 30}, {4, 1, "m", 0, 20}},
     {{"w1", 0, {1, 3}}},
     {}},
    {"higher priority first, then the oldest submission",
     {{"w1", 30, {{"m", 1}}}},
     {{5, 3, "m", 0, 10}, {4, 2, "m", 0, 10}, {3, 2, "m", 1, 10}, {9, 1, "m", 0, 10}},
     {{"w1", 0, {3, 9, 4}}},
     {}},
    {"prefers the worker that has the model open",
     {{"w1", 100, {{"m", 1}}}, {"w2", 50, {{"m", 1}}, "m"}},
     {{1, 1, "m", 0, 10}},
     {{"w2", 0, {1}}},
     {}},
    {"then the largest KV budget",
     {{"a", 50, {{"m", 1}}}, {"b", 100, {{"m", 1}}}},
     {{1, 1, "m", 0, 10}, {2, 1, "m", 0, 10}},
     {{"b", 0, {1, 2}}},
     {}},
    {"one model per batch: a second model opens another worker",
     {{"w1", 100, {{"m", 1}, {"n", 1}}}, {"w2", 100, {{"m", 1}, {"n", 1}}}},
     {{1, 1, "m", 0, 10}, {2, 1, "n", 0, 10}, {3, 1, "m", 0, 10}, {4, 1, "n", 0, 10}},
     {{"w1", 0, {1, 3}}, {"w2", 0, {2, 4}}},
     {}},
    {"a worker only gets models it serves; the rest wait",
     {{"w1", 100, {{"n", 1}}}},
     {{1, 1, "m", 0, 10}, {2, 1, "n", 0, 10}},
     {{"w1", 0, {2}}},
     {}},
    {"a job no worker could ever hold fails with the reason",
     {{"small", 500, {{"m", 1}}}, {"tiny", 800, {{"m", 4}}}},
     {{1, 1, "m", 0, 1000}, {2, 1, "m", 0, 100}},
     {{"small", 0, {2}}},
     {{1,
       "needs 1000 tokens of KV cache; the most any worker serving m can hold is 500 (worker "
       "small)"}}},
    {"a disconnected worker that could hold it keeps the job waiting",
     {{"small", 500, {{"m", 1}}}, {"big", 5000, {{"m", 1}}, "", false}},
     {{1, 1, "m", 0, 1000}},
     {},
     {}},
    {"a model no known worker serves waits",
     {{"w1", 100, {{"n", 1}}}},
     {{1, 1, "m", 0, 1000}},
     {},
     {}},
    {"a busy worker asking for a top-up gets jobs of its batch's model into that batch",
     {{"busy", 1000, {{"m", 1}, {"n", 1}}, "m", true, 7, "m", true, 25},
      {"quiet", 1000, {{"m", 1}}, "m", true, 8, "m", false, 500}},
     {{1, 1, "n", 0, 10}, {2, 1, "m", 0, 10}, {3, 1, "m", 0, 10}, {4, 1, "m", 0, 10}},
     {{"busy", 7, {2, 3}}},
     {}},
    {"a top-up batch fills before an idle worker opens a new batch",
     {{"busy", 1000, {{"m", 1}}, "m", true, 7, "m", true, 20}, {"idle", 100, {{"m", 1}}}},
     {{1, 1, "m", 0, 10}, {2, 1, "m", 0, 10}, {3, 1, "m", 0, 10}},
     {{"busy", 7, {1, 2}}, {"idle", 0, {3}}},
     {}},
    {"a worker's job limit caps its batch",
     {{"w1", 1000, {{"m", 1}}, "", true, 0, "", false, 0, 2},
      {"w2", 500, {{"m", 1}}, "", true, 0, "", false, 0, 0}},
     {{1, 1, "m", 0, 10}, {2, 1, "m", 0, 10}, {3, 1, "m", 0, 10}},
     {{"w1", 0, {1, 2}}, {"w2", 0, {3}}},
     {}},
    {"a top-up counts the jobs already in the batch against the limit",
     {{"w1", 1000, {{"m", 1}}, "m", true, 4, "m", true, 900, 3, 2}},
     {{1, 1, "m", 0, 10}, {2, 1, "m", 0, 10}},
     {{"w1", 4, {1}}},
     {}},
    {"KV bytes per token are the worker's own",
     {{"fp32", 100, {{"m", 4}}}, {"bf16", 50, {{"m", 1}}}},
     {{1, 1, "m", 0, 30}},
     {{"bf16", 0, {1}}},
     {}},
    {"one-pass jobs reserve no KV: they fill a pass up to its token budget",
     {{"w1", 10, {{"m", 1}}, "", true, 0, "", false, 0, 0, 0, 100}},
     {{1, 1, "m", 0, 30, 1},
      {2, 1, "m", 0, 30, 1},
      {3, 1, "m", 0, 30, 1},
      {4, 1, "m", 0, 30, 1},
      {5, 1, "m", 0, 10, 1}},
     {{"w1", 0, {1, 2, 3, 5}}},
     {}},
    {"a job longer than the pass budget opens a batch of its own",
     {{"w1", 1000, {{"m", 1}}, "", true, 0, "", false, 0, 0, 0, 50}},
     {{1, 1, "m", 0, 80, 1}, {2, 1, "m", 0, 10, 1}},
     {{"w1", 0, {1}}},
     {}},
    {"generation is priced in KV and in its prompt's tokens",
     {{"w1", 1000, {{"m", 1}}, "", true, 0, "", false, 0, 0, 0, 25}},
     {{1, 1, "m", 0, 20}, {2, 1, "m", 0, 20}, {3, 1, "m", 0, 6, 1}},
     {{"w1", 0, {1, 3}}},
     {}},
    {"a running batch with no KV left still tops up with one-pass jobs at a boundary",
     {{"busy", 1000, {{"m", 1}}, "m", true, 7, "m", true, 0, 0, 3, 100, 40}},
     {{1, 1, "m", 0, 10, 5}, {2, 1, "m", 0, 30, 1}, {3, 1, "m", 0, 30, 1}, {4, 1, "m", 0, 9, 1}},
     {{"busy", 7, {2, 4}}},
     {}},
    {"a one-pass job never fails for want of KV",
     {{"small", 5, {{"m", 1}}}},
     {{1, 1, "m", 0, 1000, 1}},
     {{"small", 0, {1}}},
     {}},
    {"disconnected workers get nothing",
     {{"gone", 1000, {{"m", 1}}, "m", false}},
     {{1, 1, "m", 0, 10}},
     {},
     {}},
};

class ScheduleTest : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleTest, Plans) {
  const Case& c = GetParam();
  const Plan plan = Schedule(Build(c));
  ASSERT_EQ(plan.assignments.size(), c.assignments.size());
  for (size_t i = 0; i < c.assignments.size(); ++i) {
    SCOPED_TRACE("assignment " + std::to_string(i));
    EXPECT_EQ(plan.assignments[i].worker_id, c.assignments[i].worker);
    EXPECT_EQ(plan.assignments[i].batch_id, c.assignments[i].batch_id);
    EXPECT_EQ(plan.assignments[i].job_ids, c.assignments[i].jobs);
  }
  ASSERT_EQ(plan.rejections.size(), c.rejected.size());
  for (const Rejection& r : plan.rejections) {
    auto it = c.rejected.find(r.job_id);
    ASSERT_NE(it, c.rejected.end()) << "job " << r.job_id << " rejected: " << r.reason;
    EXPECT_NE(r.reason.find(it->second), std::string::npos) << r.reason;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, ScheduleTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name;
                           for (const char* p = info.param.name; *p != 0; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(ScheduleTest, KvBytesOfAssignmentsNeverExceedTheBudget) {
  Snapshot snapshot;
  WorkerSlot w;
  w.info.id = "w";
  w.info.connected = true;
  w.info.kv_budget_bytes = 1'000'000;
  w.info.models.push_back({"m", 48, 0, 0, 0, "", 0, ""});
  snapshot.workers.push_back(w);
  for (int i = 1; i <= 500; ++i) {
    snapshot.queue.push_back({i, 1, "m", 0, 100 + (i * 37) % 400, 3, {}});
  }
  const Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_LE(plan.assignments[0].kv_bytes, w.info.kv_budget_bytes);
  int64_t sum = 0;
  for (int64_t id : plan.assignments[0].job_ids) sum += snapshot.queue[id - 1].kv_tokens * 48;
  EXPECT_EQ(sum, plan.assignments[0].kv_bytes);
  // Greedy in order: the next job in the queue would not have fit.
  const int64_t next = plan.assignments[0].job_ids.back();
  EXPECT_GT(plan.assignments[0].kv_bytes + snapshot.queue[next].kv_tokens * 48,
            w.info.kv_budget_bytes);
}

// ---------------------------------------------------------------- shared prefixes

// `n` ids: `prefix` then ids counting up from `from`.
std::vector<int32_t> Ids(std::vector<int32_t> prefix, int n, int32_t from) {
  while (static_cast<int>(prefix.size()) < n) prefix.push_back(from++);
  return prefix;
}

// A shared instruction of `n` tokens: n ids from `from`.
std::vector<int32_t> Prefix(int n, int32_t from) { return Ids({}, n, from); }

// A classification of `prompt` with `label_tokens` tokens of labels (one pass:
// it feeds prompt and labels, holds no KV across passes).
QueuedJob Classify(int64_t id, std::vector<int32_t> prompt, int64_t label_tokens = 2,
                   int32_t priority = 0, const std::string& model = "m") {
  const int64_t tokens = static_cast<int64_t>(prompt.size()) + label_tokens;
  return {id, 1, model, priority, tokens, 1, std::move(prompt)};
}

// An idle worker serving "m" (and "n"): no KV limit worth the name, `max_jobs`
// jobs a batch (0: no limit), `pass_budget` tokens a pass (0: no limit).
WorkerSlot Idle(const std::string& id, int32_t max_jobs = 0, int64_t pass_budget = 0) {
  WorkerSlot w;
  w.info.id = id;
  w.info.connected = true;
  w.info.kv_budget_bytes = 1'000'000;
  w.info.max_batch_jobs = max_jobs;
  for (const char* model : {"m", "n"}) {
    ModelOffer offer;
    offer.name = model;
    offer.kv_bytes_per_token = 1;
    offer.pass_token_budget = pass_budget;
    w.info.models.push_back(offer);
  }
  return w;
}

TEST(SharedPrefixTest, JobsSharingAPrefixRideTogetherOpenedByTheOldest) {
  const auto a = Prefix(40, 1000);
  const auto b = Prefix(40, 2000);
  Snapshot snapshot;
  snapshot.workers = {Idle("w1", 3), Idle("w2", 3)};
  // Interleaved in submission order: a, b, a, b, a, b.
  for (int64_t id = 1; id <= 6; ++id) {
    snapshot.queue.push_back(Classify(id, Ids(id % 2 == 1 ? a : b, 48, 100 * id)));
  }
  Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 2u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(plan.assignments[1].job_ids, (std::vector<int64_t>{2, 4, 6}));
  // Each group's 40 shared tokens count once: 50, then 10 for each other job.
  for (const Assignment& assignment : plan.assignments) {
    EXPECT_EQ(assignment.job_pass_tokens, (std::vector<int64_t>{50, 10, 10}));
    EXPECT_EQ(assignment.pass_tokens, 70);
  }
  // Sharing less than the minimum: dispatch order, every token counted.
  snapshot.min_shared_prefix_tokens = 41;
  plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 2u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(plan.assignments[0].job_pass_tokens, (std::vector<int64_t>{50, 50, 50}));
  EXPECT_EQ(plan.assignments[1].job_ids, (std::vector<int64_t>{4, 5, 6}));
}

TEST(SharedPrefixTest, TheLongestSharedPrefixComesFirst) {
  const auto instruction = Prefix(40, 1000);
  const auto examples = Ids(instruction, 80, 5000);  // the instruction, then examples
  Snapshot snapshot;
  snapshot.workers = {Idle("w", 3)};
  snapshot.queue = {Classify(1, Ids(examples, 90, 1)), Classify(2, Ids(instruction, 50, 100)),
                    Classify(3, Ids({}, 50, 200)), Classify(4, Ids(examples, 90, 300))};
  const Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  // Job 4 shares 80 tokens with job 1, job 2 only 40: 4 first.
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(plan.assignments[0].job_pass_tokens, (std::vector<int64_t>{92, 12, 12}));
}

TEST(SharedPrefixTest, APassTokenBudgetHoldsMoreJobsThatShare) {
  Snapshot snapshot;
  snapshot.workers = {Idle("w", 0, 100)};
  const auto shared = Prefix(32, 1000);  // exactly the default minimum
  for (int64_t id = 1; id <= 8; ++id)
    snapshot.queue.push_back(Classify(id, Ids(shared, 40, 10 * id)));
  Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  // 42, then 10 each: 6 jobs in 92 tokens (without sharing 2 would fit).
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(plan.assignments[0].pass_tokens, 92);
  snapshot.min_shared_prefix_tokens = 33;
  plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.assignments[0].pass_tokens, 84);
}

TEST(SharedPrefixTest, APromptPrefixThatJobsHoldingKvShareIsChargedOnce) {
  // Generations of 5 tokens: 40-token prompts sharing 36, 44 positions each;
  // the engine holds the 36 once for the three: 44 + 8 + 8.
  Snapshot snapshot;
  WorkerSlot w = Idle("w");
  w.info.kv_budget_bytes = 100;  // two jobs' 88 positions, not three unshared
  snapshot.workers = {w};
  const auto shared = Prefix(36, 1000);
  for (int64_t id = 1; id <= 3; ++id) {
    snapshot.queue.push_back({id, 1, "m", 0, 44, 5, Ids(shared, 40, 10 * id)});
  }
  Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(plan.assignments[0].kv_bytes, 60);
  EXPECT_EQ(plan.assignments[0].job_kv_tokens, (std::vector<int64_t>{44, 8, 8}));
  EXPECT_EQ(plan.assignments[0].job_pass_tokens, (std::vector<int64_t>{40, 4, 4}));
  // Sharing less than the minimum: every position counted.
  snapshot.min_shared_prefix_tokens = 37;
  plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.assignments[0].kv_bytes, 88);
  // A classification holds no KV across passes, so a generation sharing
  // its prompt with one still holds all of its own.
  snapshot.min_shared_prefix_tokens = kDefaultMinSharedPrefixTokens;
  snapshot.queue = {Classify(1, Ids(shared, 40, 10)), {2, 1, "m", 0, 44, 5, Ids(shared, 40, 20)}};
  plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.assignments[0].kv_bytes, 44);
}

TEST(SharedPrefixTest, AWholePromptSharedCostsOnlyItsLabels) {
  const auto prompt = Prefix(40, 1000);
  Snapshot snapshot;
  snapshot.workers = {Idle("w")};
  // Job 2's prompt is all of job 1's and more; job 3's is job 1's; job 4 is
  // a generation whose prompt is job 1's (it feeds the prompt only).
  snapshot.queue = {Classify(1, prompt, 3),
                    Classify(2, Ids(prompt, 45, 7), 3),
                    Classify(3, prompt, 3),
                    {4, 1, "m", 0, 40 + 9, 10, prompt}};
  const Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  // Each shares job 1's 40 tokens: in dispatch order after it.
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(plan.assignments[0].job_pass_tokens, (std::vector<int64_t>{43, 8, 3, 0}));
}

TEST(SharedPrefixTest, OnlyJobsOfOneModelAndPriorityAreGrouped) {
  const auto shared = Prefix(40, 1000);
  Snapshot snapshot;
  snapshot.workers = {Idle("w1", 2), Idle("w2", 2)};
  snapshot.queue = {Classify(1, Ids(shared, 50, 1), 2, 1), Classify(2, Ids({}, 50, 100), 2, 1),
                    Classify(3, Ids(shared, 50, 200), 2, 0),
                    Classify(4, Ids(shared, 50, 300), 2, 1, "n")};
  const Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 2u);
  // Job 3 does not pass job 2 of the higher priority (it waits); job 4 of
  // the other model opens a batch of its own, sharing nothing.
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(plan.assignments[0].job_pass_tokens, (std::vector<int64_t>{52, 52}));
  EXPECT_EQ(plan.assignments[1].job_ids, (std::vector<int64_t>{4}));
  EXPECT_EQ(plan.assignments[1].model, "n");
}

TEST(SharedPrefixTest, AJobOfAnotherPriorityThatJoinsStillSharesThePrefix) {
  const auto shared = Prefix(40, 1000);
  Snapshot snapshot;
  snapshot.workers = {Idle("w")};
  snapshot.queue = {Classify(1, Ids(shared, 50, 1), 2, 1), Classify(2, Ids({}, 50, 100), 2, 1),
                    Classify(3, Ids(shared, 50, 200), 2, 0)};
  const Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(plan.assignments[0].job_pass_tokens, (std::vector<int64_t>{52, 52, 12}));
}

// Worker "w" running batch 7 of "m" (3 jobs, a pass budget of 100), asking
// for a top-up with `free_pass_tokens` of its next pass left.
WorkerSlot Busy(int64_t free_pass_tokens) {
  WorkerSlot busy = Idle("w", 0, 100);
  busy.batch_id = 7;
  busy.batch_model = "m";
  busy.batch_jobs = 3;
  busy.wants_top_up = true;
  busy.free_kv_bytes = 1000;
  busy.free_pass_tokens = free_pass_tokens;
  return busy;
}

TEST(SharedPrefixTest, ATopUpSharesAmongItsOwnJobs) {
  // The running batch's jobs are not known to the policy: without a prefix
  // its worker keeps, a top-up counts what its own jobs share, not what they
  // share with the batch.
  WorkerSlot busy = Busy(60);
  Snapshot snapshot;
  snapshot.workers = {busy};
  const auto shared = Prefix(32, 1000);
  for (int64_t id = 1; id <= 3; ++id)
    snapshot.queue.push_back(Classify(id, Ids(shared, 40, 10 * id)));
  const Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].batch_id, 7);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2}));  // 42 + 10; + 10 > 60
  EXPECT_EQ(plan.assignments[0].pass_tokens, 52);
}

TEST(SharedPrefixTest, ATopUpThatAgreesWithAKeptPrefixCostsOnlyTheRest) {
  // The worker keeps the 40-token instruction (and 1 more) for its next
  // pass: a job agreeing with it on 32 tokens or more starts after that.
  WorkerSlot busy = Busy(61);
  const auto instruction = Prefix(40, 1000);
  busy.kept_prefixes = {Ids(instruction, 41, 1), Prefix(50, 5000)};
  Snapshot snapshot;
  snapshot.workers = {busy};
  // 40 + 10 own tokens + 2 of labels each: 12 once the kept 40 are skipped.
  for (int64_t id = 1; id <= 5; ++id) {
    snapshot.queue.push_back(Classify(id, Ids(instruction, 50, 100 * id)));
  }
  // Agrees with the other kept prefix on 31 tokens only: costs all 33.
  snapshot.queue.push_back(Classify(6, Ids(Prefix(31, 5000), 31, 0)));
  // Its whole prompt is a kept prefix's start: the last token is computed.
  snapshot.queue.push_back(Classify(7, Prefix(36, 5000), 0));
  Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  const Assignment& a = plan.assignments[0];
  EXPECT_EQ(a.job_ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(a.job_pass_tokens, (std::vector<int64_t>{12, 12, 12, 12, 12, 1}));
  EXPECT_EQ(a.pass_tokens, 61);
  // An idle worker keeps nothing: the first job costs its whole feed.
  snapshot.workers = {Idle("w", 0, 100)};
  plan = Schedule(snapshot);
  ASSERT_FALSE(plan.assignments.empty());
  EXPECT_EQ(plan.assignments[0].job_pass_tokens.front(), 52);
}

TEST(SharedPrefixTest, ATopUpHoldingKvThatAgreesWithAKeptPrefixIsChargedOnlyItsOwnPositions) {
  // The worker keeps a 40-token instruction; generations of 6 new tokens
  // after it and 8 tokens of their own hold 40 + 8 + 5 positions, 13 their
  // own: the engine holds the instruction in the kept prefix's cache.
  WorkerSlot busy = Busy(1000);
  busy.free_kv_bytes = 40;
  const auto instruction = Prefix(40, 1000);
  busy.kept_prefixes = {instruction};
  Snapshot snapshot;
  snapshot.workers = {busy};
  for (int64_t id = 1; id <= 4; ++id) {
    snapshot.queue.push_back({id, 1, "m", 0, 53, 6, Ids(instruction, 48, 10 * id)});
  }
  Plan plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(plan.assignments[0].job_kv_tokens, (std::vector<int64_t>{13, 13, 13}));
  EXPECT_EQ(plan.assignments[0].kv_bytes, 39);
  // Without it kept, the first holds the instruction too; the next share it
  // with the first (they meet in one first pass): 53 positions do not fit.
  snapshot.workers[0].kept_prefixes.clear();
  snapshot.workers[0].free_kv_bytes = 80;
  plan = Schedule(snapshot);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments[0].job_kv_tokens, (std::vector<int64_t>{53, 13, 13}));
}

// The jobs of `a`, from a snapshot whose job ids are 1, 2, ... in order.
std::vector<const QueuedJob*> JobsOf(const Assignment& a, const Snapshot& snapshot) {
  std::vector<const QueuedJob*> jobs;
  for (int64_t id : a.job_ids) jobs.push_back(&snapshot.queue[static_cast<size_t>(id - 1)]);
  return jobs;
}

int64_t Sum(const std::vector<int64_t>& values) {
  int64_t sum = 0;
  for (int64_t v : values) sum += v;
  return sum;
}

// A prompt that branches off one of three 24-token stems at a random depth,
// then 1 to 11 tokens of 3 values.
std::vector<int32_t> StemPrompt(std::mt19937& random) {
  const std::vector<int32_t> stem = Prefix(24, 1000 * static_cast<int32_t>(random() % 3 + 1));
  std::vector<int32_t> prompt(stem.begin(), stem.begin() + random() % (stem.size() + 1));
  const int extra = static_cast<int>(random() % 12) + (prompt.empty() ? 1 : 0);
  for (int k = 0; k < extra; ++k) prompt.push_back(static_cast<int32_t>(random() % 3));
  return prompt;
}

// Rows the engine computes for `jobs` in one pass at most (every distinct
// prefix of their prompts once, labels whole; pass_trie.h shares labels too).
int64_t EngineRows(const std::vector<const QueuedJob*>& jobs) {
  std::set<std::vector<int32_t>> prefixes;
  int64_t labels = 0;
  for (const QueuedJob* job : jobs) {
    for (size_t n = 1; n <= job->prompt_ids.size(); ++n) {
      prefixes.insert(std::vector<int32_t>(job->prompt_ids.begin(), job->prompt_ids.begin() + n));
    }
    labels += job->pass_tokens() - static_cast<int64_t>(job->prompt_ids.size());
  }
  return static_cast<int64_t>(prefixes.size()) + labels;
}

// KV positions the engine holds for `jobs` after their first pass together:
// each prompt position that two or more of those holding KV share once
// (KVCache::Share), their own positions after the prompt.
int64_t EngineKvPositions(const std::vector<const QueuedJob*>& jobs) {
  std::vector<const QueuedJob*> going_on;
  int64_t after_prompts = 0;
  for (const QueuedJob* job : jobs) {
    if (job->reserved_kv_tokens() == 0) continue;
    going_on.push_back(job);
    after_prompts += job->reserved_kv_tokens() - static_cast<int64_t>(job->prompt_ids.size());
  }
  std::set<std::vector<int32_t>> prefixes;
  for (const QueuedJob* job : going_on) {
    for (size_t n = 1; n <= job->prompt_ids.size(); ++n) {
      prefixes.insert(std::vector<int32_t>(job->prompt_ids.begin(), job->prompt_ids.begin() + n));
    }
  }
  return static_cast<int64_t>(prefixes.size()) + after_prompts;
}

TEST(SharedPrefixTest, NeverChargesLessKvThanTheEngineHolds) {
  std::mt19937 random(11);
  for (int round = 0; round < 20; ++round) {
    Snapshot snapshot;
    snapshot.min_shared_prefix_tokens = 1 + round % 8;
    WorkerSlot small = Idle("w1");
    small.info.kv_budget_bytes = 400;
    snapshot.workers = {small, Idle("w2", 12, 0)};
    for (int64_t id = 1; id <= 60; ++id) {
      const std::vector<int32_t> prompt = StemPrompt(random);
      if (random() % 3 == 0) {
        snapshot.queue.push_back(Classify(id, prompt, 2));
      } else {  // a generation of 2 to 9 tokens
        const int64_t n = static_cast<int64_t>(random() % 8) + 2;
        const int64_t positions = static_cast<int64_t>(prompt.size()) + n - 1;
        snapshot.queue.push_back({id, 1, "m", 0, positions, n, prompt});
      }
    }
    const Plan plan = Schedule(snapshot);
    ASSERT_FALSE(plan.assignments.empty());
    for (const Assignment& assignment : plan.assignments) {
      const std::vector<const QueuedJob*> jobs = JobsOf(assignment, snapshot);
      int64_t whole = 0;
      for (const QueuedJob* job : jobs) whole += job->reserved_kv_tokens();
      EXPECT_GE(assignment.kv_bytes, EngineKvPositions(jobs)) << "round " << round;
      EXPECT_LE(assignment.kv_bytes, whole);
      EXPECT_EQ(Sum(assignment.job_kv_tokens), assignment.kv_bytes);  // one byte a position
      if (assignment.worker_id == "w1") {
        EXPECT_LE(assignment.kv_bytes, 400);
      }
      // At the minimum of one token, exactly what the engine holds.
      if (snapshot.min_shared_prefix_tokens == 1) {
        EXPECT_EQ(assignment.kv_bytes, EngineKvPositions(jobs)) << "round " << round;
      }
    }
  }
}

TEST(SharedPrefixTest, NeverCountsFewerTokensThanTheEngineComputes) {
  std::mt19937 random(7);
  for (int round = 0; round < 20; ++round) {
    Snapshot snapshot;
    snapshot.min_shared_prefix_tokens = 1 + round % 8;
    snapshot.workers = {Idle("w1", 0, 300), Idle("w2", 12, 0)};
    for (int64_t id = 1; id <= 60; ++id) {
      const std::vector<int32_t> prompt = StemPrompt(random);
      snapshot.queue.push_back(Classify(id, prompt, static_cast<int64_t>(random() % 3 + 1)));
    }
    const Plan plan = Schedule(snapshot);
    ASSERT_FALSE(plan.assignments.empty());
    for (const Assignment& assignment : plan.assignments) {
      const std::vector<const QueuedJob*> jobs = JobsOf(assignment, snapshot);
      int64_t whole = 0;
      for (const QueuedJob* job : jobs) whole += job->pass_tokens();
      EXPECT_GE(assignment.pass_tokens, EngineRows(jobs)) << "round " << round;
      EXPECT_LE(assignment.pass_tokens, whole);
      EXPECT_EQ(Sum(assignment.job_pass_tokens), assignment.pass_tokens);
      if (assignment.worker_id == "w1") {
        EXPECT_LE(assignment.pass_tokens, 300);
      }
    }
  }
}

TEST(TakesJobsTest, IdleOrAskingForATopUpWithRoomUnderItsJobLimit) {
  WorkerSlot w;
  w.info.connected = true;
  w.info.max_batch_jobs = 4;
  EXPECT_TRUE(TakesJobs(w));  // idle
  w.batch_id = 7;
  w.batch_jobs = 3;
  w.free_kv_bytes = 100;
  EXPECT_FALSE(TakesJobs(w));  // busy, no top-up asked for
  w.wants_top_up = true;
  EXPECT_TRUE(TakesJobs(w));
  w.batch_jobs = 4;
  EXPECT_FALSE(TakesJobs(w));  // at its job limit
  w.info.max_batch_jobs = 0;
  EXPECT_TRUE(TakesJobs(w));  // no limit
  w.free_kv_bytes = 0;
  EXPECT_FALSE(TakesJobs(w));  // no room
  w.free_pass_tokens = 10;
  EXPECT_TRUE(TakesJobs(w));  // room for one-pass jobs
  w.info.connected = false;
  EXPECT_FALSE(TakesJobs(w));
}

}  // namespace
}  // namespace nightshift::scheduler
