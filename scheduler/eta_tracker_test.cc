#include "scheduler/eta_tracker.h"

#include <gtest/gtest.h>

namespace nightshift::scheduler {
namespace {

JobResult Generated(int64_t tokens, const std::string& reason) {
  JobResult r;
  r.ok = true;
  r.output.completion_tokens = tokens;
  r.output.finish_reason = reason;
  return r;
}

TEST(EtaTrackerTest, StopsCountEarlyEndsPerTokenGenerated) {
  EtaTracker tracker;
  tracker.JobFinished(1, 16, Generated(4, "stop"));     // stopped early
  tracker.JobFinished(1, 16, Generated(16, "length"));  // ran to max_tokens
  tracker.JobFinished(1, 8, Generated(8, "stop"));      // EOS exactly at max: not early
  JobResult scored;
  scored.ok = true;
  scored.output.finish_reason = "label";
  scored.output.labels.push_back({});
  tracker.JobFinished(1, 1, scored);  // classification: no tokens to stop at
  JobResult failed;
  tracker.JobFinished(1, 16, failed);
  const StopStats& s = tracker.stops().at(1);
  EXPECT_EQ(s.early_stops, 1);
  EXPECT_EQ(s.tokens, 4 + 16 + 8);
  EXPECT_DOUBLE_EQ(s.Hazard(), 1.0 / 28);
  EXPECT_EQ(StopStats{}.Hazard(), 0);
}

TEST(EtaTrackerTest, KeepsTheEtaShownAtEachMilestoneAndJudgesItAtTheEnd) {
  EtaTracker tracker;
  int asked = 0;
  auto eta = [&](double seconds) {
    return [&asked, seconds]() -> std::optional<double> {
      ++asked;
      return seconds;
    };
  };
  // 20 jobs. 1 done: no milestone.
  tracker.Progress(7, 1, 20, 0, eta(99));
  EXPECT_EQ(asked, 0);
  // 5 done at t=10 s: 10% and 25% reached together, one ETA asked: 30 s.
  tracker.Progress(7, 5, 20, 10'000, eta(30));
  EXPECT_EQ(asked, 1);
  tracker.Progress(7, 5, 20, 11'000, eta(1));  // kept already
  EXPECT_EQ(asked, 1);
  // 10 done at t=20 s: ETA 15 s.
  tracker.Progress(7, 10, 20, 20'000, eta(15));
  // 20 done at t=40 s: 75% and 90% reached at the end have nothing left to judge.
  tracker.Progress(7, 20, 20, 40'000, eta(0));
  std::vector<EtaError> errors = tracker.Ended(7, 40'000);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].progress, "10");
  EXPECT_DOUBLE_EQ(errors[0].ratio, (30.0 - 30.0) / 30.0);
  EXPECT_EQ(errors[1].progress, "25");
  EXPECT_EQ(errors[2].progress, "50");
  EXPECT_DOUBLE_EQ(errors[2].ratio, (15.0 - 20.0) / 20.0);
  EXPECT_TRUE(tracker.Ended(7, 50'000).empty());  // forgotten
}

TEST(EtaTrackerTest, AnUnknownEtaIsNotJudged) {
  EtaTracker tracker;
  tracker.Progress(3, 1, 2, 0, [] { return std::optional<double>(); });
  EXPECT_TRUE(tracker.Ended(3, 5'000).empty());
}

}  // namespace
}  // namespace nightshift::scheduler
