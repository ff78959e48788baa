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

TEST(GrpcStatusTest, ALongMessageIsCutToFitTheMetadataAtACharacterBoundary) {
  const std::string fits(kMaxGrpcMessageBytes, 'a');
  EXPECT_EQ(ToGrpcStatus(InvalidArgument(fits)).error_message(), fits);
  // 300 lines naming an unknown model: ~60 KB, far over gRPC's metadata limit.
  std::string long_message;
  while (long_message.size() < 60'000) long_message += "job 1: model 'ünknown' is served by none; ";
  const grpc::Status mapped = ToGrpcStatus(InvalidArgument(long_message));
  EXPECT_EQ(mapped.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string& sent = mapped.error_message();
  EXPECT_LE(sent.size(), kMaxGrpcMessageBytes);
  EXPECT_EQ(sent.rfind(long_message.substr(0, 100), 0), 0u) << sent;
  EXPECT_NE(sent.find("(cut; " + std::to_string(long_message.size()) + " bytes in all)"),
            std::string::npos)
      << sent.substr(sent.size() - 80);
  // No UTF-8 sequence is split: every lead byte has all its continuation bytes.
  const std::string head = sent.substr(0, sent.find("... (cut;"));
  for (size_t i = 0; i < head.size();) {
    const unsigned char c = static_cast<unsigned char>(head[i]);
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    ASSERT_LE(i + n, head.size()) << "a character is cut at byte " << i;
    i += n;
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
