// The real nightshift-scheduler's /metrics after a few jobs ran on the
// scripted fake worker: `promtool check metrics` accepts it (Debian's
// `prometheus` package, which scripts/bootstrap installs; without promtool the
// test fails), and the scheduler's families hold what happened.
#include <gtest/gtest.h>

#include "common/metrics_test_util.h"
#include "tests/metrics/cluster.h"

namespace nightshift::metrics_test {
namespace {

TEST(SchedulerPromtoolTest, TheSchedulersMetricsPassPromtoolAndCountTheJobs) {
  MetricsCluster cluster;
  ASSERT_EQ(cluster.StartScheduler(), "");
  ASSERT_EQ(cluster.StartFakeWorker("fake-1"), "");
  ASSERT_EQ(cluster.RunJobs(4, 3, 30), "") << cluster.Logs();

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
  // Nothing left to run: no ETA series.
  EXPECT_EQ(text.find("nightshift_submission_eta_seconds{"), std::string::npos) << text;
}

}  // namespace
}  // namespace nightshift::metrics_test
