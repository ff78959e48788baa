// Talking to a scheduler from a client or a worker: a channel with the
// message sizes the API needs, TLS when asked, the bearer token on each call,
// and gRPC statuses turned back into Status values. Used by the CLI, the
// worker and the tests.
//
// Thread-safety: free functions; the channel is thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace nightshift::scheduler {

inline constexpr int kDefaultSchedulerPort = 50051;

struct ConnectOptions {
  std::string address = "localhost:50051";
  std::string token;  // bearer token; "" = none
  bool tls = false;
  std::string tls_ca_file;  // PEM roots for TLS; "" = the system's
};

// A channel to the scheduler (connects lazily). NotFound when the CA file
// cannot be read.
StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ConnectOptions& options);

// Adds `authorization: Bearer TOKEN` to a call (nothing for an empty token).
void AddToken(grpc::ClientContext* context, const std::string& token);

// A gRPC status as a Status ("UNAVAILABLE" becomes kUnavailable, ...); the
// message is the server's.
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace nightshift::scheduler
