#include "scheduler/client.h"

#include <fstream>
#include <sstream>

namespace nightshift::scheduler {

StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ConnectOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      std::ifstream in(options.tls_ca_file);
      if (!in) return NotFound("cannot read " + options.tls_ca_file);
      std::stringstream pem;
      pem << in.rdbuf();
      ssl.pem_root_certs = pem.str();
    }
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(128 << 20);
  args.SetMaxSendMessageSize(128 << 20);
  return grpc::CreateCustomChannel(options.address, credentials, args);
}

void AddToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
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

}  // namespace nightshift::scheduler
