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
  SetKeepalive(options, &args);
  return grpc::CreateCustomChannel(options.address, credentials, args);
}

void SetKeepalive(const ConnectOptions& options, grpc::ChannelArguments* args) {
  if (options.keepalive_ms <= 0) return;
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_ms);
  if (options.keepalive_timeout_ms > 0) {
    args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
  }
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // By default a client stops pinging after two pings with no data frame
  // sent between them; on a silent link that is the case to detect.
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args->SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, options.keepalive_ms);
}

void AddToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace nightshift::api
