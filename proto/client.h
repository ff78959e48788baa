// Talking to a scheduler from a client or a worker: a channel with the
// message sizes the API needs, TLS when asked, and the bearer token on each
// call (answers become Status values with proto/grpc_status.h). Used by the
// CLI, the worker and the tests.
//
// Thread-safety: free functions; the channel is thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "proto/grpc_status.h"

namespace nightshift::api {

inline constexpr int kDefaultSchedulerPort = 50051;

struct ConnectOptions {
  std::string address = "localhost:50051";
  std::string token;  // bearer token; "" = none
  bool tls = false;
  std::string tls_ca_file;  // PEM roots for TLS; "" = the system's
  // HTTP/2 keepalive: ping the scheduler every `keepalive_ms` (also with no
  // call in flight) and close the connection when a ping is not answered
  // within `keepalive_timeout_ms`, so a link that goes silent (no FIN, no
  // RST) ends the calls on it instead of leaving them waiting. 0 = gRPC's
  // default (no keepalive pings).
  int keepalive_ms = 0;
  int keepalive_timeout_ms = 0;
};

// The channel arguments of ConnectOptions' keepalive (none when keepalive_ms
// is 0): the ping interval and timeout, pings allowed without calls and
// without data frames between them (a silent link carries none).
void SetKeepalive(const ConnectOptions& options, grpc::ChannelArguments* args);

// A channel to the scheduler (connects lazily). NotFound when the CA file
// cannot be read.
StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ConnectOptions& options);

// Adds `authorization: Bearer TOKEN` to a call (nothing for an empty token).
void AddToken(grpc::ClientContext* context, const std::string& token);

}  // namespace nightshift::api
