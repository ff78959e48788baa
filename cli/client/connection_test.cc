#include "cli/client/connection.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>

namespace nightshift::cli {
namespace {

TEST(ConnectionTest, ParseConfig) {
  auto config = ParseConfig(
      "# nightshift\n"
      "scheduler = \"sched.example:443\"\n"
      "token = \"a \\\"quoted\\\" # token\"  # comment\n"
      "tls = true\n");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)["scheduler"], "sched.example:443");
  EXPECT_EQ((*config)["token"], "a \"quoted\" # token");
  EXPECT_EQ((*config)["tls"], "true");
  EXPECT_EQ(ParseConfig("x = 1\n").status().message(), "config line 1: unknown key 'x'");
  EXPECT_EQ(ParseConfig("\ntoken\n").status().message(), "config line 2: not key = value");
  EXPECT_EQ(ParseConfig("token = \"abc\n").status().message(),
            "config line 1: unterminated string");
}

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_SCHEDULER");
    char pattern[] = "/tmp/nightshift-config-XXXXXX";
    const int fd = mkstemp(pattern);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = pattern;
    std::ofstream(path_) << "scheduler = \"from-config:1\"\ntoken = \"config-token\"\ntls = true\n";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_SCHEDULER");
  }

  api::ConnectOptions Resolve(const std::vector<std::string>& args, const std::string& path) {
    CommandLine flags("test", "");
    ConnectionFlags given;
    AddConnectionFlags(flags, &given);
    EXPECT_TRUE(flags.Parse(args).ok());
    auto options = ResolveConnection(flags, given, path);
    EXPECT_TRUE(options.ok()) << options.status().message();
    return options.ok() ? *options : api::ConnectOptions{};
  }

  std::string path_;
};

TEST_F(ResolveTest, DefaultsWithoutAConfigFile) {
  auto options = Resolve({}, path_ + ".missing");
  EXPECT_EQ(options.address, "localhost:50051");
  EXPECT_EQ(options.token, "");
  EXPECT_FALSE(options.tls);
}

TEST_F(ResolveTest, FlagBeatsEnvironmentBeatsConfig) {
  auto options = Resolve({}, path_);
  EXPECT_EQ(options.address, "from-config:1");
  EXPECT_EQ(options.token, "config-token");
  EXPECT_TRUE(options.tls);

  setenv("NIGHTSHIFT_TOKEN", "env-token", 1);
  setenv("NIGHTSHIFT_SCHEDULER", "from-env:2", 1);
  options = Resolve({}, path_);
  EXPECT_EQ(options.address, "from-env:2");
  EXPECT_EQ(options.token, "env-token");

  options = Resolve({"--token", "flag-token", "--scheduler", "flag:3", "--no-tls"}, path_);
  EXPECT_EQ(options.address, "flag:3");
  EXPECT_EQ(options.token, "flag-token");
  EXPECT_FALSE(options.tls);
}

TEST_F(ResolveTest, CaFileImpliesTls) {
  auto options = Resolve({"--tls-ca", "/etc/ca.pem"}, path_ + ".missing");
  EXPECT_TRUE(options.tls);
  EXPECT_EQ(options.tls_ca_file, "/etc/ca.pem");
}

TEST_F(ResolveTest, MalformedConfigIsAnError) {
  std::ofstream(path_) << "tls = maybe\n";
  CommandLine flags("test", "");
  ConnectionFlags given;
  AddConnectionFlags(flags, &given);
  ASSERT_TRUE(flags.Parse(std::vector<std::string>{}).ok());
  auto options = ResolveConnection(flags, given, path_);
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().message(), "tls: 'maybe' is not true or false");
}

}  // namespace
}  // namespace nightshift::cli
