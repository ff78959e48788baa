#include "common/metrics_http.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "common/metrics_test_util.h"

namespace nightshift::metrics {
namespace {

namespace http = boost::beast::http;
using testing::HttpGet;
using testing::HttpRequest;

std::shared_ptr<Registry> SampleRegistry() {
  auto registry = std::make_shared<Registry>();
  BuildCounter()
      .Name("x_requests_total")
      .Help("Requests.")
      .Register(*registry)
      .Add({})
      .Increment(7);
  return registry;
}

std::unique_ptr<MetricsServer> StartOnLoopback(std::shared_ptr<const Registry> registry,
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
  EXPECT_EQ(r[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r.body(), TextSerializer().Serialize(registry->Collect()));
  EXPECT_NE(r.body().find("x_requests_total 7\n"), std::string::npos);
  // Later updates show in the next scrape; a query string is ignored.
  registry->AddFamily<Counter>("x_requests_total", "Requests.").Add({}).Increment();
  EXPECT_NE(HttpGet(server->port(), "/metrics?x=1").body().find("x_requests_total 8\n"),
            std::string::npos);
}

TEST(MetricsServerTest, OtherPathsAre404AndOtherMethods405) {
  auto server = StartOnLoopback(SampleRegistry());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(HttpGet(server->port(), "/").result(), http::status::not_found);
  EXPECT_EQ(HttpGet(server->port(), "/metricsx").result(), http::status::not_found);
  EXPECT_EQ(HttpRequest(server->port(), http::verb::post, "/metrics").result(),
            http::status::method_not_allowed);
  const testing::HttpResponse head = HttpRequest(server->port(), http::verb::head, "/metrics");
  EXPECT_EQ(head.result(), http::status::ok);
  EXPECT_EQ(head[http::field::content_length],
            std::to_string(HttpGet(server->port(), "/metrics").body().size()));
}

TEST(MetricsServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = StartOnLoopback(SampleRegistry());
  ASSERT_NE(server, nullptr);
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect(
      {boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server->port())});
  boost::beast::flat_buffer buffer;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> request(http::verb::get, "/metrics", 11);
    request.keep_alive(true);
    http::write(socket, request);
    testing::HttpResponse response;
    http::read(socket, buffer, response);
    EXPECT_EQ(response.result(), http::status::ok);
    EXPECT_TRUE(response.keep_alive());
  }
}

TEST(MetricsServerTest, CallsTheHookBeforeEachScrape) {
  auto registry = SampleRegistry();
  Gauge& refreshed = registry->AddFamily<Gauge>("x_refreshed", "Scrapes.").Add({});
  std::atomic<int> calls{0};
  auto server = StartOnLoopback(registry, [&] { refreshed.Set(++calls); });
  ASSERT_NE(server, nullptr);
  HttpGet(server->port(), "/metrics");
  EXPECT_NE(HttpGet(server->port(), "/metrics").body().find("x_refreshed 2\n"), std::string::npos);
  HttpGet(server->port(), "/nothing");
  EXPECT_EQ(calls.load(), 2);
}

TEST(MetricsServerTest, ReportsBadAddressesAndTakenPorts) {
  auto registry = SampleRegistry();
  auto bad = MetricsServer::Start({"not-an-ip", 0, {}}, registry);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({"127.0.0.1", 70000, {}}, registry).status().code(),
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

TEST(MetricsServerTest, StopsPromptlyWithAnIdleClientConnected) {
  auto server = StartOnLoopback(SampleRegistry());
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket idle(io);
  idle.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  // The idle connection was closed and nothing listens any more.
  char byte;
  boost::system::error_code ec;
  idle.read_some(boost::asio::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec);
  EXPECT_THROW(HttpGet(port, "/metrics"), boost::system::system_error);
}

}  // namespace
}  // namespace nightshift::metrics
