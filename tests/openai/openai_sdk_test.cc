// The official OpenAI Node SDK (tests/openai/package-lock.json; installed by
// scripts/bootstrap with npm ci) drives the real nightshift-scheduler's Batch
// API, with a real nightshift-worker on a generated checkpoint with Mistral's
// real tokenizer. Each test runs one scenario of batch_api.mjs: upload,
// create, poll to completed and download; a malformed file; a cancel
// mid-run; an expired window; a wrong token; listing with pagination;
// models; and the same SDK over HTTPS.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/e2e/cluster.h"
#include "tests/testing/temp_dir.h"

namespace nightshift::e2e {
namespace {

using testutil::SourcePath;
using testutil::TempDir;

constexpr const char* kClientToken = "sdk-client-token";
constexpr const char* kWorkerToken = "sdk-worker-token";

// One scheduler and one worker for the suite (the scenarios are independent
// batches); passes slowed to 50 ms so that a cancel and a window land mid-run.
class OpenAISdkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    cluster_ = new Cluster(dir_->path());
    error_ = new std::string(Start());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete dir_;
    delete error_;
  }

  static std::string Start() {
    if (!std::filesystem::exists(SourcePath("tests/openai/node_modules/openai/package.json"))) {
      return "the openai npm package is not installed in tests/openai/node_modules: run "
             "scripts/bootstrap (it runs npm ci there)";
    }
    std::string error = MakeCheckpoint(LlamaMini(), dir_->file("models/") + kLlama);
    if (!error.empty()) return error;
    error = cluster_->StartScheduler(5, "127.0.0.1:0",
                                     {"--http-listen", "127.0.0.1:0", "--client-token",
                                      kClientToken, "--worker-token", kWorkerToken});
    if (!error.empty()) return error;
    if (cluster_->StartWorker("sdk-worker", {dir_->file("models")},
                              {"--token", kWorkerToken, "--min-pass-seconds", "0.05"}) == nullptr) {
      return "cannot start the worker";
    }
    // Only an advertised model may be named (and ListWorkers needs the token).
    if (!WaitUntil(
            [] {
              return cluster_->scheduler()->Log().find("worker sdk-worker attached") !=
                     std::string::npos;
            },
            60)) {
      return "the worker did not attach:\n" + cluster_->Logs();
    }
    return "";
  }

  void SetUp() override { ASSERT_EQ(*error_, "") << cluster_->Logs(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Logs();
  }

  // Runs one scenario of batch_api.mjs against `base_url` (default: the
  // cluster's plain-HTTP API); "" when it held, else its output.
  static std::string Scenario(const std::string& name, std::string base_url = "",
                              const std::string& env = "") {
    if (base_url.empty()) base_url = "http://" + cluster_->http_address() + "/v1";
    const std::string command =
        "env NIGHTSHIFT_BASE_URL=" + ShellQuote(base_url) + " NIGHTSHIFT_TOKEN=" + kClientToken +
        " NIGHTSHIFT_WORKER_TOKEN=" + kWorkerToken + " NIGHTSHIFT_MODEL=" + kLlama +
        " NIGHTSHIFT_WORK_DIR=" + ShellQuote(dir_->path()) + " " + env + " node " +
        ShellQuote(SourcePath("tests/openai/batch_api.mjs")) + " " + name;
    Outcome run = Shell(command, dir_->file("node-" + name + ".err"), 150);
    if (run.code == 0 && run.out.find("ok " + name) != std::string::npos) return "";
    return "exit " + std::to_string(run.code) + "\n" + run.out + run.err;
  }

  static TempDir* dir_;
  static Cluster* cluster_;
  static std::string* error_;
};

TempDir* OpenAISdkTest::dir_ = nullptr;
Cluster* OpenAISdkTest::cluster_ = nullptr;
std::string* OpenAISdkTest::error_ = nullptr;

TEST_F(OpenAISdkTest, ModelsListsWhatTheWorkerServes) { EXPECT_EQ(Scenario("models"), ""); }

TEST_F(OpenAISdkTest, UploadCreatePollToCompletedAndDownloadTheOutput) {
  EXPECT_EQ(Scenario("complete"), "");
}

TEST_F(OpenAISdkTest, AMalformedFileFailsTheBatchWithEveryBadLine) {
  EXPECT_EQ(Scenario("malformed"), "");
}

TEST_F(OpenAISdkTest, CancelMidRunKeepsFinishedResults) { EXPECT_EQ(Scenario("cancel"), ""); }

TEST_F(OpenAISdkTest, AnExpiredWindowEndsTheRestAsBatchExpired) {
  EXPECT_EQ(Scenario("expire"), "");
}

TEST_F(OpenAISdkTest, AWrongTokenIsTheSdksAuthenticationError) { EXPECT_EQ(Scenario("auth"), ""); }

TEST_F(OpenAISdkTest, ListingPagesNewestFirst) { EXPECT_EQ(Scenario("pagination"), ""); }

// The same SDK over HTTPS: a second scheduler with the test certificate.
TEST(OpenAISdkTlsTest, TheSdkWorksOverHttps) {
  if (!std::filesystem::exists(SourcePath("tests/openai/node_modules/openai/package.json"))) {
    FAIL() << "the openai npm package is not installed: run scripts/bootstrap";
  }
  TempDir dir;
  Cluster cluster(dir.path());
  const std::string tls = testutil::DataPath("scheduler/tls/");
  ASSERT_EQ(cluster.StartScheduler(
                5, "127.0.0.1:0",
                {"--http-listen", "127.0.0.1:0", "--tls-cert", tls + "cert.pem", "--tls-key",
                 tls + "key.pem", "--client-token", kClientToken, "--worker-token", kWorkerToken}),
            "");
  const std::string port = cluster.http_address().substr(cluster.http_address().rfind(':') + 1);
  const std::string command =
      "env NIGHTSHIFT_BASE_URL=https://localhost:" + port + "/v1 NIGHTSHIFT_TOKEN=" + kClientToken +
      " NIGHTSHIFT_MODEL=" + kLlama + " NIGHTSHIFT_WORK_DIR=" + ShellQuote(dir.path()) +
      " NODE_EXTRA_CA_CERTS=" + ShellQuote(tls + "cert.pem") + " node " +
      ShellQuote(SourcePath("tests/openai/batch_api.mjs")) + " tls";
  Outcome run = Shell(command, dir.file("node.err"), 60);
  EXPECT_EQ(run.code, 0) << run.out << run.err << cluster.Logs();
  EXPECT_NE(run.out.find("ok tls"), std::string::npos) << run.out << run.err;
}

}  // namespace
}  // namespace nightshift::e2e
