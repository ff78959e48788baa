#include "scheduler/server.h"

#include <gtest/gtest.h>

namespace nightshift::scheduler {
namespace {

TEST(ServerConfigTest, LoopbackHosts) {
  EXPECT_TRUE(IsLoopback("localhost:50051"));
  EXPECT_TRUE(IsLoopback("127.0.0.1:0"));
  EXPECT_TRUE(IsLoopback("127.8.9.1:1"));
  EXPECT_TRUE(IsLoopback("[::1]:50051"));
  EXPECT_FALSE(IsLoopback("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopback("[::]:50051"));
  EXPECT_FALSE(IsLoopback("10.0.0.1:50051"));
  EXPECT_FALSE(IsLoopback("nonsense"));
}

TEST(ServerConfigTest, WithoutTokensOnlyLoopbackIsBound) {
  ServerConfig config;
  config.listen = "0.0.0.0:50051";
  std::string note;
  auto address = BindAddress(config, &note);
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(*address, "127.0.0.1:50051");
  EXPECT_NE(note.find("loopback"), std::string::npos);
  config.client_token = "c";
  config.worker_token = "w";
  note.clear();
  EXPECT_EQ(*BindAddress(config, &note), "0.0.0.0:50051");
  EXPECT_EQ(note, "");
}

TEST(ServerConfigTest, RefusesHalfConfigurations) {
  std::string note;
  ServerConfig one_token;
  one_token.client_token = "c";
  EXPECT_NE(BindAddress(one_token, &note).status().message().find("go together"),
            std::string::npos);
  ServerConfig one_file;
  one_file.tls_cert = "cert.pem";
  EXPECT_NE(BindAddress(one_file, &note).status().message().find("--tls-key"), std::string::npos);
  ServerConfig slow_heartbeat;
  slow_heartbeat.heartbeat_seconds = 60;
  EXPECT_EQ(BindAddress(slow_heartbeat, &note).status().code(), StatusCode::kInvalidArgument);
  ServerConfig no_attempts;
  no_attempts.max_attempts = 0;
  EXPECT_EQ(BindAddress(no_attempts, &note).status().code(), StatusCode::kInvalidArgument);
  ServerConfig bad_address;
  bad_address.listen = "localhost";
  EXPECT_EQ(BindAddress(bad_address, &note).status().code(), StatusCode::kInvalidArgument);
}

TEST(ServerConfigTest, TheBatchApiBindsLikeGrpc) {
  ServerConfig config;
  config.http_listen = "0.0.0.0:8080";
  std::string note;
  auto bind = HttpBindAddress(config, &note);
  ASSERT_TRUE(bind.ok()) << bind.status().ToString();
  EXPECT_EQ(bind->host, "127.0.0.1");  // no tokens: loopback only
  EXPECT_EQ(bind->port, 8080);
  EXPECT_NE(note.find("loopback"), std::string::npos);
  config.client_token = "c";
  config.worker_token = "w";
  note.clear();
  EXPECT_EQ(HttpBindAddress(config, &note)->host, "0.0.0.0");
  EXPECT_EQ(note, "");
  config.http_listen = "localhost:0";
  EXPECT_EQ(HttpBindAddress(config, &note)->host, "127.0.0.1");
  config.http_listen = "[::1]:0";
  EXPECT_EQ(HttpBindAddress(config, &note)->host, "::1");
  for (const char* bad : {"8080", "host:", "h:99999", "h:12a"}) {
    config.http_listen = bad;
    EXPECT_EQ(HttpBindAddress(config, &note).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  config.http_listen = "127.0.0.1:0";
  config.http_max_upload_bytes = 0;
  EXPECT_EQ(HttpBindAddress(config, &note).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nightshift::scheduler
