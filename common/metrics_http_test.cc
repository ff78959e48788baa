// MetricsServer: prometheus-cpp's Exposer with our scrape-time refresh hook,
// our address and port rules and our errors. (The exposition format itself is
// prometheus-cpp's; promtool checks it in metric_names_test.cc and tests/metrics/.)
#include "common/metrics_http.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/metrics_test_util.h"

namespace nightshift::metrics {
namespace {

namespace http = boost::beast::http;
using testing::HttpGet;

std::shared_ptr<prometheus::Registry> SampleRegistry() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("x_requests_total")
      .Help("Requests.")
      .Register(*registry)
      .Add({})
      .Increment(7);
  return registry;
}

std::unique_ptr<MetricsServer> StartOnLoopback(std::shared_ptr<prometheus::Registry> registry,
                                               std::function<void()> hook = {}) {
  StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start({"127.0.0.1", 0, std::move(hook)}, std::move(registry));
  EXPECT_TRUE(server.ok()) << server.status().message();
  return server.ok() ? std::move(server).value() : nullptr;
}

TEST(MetricsServerTest, ServesTheRegistryOnMetrics) {
  auto registry = SampleRegistry();
  auto server = StartOnLoopback(registry);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  const testing::HttpResponse r = HttpGet(server->port(), "/metrics");
  EXPECT_EQ(r.result(), http::status::ok);
  EXPECT_EQ(r[http::field::content_type].substr(0, 10), "text/plain");
  EXPECT_NE(r.body().find("# TYPE x_requests_total counter\n"), std::string::npos) << r.body();
  EXPECT_NE(r.body().find("x_requests_total 7\n"), std::string::npos) << r.body();
  // Later updates show in the next scrape.
  prometheus::BuildCounter().Name("x_requests_total").Register(*registry).Add({}).Increment();
  EXPECT_NE(HttpGet(server->port(), "/metrics").body().find("x_requests_total 8\n"),
            std::string::npos);
  EXPECT_EQ(HttpGet(server->port(), "/").result(), http::status::not_found);
}

TEST(MetricsServerTest, RefreshesAtEachScrapeAndNeverInBetween) {
  auto registry = SampleRegistry();
  prometheus::Gauge& refreshed =
      prometheus::BuildGauge().Name("x_refreshed").Help("Scrapes.").Register(*registry).Add({});
  std::atomic<int> calls{0};
  auto server = StartOnLoopback(registry, [&] { refreshed.Set(++calls); });
  ASSERT_NE(server, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(calls.load(), 0) << "the hook ran without a scrape";
  // Each scrape sees the value its own refresh set.
  EXPECT_NE(HttpGet(server->port(), "/metrics").body().find("x_refreshed 1\n"), std::string::npos);
  EXPECT_NE(HttpGet(server->port(), "/metrics").body().find("x_refreshed 2\n"), std::string::npos);
  HttpGet(server->port(), "/nothing");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(calls.load(), 2);
}

TEST(MetricsServerTest, ConcurrentScrapesTakeTurnsInTheHook) {
  auto registry = SampleRegistry();
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> calls{0};
  auto server = StartOnLoopback(registry, [&] {
    if (inside.fetch_add(1) != 0) ++overlaps;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    inside.fetch_sub(1);
    ++calls;
  });
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 4; ++i) {
    scrapers.emplace_back([&] {
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(HttpGet(server->port(), "/metrics").result(), http::status::ok);
      }
    });
  }
  for (std::thread& t : scrapers) t.join();
  EXPECT_EQ(calls.load(), 12);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(MetricsServerTest, RefreshingCollectableRunsTheHookThenCollects) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family =
      prometheus::BuildGauge().Name("x_late").Help("Added by the hook.").Register(*registry);
  RefreshingCollectable collectable(registry, [&] { family.Add({}).Set(5); });
  const std::vector<prometheus::MetricFamily> families = collectable.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "x_late");
  ASSERT_EQ(families[0].metric.size(), 1u);
  EXPECT_EQ(families[0].metric[0].gauge.value, 5);
  EXPECT_EQ(RefreshingCollectable(registry, {}).Collect().size(), 1u);
}

TEST(MetricsServerTest, ReportsBadAddressesAndTakenPorts) {
  auto registry = SampleRegistry();
  auto bad = MetricsServer::Start({"not-an-ip", 0, {}}, registry);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({"127.0.0.1", 70000, {}}, registry).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({"127.0.0.1", -1, {}}, registry).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({"127.0.0.1", 0, {}}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  auto first = StartOnLoopback(registry);
  ASSERT_NE(first, nullptr);
  auto second = MetricsServer::Start({"127.0.0.1", first->port(), {}}, registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string(first->port())), std::string::npos);
}

// More static TLS than civetweb's 100 KiB thread stacks hold, as a process
// that links libtorch has (OpenBLAS, glog): the Exposer must start anyway.
thread_local char big_static_tls[256 << 10];

TEST(MetricsServerTest, StartsWhenTheProcessHasMoreStaticTlsThanCivetwebsStacks) {
  big_static_tls[0] = 1;
  auto server = StartOnLoopback(SampleRegistry());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(HttpGet(server->port(), "/metrics").result(), http::status::ok);
  // Callers other than civetweb get the stack size they ask for.
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 1 << 20), 0);
  size_t size = 0;
  ASSERT_EQ(pthread_attr_getstacksize(&attr, &size), 0);
  EXPECT_EQ(size, size_t{1} << 20);
  pthread_attr_destroy(&attr);
}

TEST(MetricsServerTest, RefusesIpv6BecauseCivetwebHasNoIpv6) {
  auto server = MetricsServer::Start({"::1", 0, {}}, SampleRegistry());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("IPv6"), std::string::npos) << server.status().message();
}

// civetweb notices a stop within its 2 s poll quantum, idle clients or not.
TEST(MetricsServerTest, StopsWithAnIdleClientConnected) {
  auto server = StartOnLoopback(SampleRegistry());
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket idle(io);
  idle.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THROW(HttpGet(port, "/metrics"), boost::system::system_error);
}

}  // namespace
}  // namespace nightshift::metrics
