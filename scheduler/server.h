// Runs the scheduler process: opens the store, starts the domain core, serves
// JobService and WorkerService (plus grpc.health.v1 and server reflection) on
// one port, expires leases on a timer, and stops on SIGINT/SIGTERM.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"
#include "scheduler/policy.h"

namespace nightshift::scheduler {

struct ServerConfig {
  std::string listen = "localhost:50051";  // host:port; port 0 picks a free one
  std::string db_path = "nightshift.db";
  std::string tokenizer_cache;  // "" = <db_path>.tokenizers
  std::string client_token;
  std::string worker_token;
  std::string tls_cert;  // PEM files; both or neither
  std::string tls_key;
  double lease_seconds = 60;
  double heartbeat_seconds = 10;
  int64_t max_attempts = 3;
  // Prometheus /metrics on this port (0 picks a free one; -1 = not served),
  // on 127.0.0.1 when gRPC listens on loopback, else on 0.0.0.0.
  int64_t metrics_port = -1;
  // The OpenAI Batch API over HTTP (scheduler/http/) on this host:port
  // ("" = not served; port 0 picks one), with TLS when tls_cert is set and,
  // like gRPC, on loopback only without tokens.
  std::string http_listen;
  std::string http_files_dir;                   // "" = <db_path>.files
  int64_t http_max_upload_bytes = 200'000'000;  // OpenAI's 200 MB
  int64_t http_max_batch_requests = 50'000;     // OpenAI's limit
  // An HTTP client that sends or takes no byte for this long (a stalled
  // upload, an answer it never reads), or whose request header takes longer
  // (a drip), is disconnected, logged and counted.
  double http_timeout_seconds = 60;
  // Take jobs for models no worker has advertised yet (queues filled before
  // their workers start); by default such a job is a line error.
  bool allow_unknown_models = false;
  // Queued jobs whose prompt ids share a prefix at least this long ride in
  // one batch, the prefix counted once against the pass-token budget
  // (Snapshot::min_shared_prefix_tokens).
  int64_t min_shared_prefix_tokens = kDefaultMinSharedPrefixTokens;
  // HTTP/2 keepalive towards workers and clients: a ping every
  // keepalive_seconds, the connection closed when one is not answered
  // within keepalive_timeout_seconds, so a worker whose link went silent
  // (no FIN, no RST) is detached well within its lease. 0 = the defaults
  // of KeepaliveSeconds.
  double keepalive_seconds = 0;
  double keepalive_timeout_seconds = 0;
};

// Pings from workers and clients are accepted this often (a worker's
// --keepalive-seconds must be at least twice this).
inline constexpr int kMinRecvPingIntervalMs = 500;

// The keepalive interval and timeout the server uses: the configured ones,
// or for each left at 0 a quarter of the lease, 0.5 to 10 s (interval), and
// 10 s (timeout; shorter than gRPC's 5 s backup poll of an idle client's
// connection, idle clients would be dropped).
std::pair<double, double> KeepaliveSeconds(const ServerConfig& config);

// The scheduler's version string.
const char* SchedulerVersion();

// True for localhost, 127.0.0.0/8 and ::1 hosts of a "host:port" address.
bool IsLoopback(const std::string& address);

// Checks the configuration and returns the address to bind: without tokens a
// non-loopback host is replaced by 127.0.0.1 (`note` says so). Errors:
// InvalidArgument for one token without the other, one TLS file without the
// other, a malformed address, non-positive lease/heartbeat/attempts, or a
// metrics port outside -1..65535, a negative keepalive or one under a
// second.
StatusOr<std::string> BindAddress(const ServerConfig& config, std::string* note);

// The host and port the Batch API binds for config.http_listen: without
// tokens a non-loopback host becomes 127.0.0.1 (`note` says so); "localhost"
// is 127.0.0.1. InvalidArgument for a malformed address or limits below 1.
struct HttpBind {
  std::string host;
  int port = 0;
};
StatusOr<HttpBind> HttpBindAddress(const ServerConfig& config, std::string* note);

// Serves until SIGINT or SIGTERM. Prints "listening on HOST:PORT" (with the
// real port) on stdout once it accepts calls, and, with a metrics port,
// "metrics listening on HOST:PORT" on stderr before that, and with
// http_listen "http listening on HOST:PORT" on stdout after it. Returns the startup error, if
// any (the database is newer than this scheduler, the port is taken, ...).
Status RunServer(const ServerConfig& config);

}  // namespace nightshift::scheduler
