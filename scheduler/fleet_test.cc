#include "scheduler/fleet.h"

#include <gtest/gtest.h>

#include <vector>

#include "scheduler/test_util.h"
#include "scheduler/watchers.h"

namespace nightshift::scheduler {
namespace {

using testing::Offer;
using testing::Worker;

TEST(FleetTest, SecondsPerPassPrefersMeasuredThenAdvertisedThenThePlanners) {
  Fleet fleet;
  LiveWorker& w = fleet.Worker("w1");
  w.info = Worker("w1", 1 << 20, {Offer("m")});
  w.info.read_bytes_per_second = 2e9;
  w.info.models[0].checkpoint_bytes = 1'000'000'000;
  w.info.models[0].seconds_per_pass = 1.5;
  EXPECT_EQ(fleet.SecondsPerPass(w, "m"), 1.5);  // advertised
  w.info.models[0].seconds_per_pass = 0;
  EXPECT_EQ(fleet.SecondsPerPass(w, "m"), 0.5);  // planner::PassSeconds: 1 GB / 2 GB/s
  w.pass_times["m"].Add(0.7, 1);
  EXPECT_DOUBLE_EQ(fleet.SecondsPerPass(w, "m"), 0.7);  // measured
  EXPECT_TRUE(fleet.Measured(w, "m"));
  EXPECT_FALSE(fleet.Measured(w, "other"));
  EXPECT_EQ(fleet.SecondsPerPass(w, "other"), 0.0);
}

TEST(FleetTest, ForgetDropsLeftJobsAndEmptyBatchesAndNamesTheCancelled) {
  Fleet fleet;
  fleet.Worker("w1").batch_id = 7;
  LiveBatch& batch = fleet.Batch(7, "w1", "m");
  batch.jobs[1] = {10, 4, 0, 0};
  batch.jobs[2] = {10, 4, 0, 0};
  // Job 1 is cancelled, job 2 starts running (it stays).
  auto cancelled = fleet.Forget({{1, 10, JobState::kLeased, JobState::kCancelled, 7, "w1", ""},
                                 {2, 10, JobState::kLeased, JobState::kRunning, 7, "w1", ""}});
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[7].worker_id, "w1");
  EXPECT_EQ(cancelled[7].job_ids, std::vector<int64_t>{1});
  ASSERT_NE(fleet.FindBatch(7), nullptr);
  EXPECT_EQ(fleet.FindBatch(7)->jobs.size(), 1u);
  // The last job succeeds: the batch goes and the worker is idle.
  EXPECT_TRUE(
      fleet.Forget({{2, 10, JobState::kRunning, JobState::kSucceeded, 7, "w1", ""}}).empty());
  EXPECT_EQ(fleet.FindBatch(7), nullptr);
  EXPECT_EQ(fleet.FindWorker("w1")->batch_id, 0);
}

TEST(FleetTest, PassesLeftCountTheTokensGeneratedNotThePassesSinceTheLease) {
  LiveBatch batch;
  batch.passes_done = 5;
  EXPECT_EQ(batch.PassesLeft({1, 8, 2, 1}), 6);  // generated 2 (a top-up joins late)
  EXPECT_EQ(batch.PassesLeft({1, 8, 6, 4}), 2);
  EXPECT_EQ(batch.PassesLeft({1, 3, 9, 0}), 0);
  // Leased at this boundary and not yet in a report: it joins at the next one.
  EXPECT_TRUE(batch.JoinsNextBoundary({1, 8, 0, 5}));
  EXPECT_FALSE(batch.JoinsNextBoundary({1, 8, 0, 4}));  // a report came since: it rides
  LiveBatch fresh;                                      // a new batch's jobs ride its first pass
  EXPECT_FALSE(fresh.JoinsNextBoundary({1, 8, 0, 0}));
}

class RecordingWatcher : public SubmissionWatcher {
 public:
  void OnUpdate(const SubmissionUpdate& update) override {
    etas.push_back(update.status.eta_seconds);
  }
  std::vector<std::optional<double>> etas;
};

TEST(WatchersTest, AKnownEtaIsCountedDownAndRecomputedOnceASecond) {
  Watchers watchers;
  RecordingWatcher watcher;
  SubmissionStatus status;
  status.submission.id = 3;
  status.submission.sealed = true;
  status.submission.counts.queued = 1;
  const int64_t id = watchers.Add(3, &watcher, 10.0, 1000);
  EXPECT_TRUE(watchers.Watched(3));
  EXPECT_FALSE(watchers.Watched(4));
  int computed = 0;
  auto eta = [&]() -> std::optional<double> {
    ++computed;
    return 20.0;
  };
  watchers.Notify(status, {}, 1500, eta);  // 0.5 s later: counted down
  watchers.Notify(status, {}, 2000, eta);  // 1 s later: recomputed
  watchers.Notify(status, {}, 2250, eta);
  EXPECT_EQ(computed, 1);
  ASSERT_EQ(watcher.etas.size(), 3u);
  EXPECT_DOUBLE_EQ(*watcher.etas[0], 9.5);
  EXPECT_DOUBLE_EQ(*watcher.etas[1], 20.0);
  EXPECT_DOUBLE_EQ(*watcher.etas[2], 19.75);
  // The last update always recomputes.
  status.submission.counts.queued = 0;
  watchers.Notify(status, {}, 2300, [] { return std::optional<double>(0.0); });
  EXPECT_DOUBLE_EQ(*watcher.etas.back(), 0.0);
  watchers.Remove(id);
  EXPECT_FALSE(watchers.Watched(3));
}

}  // namespace
}  // namespace nightshift::scheduler
