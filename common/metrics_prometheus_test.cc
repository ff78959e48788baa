// A real Prometheus server (Debian's `prometheus`, which scripts/bootstrap
// installs) scrapes a MetricsServer (prometheus-cpp's Exposer) on loopback
// holding the worker's pass-duration family from the catalogue; the test then
// asks Prometheus' HTTP API for the histogram. Fails, never skips, when
// Prometheus is missing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/metric_names.h"
#include "common/metrics_http.h"
#include "common/metrics_test_util.h"
#include "tests/testing/process.h"

namespace nightshift::metrics {
namespace {

using nlohmann::json;
using testutil::Process;

// A port free right now (the kernel's choice for a socket bound to port 0).
int FreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

// The `data.result` of an instant query, or an empty array while Prometheus
// is not answering yet.
json Query(int port, const std::string& promql) {
  try {
    const testing::HttpResponse r = testing::HttpGet(port, "/api/v1/query?query=" + promql);
    if (r.result() != boost::beast::http::status::ok) return json::array();
    return json::parse(r.body())["data"]["result"];
  } catch (const boost::system::system_error&) {
    return json::array();
  }
}

TEST(PrometheusScrapeTest, PrometheusIngestsThePassDurationHistogram) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Histogram& passes =
      CatalogueFamily<prometheus::Histogram>(*registry, names::kPassDurationSeconds)
          .With({{"model", "llama-3-8b"}, {"worker", "gpu-1"}, {"mode", "streaming"}});
  for (double seconds : {0.7, 1.3, 2.2, 40.0}) passes.Observe(seconds);
  auto server = MetricsServer::Start({"127.0.0.1", 0, {}}, registry);
  ASSERT_TRUE(server.ok()) << server.status().message();

  char dir_template[] = "/tmp/ns_prometheus_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: nightshift-worker\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << server.value()->port() << "']\n";
  const int port = FreePort();
  std::unique_ptr<Process> prometheus =
      Process::Start({"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
                      "--storage.tsdb.path=" + dir + "/data",
                      "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                     dir + "/prometheus.log");
  ASSERT_NE(prometheus, nullptr) << "cannot start /usr/bin/prometheus; run scripts/bootstrap";

  json buckets = json::array();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (buckets.empty() && std::chrono::steady_clock::now() < deadline && prometheus->running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    buckets = Query(port, "nightshift_pass_duration_seconds_bucket");
  }
  ASSERT_FALSE(buckets.empty()) << "Prometheus never returned the histogram. Its log:\n"
                                << prometheus->Log();
  const MetricDef& def = *FindMetric(names::kPassDurationSeconds);
  EXPECT_EQ(buckets.size(), def.buckets.size() + 1);  // + le="+Inf"
  std::map<std::string, std::string> by_le;
  for (const json& series : buckets) {
    EXPECT_EQ(series["metric"]["model"], "llama-3-8b");
    EXPECT_EQ(series["metric"]["mode"], "streaming");
    by_le[series["metric"]["le"]] = series["value"][1];
  }
  EXPECT_EQ(by_le["1"], "1");     // 0.7
  EXPECT_EQ(by_le["2.5"], "3");   // 0.7, 1.3, 2.2
  EXPECT_EQ(by_le["+Inf"], "4");  // and 40
  const json count = Query(port, "nightshift_pass_duration_seconds_count");
  ASSERT_EQ(count.size(), 1u);
  EXPECT_EQ(count[0]["value"][1], "4");
  const json up = Query(port, "up");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0]["value"][1], "1");

  prometheus->Signal(SIGTERM);
  prometheus->Wait(10);
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace nightshift::metrics
