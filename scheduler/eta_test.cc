#include "scheduler/eta.h"

#include <gtest/gtest.h>

namespace nightshift::scheduler {
namespace {

using Times = std::vector<std::optional<double>>;

EtaWorker W(const std::string& id, double spp, int64_t budget_tokens, double busy = 0,
            int32_t max_jobs = 0) {
  return {id, spp, budget_tokens * 10, 10, max_jobs, busy};
}

TEST(EtaTest, SmoothingStartsAtTheFirstSampleThenMovesPartWay) {
  EXPECT_DOUBLE_EQ(SmoothSecondsPerPass(0, 4.0), 4.0);
  EXPECT_DOUBLE_EQ(SmoothSecondsPerPass(4.0, 2.0), 4.0 + 0.3 * (2.0 - 4.0));
  double s = 0;
  for (int i = 0; i < 50; ++i) s = SmoothSecondsPerPass(s, 3.0);
  EXPECT_NEAR(s, 3.0, 1e-9);
}

TEST(EtaTest, RunningJobIsItsPassesLeftTimesSecondsPerPass) {
  EXPECT_EQ(RunningJobSeconds(10, 1.5), 15.0);
  EXPECT_EQ(RunningJobSeconds(0, 1.5), 0.0);
  EXPECT_EQ(RunningJobSeconds(-3, 1.5), 0.0);
  EXPECT_FALSE(RunningJobSeconds(10, 0).has_value());
}

struct QueueCase {
  const char* name;
  std::vector<EtaWorker> workers;
  std::vector<EtaJob> queue;  // {kv_tokens, passes}
  Times expected;
};

const QueueCase kQueueCases[] = {
    {"one worker, batches of two by KV budget",
     {W("w", 2.0, 20)},
     {{10, 5}, {10, 5}, {10, 5}},
     {10.0, 10.0, 20.0}},
    {"a busy worker starts after its current batch", {W("w", 2.0, 20, 6.0)}, {{10, 5}}, {16.0}},
    {"the earliest-free worker takes the next batch",
     {W("fast", 1.0, 10), W("slow", 2.0, 10)},
     {{10, 4}, {10, 4}, {10, 4}},
     {4.0, 8.0, 8.0}},
    {"a batch lasts as long as its longest job",
     {W("w", 1.0, 20)},
     {{10, 2}, {10, 10}, {10, 3}},
     {2.0, 10.0, 13.0}},
    {"classification needs one pass", {W("w", 5.0, 100)}, {{30, 1}, {30, 1}}, {5.0, 5.0}},
    {"the job limit cuts batches", {W("w", 1.0, 1000, 0, 1)}, {{1, 2}, {1, 2}}, {2.0, 4.0}},
    {"workers of unknown speed take no work",
     {W("unknown", 0, 100), W("known", 1.0, 100)},
     {{10, 3}},
     {3.0}},
    {"no worker with a known speed: unknown", {W("unknown", 0, 100)}, {{10, 3}}, {std::nullopt}},
    {"a job that fits nowhere, and all behind it, are unknown",
     {W("w", 1.0, 50)},
     {{10, 1}, {60, 1}, {10, 1}},
     {1.0, std::nullopt, std::nullopt}},
    {"an empty queue", {W("w", 1.0, 50)}, {}, {}},
};

class QueueFinishTest : public ::testing::TestWithParam<QueueCase> {};

TEST_P(QueueFinishTest, PlaysTheQueueOut) {
  const QueueCase& c = GetParam();
  const Times times = QueueFinishTimes(c.workers, c.queue);
  ASSERT_EQ(times.size(), c.expected.size());
  for (size_t i = 0; i < times.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(i));
    ASSERT_EQ(times[i].has_value(), c.expected[i].has_value());
    if (times[i]) {
      EXPECT_DOUBLE_EQ(*times[i], *c.expected[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, QueueFinishTest, ::testing::ValuesIn(kQueueCases),
                         [](const ::testing::TestParamInfo<QueueCase>& info) {
                           std::string name;
                           for (const char* p = info.param.name; *p != 0; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace nightshift::scheduler
