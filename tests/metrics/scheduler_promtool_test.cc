// The real nightshift-scheduler's /metrics after a few jobs ran on the
// scripted fake worker: `promtool check metrics` accepts it (Debian's
// `prometheus` package, which scripts/bootstrap installs; without promtool the
// test fails), and the scheduler's families hold what happened, the errors of
// the ETAs the submission showed among them.
#include <gtest/gtest.h>

#include "common/metrics_test_util.h"
#include "tests/metrics/cluster.h"

namespace nightshift::metrics_test {
namespace {

TEST(SchedulerPromtoolTest, TheSchedulersMetricsPassPromtoolAndCountTheJobs) {
  MetricsCluster cluster;
  ASSERT_EQ(cluster.StartScheduler(), "");
  ASSERT_EQ(cluster.StartFakeWorker("fake-1"), "");
  // 3, 4, 5 and 6 tokens: a quarter of the jobs is done after each of the last four passes.
  ASSERT_EQ(cluster.RunJobs(4, 3, 30, /*staggered=*/true), "") << cluster.Logs();

  const std::string text = HttpGetBody(cluster.scheduler_metrics_port(), "/metrics");
  ASSERT_FALSE(text.empty()) << cluster.Logs();
  const metrics::testing::CommandResult check = metrics::testing::PromtoolCheckMetrics(text);
  EXPECT_EQ(check.exit_code, 0) << "promtool (run scripts/bootstrap if it is missing):\n"
                                << check.output << "\n"
                                << text;

  const std::string model = std::string("model=\"") + kModel + "\"";
  EXPECT_EQ(SampleValue(text, "nightshift_jobs_submitted_total{" + model + "}"), "4") << text;
  EXPECT_EQ(
      SampleValue(text, "nightshift_jobs_finished_total{" + model + ",outcome=\"succeeded\"}"), "4")
      << text;
  EXPECT_EQ(SampleValue(text, "nightshift_jobs{" + model + ",state=\"succeeded\"}"), "4") << text;
  EXPECT_EQ(SampleValue(text, "nightshift_job_queue_seconds_count{" + model + "}"), "4") << text;
  EXPECT_EQ(SampleValue(text, "nightshift_job_end_to_end_seconds_count{" + model + "}"), "4")
      << text;
  EXPECT_EQ(SampleValue(text, "nightshift_submit_duration_seconds_count"), "1") << text;
  EXPECT_EQ(SampleValue(text, "nightshift_workers_attached"), "1") << text;
  // The ETA shown at 10, 25, 50 and 75% done, judged when the submission
  // ended (90% was reached by its last pass: nothing was left to estimate).
  for (const char* progress : {"10", "25", "50", "75"}) {
    EXPECT_EQ(
        SampleValue(text, std::string("nightshift_eta_relative_error_ratio_count{progress=\"") +
                              progress + "\"}"),
        "1")
        << progress << "\n"
        << text;
  }
  EXPECT_EQ(SampleValue(text, "nightshift_eta_relative_error_ratio_count{progress=\"90\"}"), "")
      << text;
  // Nothing left to run: no ETA series.
  EXPECT_EQ(text.find("nightshift_submission_eta_seconds{"), std::string::npos) << text;
}

}  // namespace
}  // namespace nightshift::metrics_test
