// nightshift-scheduler: the one process users and workers talk to.
// Every flag can also be given in a TOML config file (--config) or as an
// environment variable; the command line wins, then the file.

#include <cstdlib>
#include <iostream>

#include "common/command_line.h"
#include "common/size.h"
#include "scheduler/server.h"

namespace {

using nightshift::Status;

struct EnvFlag {
  const char* flag;
  const char* env;
};

constexpr EnvFlag kEnv[] = {
    {"listen", "NIGHTSHIFT_LISTEN"},
    {"db", "NIGHTSHIFT_DB"},
    {"tokenizer-cache", "NIGHTSHIFT_TOKENIZER_CACHE"},
    {"client-token", "NIGHTSHIFT_CLIENT_TOKEN"},
    {"worker-token", "NIGHTSHIFT_WORKER_TOKEN"},
    {"tls-cert", "NIGHTSHIFT_TLS_CERT"},
    {"tls-key", "NIGHTSHIFT_TLS_KEY"},
    {"lease-seconds", "NIGHTSHIFT_LEASE_SECONDS"},
    {"heartbeat-seconds", "NIGHTSHIFT_HEARTBEAT_SECONDS"},
    {"max-attempts", "NIGHTSHIFT_MAX_ATTEMPTS"},
    {"metrics-port", "NIGHTSHIFT_METRICS_PORT"},
    {"allow-unknown-models", "NIGHTSHIFT_ALLOW_UNKNOWN_MODELS"},
    {"http-listen", "NIGHTSHIFT_HTTP_LISTEN"},
    {"http-files-dir", "NIGHTSHIFT_HTTP_FILES_DIR"},
    {"http-max-upload-bytes", "NIGHTSHIFT_HTTP_MAX_UPLOAD_BYTES"},
    {"http-max-batch-requests", "NIGHTSHIFT_HTTP_MAX_BATCH_REQUESTS"},
    {"http-timeout-seconds", "NIGHTSHIFT_HTTP_TIMEOUT_SECONDS"},
    {"keepalive-seconds", "NIGHTSHIFT_KEEPALIVE_SECONDS"},
    {"keepalive-timeout-seconds", "NIGHTSHIFT_KEEPALIVE_TIMEOUT_SECONDS"},
    {"min-shared-prefix-tokens", "NIGHTSHIFT_MIN_SHARED_PREFIX_TOKENS"},
};

}  // namespace

int main(int argc, char** argv) {
  nightshift::scheduler::ServerConfig config;
  nightshift::CommandLine flags(
      "nightshift-scheduler [--listen HOST:PORT] [--db PATH] [--client-token T --worker-token T] "
      "[--tls-cert PEM --tls-key PEM] [--lease-seconds S] [--heartbeat-seconds S] "
      "[--max-attempts N] [--metrics-port PORT] [--allow-unknown-models] [--http-listen HOST:PORT]",
      "The nightshift scheduler: a durable SQLite job queue served over gRPC (JobService for "
      "clients, WorkerService for workers, grpc.health.v1, server reflection) and, with "
      "--http-listen, the OpenAI Batch API over HTTP. Without tokens it listens on loopback "
      "only.\n\nEvery flag can also come from the environment variable named beside it, "
      "or from --config FILE (TOML: `lease-seconds = 30`); the command line wins over the "
      "file, the file over the environment.\n\nExit codes: 0 stopped by SIGINT/SIGTERM, "
      "1 failed to start, 2 usage error.");
  flags.ConfigFile();
  flags.String("listen", &config.listen, "address to serve on (port 0 picks one)", "HOST:PORT");
  flags.String("db", &config.db_path, "SQLite database file (created if absent)", "PATH");
  flags.String("tokenizer-cache", &config.tokenizer_cache,
               "directory for cached tokenizer files (default: DB.tokenizers)", "DIR");
  flags.String("client-token", &config.client_token, "bearer token clients must present", "TOKEN");
  flags.String("worker-token", &config.worker_token, "bearer token workers must present", "TOKEN");
  flags.String("tls-cert", &config.tls_cert, "PEM certificate chain (enables TLS)", "FILE");
  flags.String("tls-key", &config.tls_key, "PEM private key for --tls-cert", "FILE");
  flags.Double("lease-seconds", &config.lease_seconds,
               "a batch's lease; heartbeats extend it, expiry requeues its jobs", "S");
  flags.Double("heartbeat-seconds", &config.heartbeat_seconds,
               "how often workers are asked to heartbeat", "S");
  flags.Int("max-attempts", &config.max_attempts,
            "lost leases (or hand-backs after a worker's checkpoint read failed) after which a "
            "job fails",
            "N");
  flags.Double("keepalive-seconds", &config.keepalive_seconds,
               "ping each worker and client connection this often, so that a link gone silent "
               "(no FIN, no RST) is found and its worker detached within a lease (default: a "
               "quarter of --lease-seconds, 0.5 to 10; at least 0.5)",
               "S");
  flags.Double("keepalive-timeout-seconds", &config.keepalive_timeout_seconds,
               "close a connection whose ping is not answered within this (default 10; under 5 "
               "a client with no call in flight may be dropped, as gRPC reads an idle "
               "connection every 5 s)",
               "S");
  flags.Int("metrics-port", &config.metrics_port,
            "serve Prometheus /metrics on this port (0 picks a free one; default -1: none); "
            "on 127.0.0.1 when --listen is loopback, else on 0.0.0.0",
            "PORT");
  // The default's reason is at kDefaultMinSharedPrefixTokens (policy.h).
  flags.Int("min-shared-prefix-tokens", &config.min_shared_prefix_tokens,
            "queued jobs of a model whose prompts begin with at least N of the same token ids "
            "ride in one batch, that prefix counted once against a pass's token budget (the "
            "worker computes it once); a shorter shared prefix, such as a chat template's own "
            "preamble, is not worth reordering the queue for (default 32)",
            "N");
  flags.Bool("allow-unknown-models", &config.allow_unknown_models,
             "take jobs for models no worker has advertised yet (for queues filled before their "
             "workers start); without it such a line is refused with the known models named");
  flags.String("http-listen", &config.http_listen,
               "serve the OpenAI Batch API (/v1/files, /v1/batches, /v1/models) over HTTP here "
               "(port 0 picks one; HTTPS with --tls-cert; loopback only without tokens; "
               "default: not served)",
               "HOST:PORT");
  flags.String("http-files-dir", &config.http_files_dir,
               "where uploaded Batch API files are kept (default: DB.files)", "DIR");
  std::string max_upload = "200000000";
  flags.String("http-max-upload-bytes", &max_upload,
               "largest file POST /v1/files takes, larger is refused with 413 (default 200000000, "
               "OpenAI's 200 MB; 512M, 1G, ... work too)",
               "SIZE");
  flags.Int("http-max-batch-requests", &config.http_max_batch_requests,
            "most requests one batch's input file may hold (default 50000, OpenAI's limit)", "N");
  flags.Double("http-timeout-seconds", &config.http_timeout_seconds,
               "disconnect an HTTP client that sends or takes no byte for this long (a stalled "
               "upload, an answer it never reads) or whose request header takes longer, so it "
               "cannot hold a connection's thread (default 60)",
               "S");
  for (const EnvFlag& e : kEnv) flags.Env(e.flag, e.env);
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (!parsed.ok()) {
    std::cerr << "nightshift-scheduler: " << parsed.message() << std::endl;
    return 2;
  }
  if (auto size = nightshift::ParseSize(max_upload); size.ok()) {
    config.http_max_upload_bytes = static_cast<int64_t>(*size);
  } else {
    std::cerr << "nightshift-scheduler: --http-max-upload-bytes: " << size.status().message()
              << std::endl;
    return 2;
  }
  if (!flags.positional().empty()) {
    std::cerr << "nightshift-scheduler: unexpected argument '" << flags.positional()[0] << "'"
              << std::endl;
    return 2;
  }
  Status status = nightshift::scheduler::RunServer(config);
  if (!status.ok()) {
    std::cerr << "nightshift-scheduler: " << status.message() << std::endl;
    return status.code() == nightshift::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
