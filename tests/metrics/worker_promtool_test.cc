// Both endpoints of a real cluster after a few jobs: the nightshift-scheduler
// and the nightshift-worker (CPU, stories260k) each serve /metrics that
// `promtool check metrics` accepts (without promtool the test fails), and the
// worker's pass-duration histogram counted the passes.
#include <gtest/gtest.h>

#include "common/metrics_test_util.h"
#include "tests/metrics/cluster.h"

namespace nightshift::metrics_test {
namespace {

TEST(WorkerPromtoolTest, BothEndpointsPassPromtool) {
  MetricsCluster cluster;
  ASSERT_EQ(cluster.StartScheduler(), "");
  ASSERT_EQ(cluster.StartWorker("cpu-1"), "") << cluster.Logs();
  ASSERT_EQ(cluster.RunJobs(3, 4, 60), "") << cluster.Logs();

  for (int port : {cluster.scheduler_metrics_port(), cluster.worker_metrics_port("cpu-1")}) {
    const std::string text = HttpGetBody(port, "/metrics");
    ASSERT_FALSE(text.empty()) << "nothing on port " << port << "\n" << cluster.Logs();
    const metrics::testing::CommandResult check = metrics::testing::PromtoolCheckMetrics(text);
    EXPECT_EQ(check.exit_code, 0) << "promtool (run scripts/bootstrap if it is missing):\n"
                                  << check.output << "\n"
                                  << text;
  }
  const std::string worker = HttpGetBody(cluster.worker_metrics_port("cpu-1"), "/metrics");
  // At least one pass per generated token (the prompts share passes).
  EXPECT_GE(SumOfSamples(worker, "nightshift_pass_duration_seconds_count"), 4) << worker;
  const std::string scheduler = HttpGetBody(cluster.scheduler_metrics_port(), "/metrics");
  EXPECT_EQ(SampleValue(scheduler, std::string("nightshift_jobs_finished_total{model=\"") + kModel +
                                       "\",outcome=\"succeeded\"}"),
            "3")
      << scheduler;
}

}  // namespace
}  // namespace nightshift::metrics_test
