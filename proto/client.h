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
};

// A channel to the scheduler (connects lazily). NotFound when the CA file
// cannot be read.
StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ConnectOptions& options);

// Adds `authorization: Bearer TOKEN` to a call (nothing for an empty token).
void AddToken(grpc::ClientContext* context, const std::string& token);

}  // namespace nightshift::api
