// Runs the scheduler process: opens the store, starts the domain core, serves
// JobService and WorkerService (plus grpc.health.v1 and server reflection) on
// one port, expires leases on a timer, and stops on SIGINT/SIGTERM.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

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
  // Take jobs for models no worker has advertised yet (queues filled before
  // their workers start); by default such a job is a line error.
  bool allow_unknown_models = false;
};

// The scheduler's version string.
const char* SchedulerVersion();

// True for localhost, 127.0.0.0/8 and ::1 hosts of a "host:port" address.
bool IsLoopback(const std::string& address);

// Checks the configuration and returns the address to bind: without tokens a
// non-loopback host is replaced by 127.0.0.1 (`note` says so). Errors:
// InvalidArgument for one token without the other, one TLS file without the
// other, a malformed address, non-positive lease/heartbeat/attempts, or a
// metrics port outside -1..65535.
StatusOr<std::string> BindAddress(const ServerConfig& config, std::string* note);

// Serves until SIGINT or SIGTERM. Prints "listening on HOST:PORT" (with the
// real port) on stdout once it accepts calls, and, with a metrics port,
// "metrics listening on HOST:PORT" on stderr before that. Returns the startup error, if
// any (the database is newer than this scheduler, the port is taken, ...).
Status RunServer(const ServerConfig& config);

}  // namespace nightshift::scheduler
