// The Prometheus scrape endpoint: prometheus-cpp's Exposer (civetweb) serving
// a prometheus::Registry on GET /metrics, with an optional hook that runs at
// each scrape, before the registry is collected, for values computed on
// demand (the scheduler's jobs by state, ETAs and attached workers). Nothing
// polls: a value the hook sets is as fresh as the scrape that asked for it.
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   NS_ASSIGN_OR_RETURN(std::unique_ptr<metrics::MetricsServer> server,
//                       metrics::MetricsServer::Start({"0.0.0.0", 9090, refresh}, registry));
//   ... server->port() ...
//   server.reset();  // stops serving and joins civetweb's threads
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace nightshift::metrics {

// What the Exposer collects at each scrape in place of the registry itself:
// runs `refresh` (if any), then returns the registry's families. Concurrent
// scrapes take turns, so one scrape's refresh and collection are not
// interleaved with another's.
class RefreshingCollectable : public prometheus::Collectable {
 public:
  RefreshingCollectable(std::shared_ptr<prometheus::Registry> registry,
                        std::function<void()> refresh);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::function<void()> refresh_;
  mutable std::mutex mu_;
};

struct MetricsServerOptions {
  std::string address = "0.0.0.0";  // an IPv4 literal (Debian's civetweb has no IPv6)
  int port = 0;                     // 0 picks a free port; see MetricsServer::port()
  // Called on a server thread at each scrape of /metrics, before the registry
  // is collected, e.g. to refresh gauges computed from a store. Must be
  // thread-safe with respect to the caller's other threads (never with itself:
  // scrapes take turns).
  std::function<void()> before_scrape;
};

class MetricsServer {
 public:
  // Binds and starts serving /metrics in prometheus-cpp's text format on
  // civetweb's threads. InvalidArgument for an address that is not an IPv4
  // literal, a port outside 0..65535 or a null registry; Unavailable if the address cannot be
  // bound (e.g. the port is taken). The server shares ownership of `registry`.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(
      const MetricsServerOptions& options, std::shared_ptr<prometheus::Registry> registry);

  // Stops serving and joins the server's threads (civetweb notices the stop
  // within its poll quantum, up to about 2 s).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }

 private:
  MetricsServer(std::shared_ptr<RefreshingCollectable> collectable,
                std::unique_ptr<prometheus::Exposer> exposer, int port);

  // The Exposer holds only a weak_ptr to what it collects; it is declared
  // last so that it stops before the collectable goes.
  std::shared_ptr<RefreshingCollectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace nightshift::metrics
