// The one mapping between nightshift's Status codes (common/status.h) and
// gRPC's, both directions: servers answer with ToGrpcStatus, clients read
// answers with FromGrpcStatus. Pure; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace nightshift::api {

// The longest message ToGrpcStatus sends. A status message travels in gRPC's
// metadata (percent-encoded, so up to 3 bytes a byte), which clients cap at a
// few KiB ("received initial metadata size exceeds limit"); anything a caller
// needs in full goes in a response body instead.
inline constexpr size_t kMaxGrpcMessageBytes = 2048;

// Our code as gRPC's; the message is kept, cut at kMaxGrpcMessageBytes (at a
// UTF-8 boundary, "... (cut; N bytes in all)" appended within the limit).
grpc::Status ToGrpcStatus(const Status& status);

// `message` as ToGrpcStatus sends it.
std::string BoundedGrpcMessage(const std::string& message);

// A gRPC status as a Status ("UNAVAILABLE" becomes kUnavailable, ...); the
// message is the server's. Codes we have no twin for fold into the nearest
// (PERMISSION_DENIED, UNAUTHENTICATED and ABORTED into kFailedPrecondition,
// DEADLINE_EXCEEDED into kUnavailable, the rest into kInternal).
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace nightshift::api
