// The Prometheus scrape endpoint: GET /metrics over HTTP/1.1 (Boost.Beast),
// serving a Registry in the text format 0.0.4 from a thread of its own.
//
//   NS_ASSIGN_OR_RETURN(std::unique_ptr<metrics::MetricsServer> server,
//                       metrics::MetricsServer::Start({"0.0.0.0", 9090}, registry));
//   ... server->port() ...
//   server.reset();  // stops serving and joins the thread
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace nightshift::metrics {

struct MetricsServerOptions {
  std::string address = "0.0.0.0";  // an IPv4 or IPv6 literal, or "localhost"
  int port = 0;                     // 0 picks a free port; see MetricsServer::port()
  // Called on the server thread before each scrape serializes the registry,
  // e.g. to refresh gauges computed from a store. Must be thread-safe with
  // respect to the caller's other threads.
  std::function<void()> before_scrape;
};

class MetricsServer {
 public:
  // Binds and starts serving on a new thread. GET or HEAD on /metrics (any
  // query string) answers 200 with TextSerializer::kContentType; another path
  // 404; another method 405. Connections are kept alive as HTTP/1.1 asks and
  // closed after 30 s idle. InvalidArgument for a bad address or port;
  // Unavailable if the address cannot be bound (e.g. the port is taken). The
  // server shares ownership of `registry`.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options,
                                                        std::shared_ptr<const Registry> registry);

  // Stops accepting, closes open connections and joins the thread.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const;

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nightshift::metrics
