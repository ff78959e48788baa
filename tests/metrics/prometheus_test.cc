// A real Prometheus server (Debian's `prometheus`, which scripts/bootstrap
// installs; the test fails without it) scrapes a running nightshift-scheduler
// and nightshift-worker every second while jobs run; its HTTP API then answers
// for the pass-duration histogram, its median pass time, and `up` of both.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/metrics/cluster.h"

namespace nightshift::metrics_test {
namespace {

using nlohmann::json;

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// The `data.result` of an instant query; an empty array while Prometheus does
// not answer.
json Query(int port, const std::string& promql) {
  const std::string body = HttpGetBody(port, "/api/v1/query?query=" + UrlEncode(promql));
  if (body.empty()) return json::array();
  const json answer = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!answer.is_object() || !answer.contains("data")) return json::array();
  return answer["data"]["result"];
}

// Polls `promql` until `good` accepts its result or `timeout_seconds` pass;
// returns the last result.
template <typename Pred>
json QueryUntil(int port, const std::string& promql, Pred good, double timeout_seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  json result = Query(port, promql);
  while (!good(result) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    result = Query(port, promql);
  }
  return result;
}

double Value(const json& sample) { return std::stod(sample["value"][1].get<std::string>()); }

TEST(PrometheusIntegrationTest, PrometheusScrapesTheSchedulerAndTheWorker) {
  MetricsCluster cluster;
  ASSERT_EQ(cluster.StartScheduler(), "");
  ASSERT_EQ(cluster.StartWorker("cpu-1"), "") << cluster.Logs();

  std::ofstream(cluster.dir() + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n"
      << "  - job_name: nightshift-scheduler\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << cluster.scheduler_metrics_port() << "']\n"
      << "  - job_name: nightshift-worker\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << cluster.worker_metrics_port("cpu-1") << "']\n";
  const int port = FreePort();
  std::unique_ptr<Process> prometheus =
      Process::Start({"/usr/bin/prometheus", "--config.file=" + cluster.dir() + "/prometheus.yml",
                      "--storage.tsdb.path=" + cluster.dir() + "/tsdb",
                      "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                     cluster.dir() + "/prometheus.log");
  ASSERT_NE(prometheus, nullptr) << "cannot start /usr/bin/prometheus; run scripts/bootstrap";

  // Both targets up before the jobs, so the histogram's growth is seen.
  const json up = QueryUntil(
      port, "up", [](const json& r) { return r.size() == 2 && Value(r[0]) + Value(r[1]) == 2; },
      30);
  ASSERT_EQ(up.size(), 2u) << up.dump() << "\n" << prometheus->Log();
  for (const json& target : up) {
    EXPECT_EQ(target["value"][1], "1") << target.dump();
  }

  // Two rounds of jobs a few scrapes apart, so that rate() sees passes.
  ASSERT_EQ(cluster.RunJobs(2, 4, 60), "") << cluster.Logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ASSERT_EQ(cluster.RunJobs(2, 4, 60), "") << cluster.Logs();

  const json count = QueryUntil(
      port, "nightshift_pass_duration_seconds_count",
      [](const json& r) { return !r.empty() && Value(r[0]) >= 8; }, 20);
  ASSERT_EQ(count.size(), 1u) << count.dump() << "\n" << prometheus->Log();
  EXPECT_EQ(count[0]["metric"]["model"], kModel);
  EXPECT_EQ(count[0]["metric"]["worker"], "cpu-1");
  EXPECT_GE(Value(count[0]), 8);  // two rounds of at least 4 passes

  const json median = QueryUntil(
      port,
      "histogram_quantile(0.5, sum by (le) (rate(nightshift_pass_duration_seconds_bucket[1m])))",
      [](const json& r) { return !r.empty() && std::isfinite(Value(r[0])); }, 20);
  ASSERT_EQ(median.size(), 1u) << median.dump();
  EXPECT_TRUE(std::isfinite(Value(median[0]))) << median.dump();
  EXPECT_GT(Value(median[0]), 0);

  const json finished = QueryUntil(
      port, "sum(nightshift_jobs_finished_total{outcome=\"succeeded\"})",
      [](const json& r) { return !r.empty() && Value(r[0]) == 4; }, 20);
  ASSERT_EQ(finished.size(), 1u) << finished.dump();
  EXPECT_EQ(Value(finished[0]), 4);

  prometheus->Signal(SIGTERM);
  prometheus->Wait(10);
}

}  // namespace
}  // namespace nightshift::metrics_test
