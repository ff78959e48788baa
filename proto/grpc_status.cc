#include "proto/grpc_status.h"

namespace nightshift::api {

std::string BoundedGrpcMessage(const std::string& message) {
  if (message.size() <= kMaxGrpcMessageBytes) return message;
  const std::string tail = "... (cut; " + std::to_string(message.size()) + " bytes in all)";
  size_t cut = kMaxGrpcMessageBytes - tail.size();
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return message.substr(0, cut) + tail;
}

grpc::Status ToGrpcStatus(const Status& status) {
  using grpc::StatusCode;
  StatusCode code = StatusCode::UNKNOWN;
  switch (status.code()) {
    case nightshift::StatusCode::kOk:
      return grpc::Status::OK;
    case nightshift::StatusCode::kInvalidArgument:
      code = StatusCode::INVALID_ARGUMENT;
      break;
    case nightshift::StatusCode::kNotFound:
      code = StatusCode::NOT_FOUND;
      break;
    case nightshift::StatusCode::kAlreadyExists:
      code = StatusCode::ALREADY_EXISTS;
      break;
    case nightshift::StatusCode::kFailedPrecondition:
      code = StatusCode::FAILED_PRECONDITION;
      break;
    case nightshift::StatusCode::kOutOfRange:
      code = StatusCode::OUT_OF_RANGE;
      break;
    case nightshift::StatusCode::kUnimplemented:
      code = StatusCode::UNIMPLEMENTED;
      break;
    case nightshift::StatusCode::kResourceExhausted:
      code = StatusCode::RESOURCE_EXHAUSTED;
      break;
    case nightshift::StatusCode::kDataLoss:
      code = StatusCode::DATA_LOSS;
      break;
    case nightshift::StatusCode::kUnavailable:
      code = StatusCode::UNAVAILABLE;
      break;
    case nightshift::StatusCode::kCancelled:
      code = StatusCode::CANCELLED;
      break;
    case nightshift::StatusCode::kInternal:
      code = StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, BoundedGrpcMessage(status.message()));
}

Status FromGrpcStatus(const grpc::Status& status) {
  const std::string& m = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return Status::Ok();
    case grpc::StatusCode::INVALID_ARGUMENT:
      return InvalidArgument(m);
    case grpc::StatusCode::NOT_FOUND:
      return NotFound(m);
    case grpc::StatusCode::ALREADY_EXISTS:
      return AlreadyExists(m);
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return FailedPrecondition(m);
    case grpc::StatusCode::OUT_OF_RANGE:
      return OutOfRange(m);
    case grpc::StatusCode::UNIMPLEMENTED:
      return Unimplemented(m);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return ResourceExhausted(m);
    case grpc::StatusCode::DATA_LOSS:
      return DataLoss(m);
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Unavailable(m);
    case grpc::StatusCode::CANCELLED:
      return Cancelled(m);
    default:
      return Internal(m);
  }
}

}  // namespace nightshift::api
