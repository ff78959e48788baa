#include "proto/client.h"

#include <fstream>
#include <sstream>

namespace nightshift::api {

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

}  // namespace nightshift::api
