#include "scheduler/policy.h"

#include <gtest/gtest.h>

#include <map>

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
    snapshot.queue.push_back({j.id, j.submission, j.model, j.priority, j.kv_tokens, j.passes});
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
  for (int i = 1; i <= 500; ++i) snapshot.queue.push_back({i, 1, "m", 0, 100 + (i * 37) % 400, 3});
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
