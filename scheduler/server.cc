#include "scheduler/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/metrics_http.h"
#include "scheduler/disk_full.h"
#include "scheduler/http/api_store.h"
#include "scheduler/http/batch_api.h"
#include "scheduler/http/http_server.h"
#include "scheduler/metrics.h"
#include "scheduler/scheduler.h"
#include "scheduler/service.h"
#include "scheduler/store.h"

namespace nightshift::scheduler {

namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Splits "host:port" ("[::1]:50051" for IPv6); InvalidArgument otherwise.
Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return InvalidArgument("listen address '" + address + "' is not HOST:PORT");
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (!std::all_of(port->begin(), port->end(), ::isdigit)) {
    return InvalidArgument("listen address '" + address + "' has a malformed port");
  }
  return Status::Ok();
}

// Sets the gauges a scrape shows from the database and the live state; the
// metrics server runs it at each scrape, before collecting the registry. A
// count the database cannot give leaves the last one (and says why).
void RefreshGauges(Scheduler& scheduler, JobCounter& counter, SchedulerMetrics& metrics) {
  auto counts = counter.Count();
  if (counts.ok()) {
    metrics.SetJobCounts(*counts);
  } else {
    std::cerr << "nightshift-scheduler: metrics: " << counts.status().message() << std::endl;
  }
  const LiveGauges gauges = scheduler.Gauges();
  metrics.SetWorkersAttached(gauges.workers_attached);
  metrics.SetEtas(gauges.eta_seconds);
  metrics.SetDiskFullTotal(DiskFullCount());
}

}  // namespace

const char* SchedulerVersion() { return "0.1.0"; }

std::pair<double, double> KeepaliveSeconds(const ServerConfig& config) {
  // A ping every quarter of the lease (0.5 to 10 s) and 10 s for its
  // answer: a dead link is found in 20 s with the default 60 s lease. The
  // timeout is not shorter because a client with no call in flight answers
  // pings only when gRPC's backup poller reads its connection (every 5 s by
  // default); a shorter one drops idle clients (their next call then fails).
  const double interval = std::clamp(config.lease_seconds / 4, 0.5, 10.0);
  return {config.keepalive_seconds > 0 ? config.keepalive_seconds : interval,
          config.keepalive_timeout_seconds > 0 ? config.keepalive_timeout_seconds : 10.0};
}

bool IsLoopback(const std::string& address) {
  std::string host, port;
  if (!SplitAddress(address, &host, &port).ok()) return false;
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

StatusOr<std::string> BindAddress(const ServerConfig& config, std::string* note) {
  std::string host, port;
  NS_RETURN_IF_ERROR(SplitAddress(config.listen, &host, &port));
  if (config.client_token.empty() != config.worker_token.empty()) {
    return InvalidArgument("--client-token and --worker-token go together: set both or neither");
  }
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key go together: set both or neither");
  }
  if (config.lease_seconds <= 0 || config.heartbeat_seconds <= 0) {
    return InvalidArgument("--lease-seconds and --heartbeat-seconds must be positive");
  }
  if (config.heartbeat_seconds >= config.lease_seconds) {
    return InvalidArgument("--heartbeat-seconds must be shorter than --lease-seconds");
  }
  if (config.max_attempts < 1) return InvalidArgument("--max-attempts must be at least 1");
  if (config.min_shared_prefix_tokens < 1) {
    return InvalidArgument("--min-shared-prefix-tokens must be at least 1");
  }
  if (config.keepalive_seconds < 0 || config.keepalive_timeout_seconds < 0 ||
      (config.keepalive_seconds > 0 && config.keepalive_seconds < 1e-3 * kMinRecvPingIntervalMs)) {
    return InvalidArgument(
        "--keepalive-seconds and --keepalive-timeout-seconds must be 0 (a quarter of the lease) or "
        "positive, the interval at least 0.5");
  }
  if (config.metrics_port < -1 || config.metrics_port > 65535) {
    return InvalidArgument("--metrics-port must be a port (0 picks a free one), or -1 for none");
  }
  if (config.client_token.empty() && !IsLoopback(config.listen)) {
    *note = "no tokens configured: listening on loopback 127.0.0.1:" + port + " only, not on " +
            config.listen + " (set --client-token and --worker-token to serve other hosts)";
    return "127.0.0.1:" + port;
  }
  if (config.client_token.empty()) {
    *note = "no tokens configured: anyone on this host can submit and attach";
  }
  return config.listen;
}

StatusOr<HttpBind> HttpBindAddress(const ServerConfig& config, std::string* note) {
  std::string host, port;
  NS_RETURN_IF_ERROR(SplitAddress(config.http_listen, &host, &port).Prefixed("--http-listen"));
  HttpBind bind;
  bind.port = std::atoi(port.c_str());
  if (port.size() > 5 || bind.port > 65535) {
    return InvalidArgument("--http-listen port " + port + " is not a port");
  }
  if (config.http_max_upload_bytes < 1 || config.http_max_batch_requests < 1) {
    return InvalidArgument(
        "--http-max-upload-bytes and --http-max-batch-requests must be positive");
  }
  if (!(config.http_timeout_seconds >= 0.1)) {
    return InvalidArgument("--http-timeout-seconds must be at least 0.1");
  }
  bind.host = host.empty() ? "0.0.0.0" : host == "localhost" ? "127.0.0.1" : host;
  const bool loopback = bind.host == "::1" || bind.host.rfind("127.", 0) == 0;
  if (config.client_token.empty() && !loopback) {
    *note = "no tokens configured: the Batch API listens on loopback 127.0.0.1:" + port +
            " only, not on " + config.http_listen +
            " (set --client-token and --worker-token to serve other hosts)";
    bind.host = "127.0.0.1";
  }
  return bind;
}

Status RunServer(const ServerConfig& config) {
  std::string note;
  NS_ASSIGN_OR_RETURN(std::string address, BindAddress(config, &note));
  if (!note.empty()) std::cerr << "nightshift-scheduler: " << note << std::endl;

  // Signals go to the thread that waits for them, not to gRPC's threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  NS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(config.db_path, SystemClock()));
  const bool serve_metrics = config.metrics_port >= 0;
  auto registry = std::make_shared<prometheus::Registry>();
  SchedulerMetrics scheduler_metrics(*registry);
  SchedulerOptions options;
  options.metrics = serve_metrics ? &scheduler_metrics : nullptr;
  options.lease_ms = static_cast<int64_t>(config.lease_seconds * 1000);
  options.heartbeat_ms = static_cast<int64_t>(config.heartbeat_seconds * 1000);
  options.max_attempts = static_cast<int32_t>(config.max_attempts);
  options.allow_unknown_models = config.allow_unknown_models;
  options.min_shared_prefix_tokens = config.min_shared_prefix_tokens;
  options.tokenizer_cache_dir =
      config.tokenizer_cache.empty() ? config.db_path + ".tokenizers" : config.tokenizer_cache;
  Scheduler scheduler(store.get(), SystemClock(), options);
  NS_RETURN_IF_ERROR(scheduler.Start());

  std::unique_ptr<JobCounter> counter;
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (serve_metrics) {
    NS_ASSIGN_OR_RETURN(counter, JobCounter::Open(config.db_path));
    metrics::MetricsServerOptions metrics_options;
    metrics_options.address = IsLoopback(address) ? "127.0.0.1" : "0.0.0.0";
    metrics_options.port = static_cast<int>(config.metrics_port);
    metrics_options.before_scrape = [&] { RefreshGauges(scheduler, *counter, scheduler_metrics); };
    NS_ASSIGN_OR_RETURN(metrics_server, metrics::MetricsServer::Start(metrics_options, registry));
    std::cerr << "nightshift-scheduler: metrics listening on " << metrics_options.address << ":"
              << metrics_server->port() << std::endl;
  }

  // The OpenAI Batch API over HTTP, when asked for.
  std::unique_ptr<http::ApiStore> api_store;
  std::unique_ptr<http::BatchApi> batch_api;
  std::unique_ptr<http::HttpServer> http_server;
  std::string http_host;
  if (!config.http_listen.empty()) {
    std::string http_note;
    NS_ASSIGN_OR_RETURN(HttpBind bind, HttpBindAddress(config, &http_note));
    if (!http_note.empty()) std::cerr << "nightshift-scheduler: " << http_note << std::endl;
    const std::string files_dir =
        config.http_files_dir.empty() ? config.db_path + ".files" : config.http_files_dir;
    NS_ASSIGN_OR_RETURN(api_store, http::ApiStore::Open(config.db_path, files_dir, SystemClock()));
    http::BatchApiOptions api_options;
    api_options.client_token = config.client_token;
    api_options.worker_token = config.worker_token;
    api_options.max_upload_bytes = config.http_max_upload_bytes;
    api_options.max_batch_requests = config.http_max_batch_requests;
    batch_api = std::make_unique<http::BatchApi>(&scheduler, store.get(), api_store.get(),
                                                 SystemClock(), api_options);
    http::HttpServerOptions http_options;
    http_options.host = bind.host;
    http_host = bind.host.find(':') == std::string::npos ? bind.host : "[" + bind.host + "]";
    http_options.port = bind.port;
    http_options.tls_cert = config.tls_cert;
    http_options.tls_key = config.tls_key;
    http_options.idle_timeout_ms = static_cast<int64_t>(config.http_timeout_seconds * 1000);
    http_options.header_timeout_ms = http_options.idle_timeout_ms;
    SchedulerMetrics* metrics = options.metrics;
    http_options.on_timeout = [metrics](const std::string& peer, const std::string& why) {
      std::cerr << "nightshift-scheduler: http: closed the connection from " << peer << ": " << why
                << std::endl;
      if (metrics != nullptr) metrics->HttpClientTimedOut();
    };
    http::BatchApi* api = batch_api.get();
    NS_ASSIGN_OR_RETURN(http_server,
                        http::HttpServer::Start(http_options, [api](const http::HttpRequest& r) {
                          return api->Handle(r);
                        }));
    batch_api->Start();
  }

  ServiceOptions service_options;
  service_options.client_token = config.client_token;
  service_options.worker_token = config.worker_token;
  service_options.version = SchedulerVersion();
  service_options.schema_version = store->schema_version();
  service_options.metrics = options.metrics;
  Service service(&scheduler, service_options);

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!config.tls_cert.empty()) {
    NS_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.tls_cert));
    NS_ASSIGN_OR_RETURN(std::string key, ReadFile(config.tls_key));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Keepalive: a worker whose link went silent is detached (its stream
  // ends) once a ping goes unanswered, before its lease expires, so the
  // scheduler leases it nothing more on a dead link.
  const auto [keepalive, keepalive_timeout] = KeepaliveSeconds(config);
  const int keepalive_ms = static_cast<int>(keepalive * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(keepalive_timeout * 1000));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, keepalive_ms);
  // Workers ping as often as every second (their --keepalive-seconds).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kMinRecvPingIntervalMs);
  if (keepalive + keepalive_timeout >= config.lease_seconds) {
    std::cerr << "nightshift-scheduler: keepalive " << keepalive << " s + timeout "
              << keepalive_timeout << " s is not shorter than the lease (" << config.lease_seconds
              << " s): a silent worker link is found only after its leases expire" << std::endl;
  }
  int port = 0;
  builder.AddListeningPort(address, credentials, &port);
  builder.RegisterService(service.job_service());
  builder.RegisterService(service.worker_service());
  builder.SetMaxReceiveMessageSize(128 << 20);
  builder.SetMaxSendMessageSize(128 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return Unavailable("cannot listen on " + address);
  server->GetHealthCheckService()->SetServingStatus(true);
  const std::string bound = address.substr(0, address.rfind(':') + 1) + std::to_string(port);
  std::cout << "nightshift-scheduler " << SchedulerVersion() << " listening on " << bound
            << " (database " << config.db_path << ", schema " << store->schema_version() << ")"
            << std::endl;
  if (http_server != nullptr) {
    std::cout << "http listening on " << http_host << ":" << http_server->port()
              << (config.tls_cert.empty() ? "" : " (TLS)") << std::endl;
  }

  // Leases expire on a timer finer than the lease.
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  const auto tick = std::chrono::milliseconds(std::clamp<int64_t>(options.lease_ms / 10, 50, 1000));
  std::thread ticker([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, tick, [&] { return stopping; })) {
      lock.unlock();
      scheduler.Tick();
      lock.lock();
    }
  });

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cerr << "nightshift-scheduler: signal " << signal_number << ", shutting down" << std::endl;
  if (http_server != nullptr) http_server->Stop();
  if (batch_api != nullptr) batch_api->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  ticker.join();
  return Status::Ok();
}

}  // namespace nightshift::scheduler
