// The one mapping between nightshift's Status codes (common/status.h) and
// gRPC's, both directions: servers answer with ToGrpcStatus, clients read
// answers with FromGrpcStatus. Pure; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace nightshift::api {

// Our code as gRPC's; the message is kept.
grpc::Status ToGrpcStatus(const Status& status);

// A gRPC status as a Status ("UNAVAILABLE" becomes kUnavailable, ...); the
// message is the server's. Codes we have no twin for fold into the nearest
// (PERMISSION_DENIED, UNAUTHENTICATED and ABORTED into kFailedPrecondition,
// DEADLINE_EXCEEDED into kUnavailable, the rest into kInternal).
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace nightshift::api
