#include "proto/grpc_status.h"

#include <gtest/gtest.h>

namespace nightshift::api {
namespace {

TEST(GrpcStatusTest, EveryStatusCodeHasItsGrpcCodeAndBack) {
  const std::pair<Status, grpc::StatusCode> cases[] = {
      {Status::Ok(), grpc::StatusCode::OK},
      {InvalidArgument("x"), grpc::StatusCode::INVALID_ARGUMENT},
      {NotFound("x"), grpc::StatusCode::NOT_FOUND},
      {AlreadyExists("x"), grpc::StatusCode::ALREADY_EXISTS},
      {FailedPrecondition("x"), grpc::StatusCode::FAILED_PRECONDITION},
      {OutOfRange("x"), grpc::StatusCode::OUT_OF_RANGE},
      {Unimplemented("x"), grpc::StatusCode::UNIMPLEMENTED},
      {ResourceExhausted("x"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {DataLoss("x"), grpc::StatusCode::DATA_LOSS},
      {Unavailable("x"), grpc::StatusCode::UNAVAILABLE},
      {Cancelled("x"), grpc::StatusCode::CANCELLED},
      {Internal("x"), grpc::StatusCode::INTERNAL},
  };
  for (const auto& [status, code] : cases) {
    grpc::Status mapped = ToGrpcStatus(status);
    EXPECT_EQ(mapped.error_code(), code) << status.ToString();
    if (!status.ok()) {
      EXPECT_EQ(mapped.error_message(), "x");
    }
    const Status back = FromGrpcStatus(mapped);
    EXPECT_EQ(back.code(), status.code()) << status.ToString();
    EXPECT_EQ(back.message(), status.message());
  }
}

TEST(GrpcStatusTest, CodesWithoutATwinFoldIntoTheNearest) {
  const std::pair<grpc::StatusCode, StatusCode> cases[] = {
      {grpc::StatusCode::PERMISSION_DENIED, StatusCode::kFailedPrecondition},
      {grpc::StatusCode::UNAUTHENTICATED, StatusCode::kFailedPrecondition},
      {grpc::StatusCode::ABORTED, StatusCode::kFailedPrecondition},
      {grpc::StatusCode::DEADLINE_EXCEEDED, StatusCode::kUnavailable},
      {grpc::StatusCode::UNKNOWN, StatusCode::kInternal},
  };
  for (const auto& [code, ours] : cases) {
    const Status status = FromGrpcStatus(grpc::Status(code, "why"));
    EXPECT_EQ(status.code(), ours) << static_cast<int>(code);
    EXPECT_EQ(status.message(), "why");
  }
}

}  // namespace
}  // namespace nightshift::api
