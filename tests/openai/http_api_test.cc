// The Batch API of the real nightshift-scheduler over plain HTTP (Beast's
// client, no SDK, no worker): the upload limit answers 413 and leaves the
// server serving; an upload and a batch acknowledged just before kill -9 are
// there after the restart, and the batch goes on.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "tests/testing/http_client.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace nightshift {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using json = nlohmann::json;
using testutil::Process;
using testutil::TempDir;

using Reply = testutil::HttpReply;
using testutil::MultipartBatchFile;
constexpr const char* kMultipart = testutil::kMultipartBatchFile;

// One request on a fresh connection to 127.0.0.1:`port`; status 0 when the
// exchange failed.
Reply Call(int port, bhttp::verb verb, const std::string& target, const std::string& body = "",
           const std::string& content_type = "application/json", bool chunked = false) {
  return testutil::HttpCall("127.0.0.1:" + std::to_string(port), verb, target, body, content_type,
                            chunked);
}

std::string Multipart(const std::string& file) { return MultipartBatchFile(file); }

std::string Lines(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text += json{{"custom_id", "r" + std::to_string(i)},
                 {"method", "POST"},
                 {"url", "/v1/completions"},
                 {"body", {{"model", "later-model"}, {"prompt", {1, 2, 3}}, {"max_tokens", 2}}}}
                .dump() +
            "\n";
  }
  return text;
}

class HttpApiTest : public ::testing::Test {
 protected:
  // Starts the scheduler on dir_'s database with the Batch API on a free
  // port (http_port_) and `extra` flags.
  void Start(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = testutil::SchedulerArgv(dir_.file("state.db"), "5");
    argv.insert(argv.end(), {"--http-listen", "127.0.0.1:0"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    scheduler_ = Process::Start(argv, dir_.file("scheduler.log"));
    ASSERT_NE(scheduler_, nullptr);
    grpc_address_ = testutil::WaitForListenAddress(*scheduler_, 20);
    ASSERT_NE(grpc_address_, "") << scheduler_->Log();
    const std::string line = scheduler_->WaitForLine("http listening on ", 10);
    ASSERT_NE(line, "") << scheduler_->Log();
    http_port_ = std::stoi(line.substr(line.rfind(':') + 1));
  }
  void TearDown() override {
    if (HasFailure() && scheduler_ != nullptr) std::cerr << scheduler_->Log();
  }

  TempDir dir_;
  std::unique_ptr<Process> scheduler_;
  std::string grpc_address_;
  int http_port_ = 0;
};

TEST_F(HttpApiTest, AnUploadOverTheLimitIs413AndTheServerGoesOn) {
  Start({"--http-max-upload-bytes", "1000"});
  const std::string big(4000, 'x');
  Reply refused = Call(http_port_, bhttp::verb::post, "/v1/files", Multipart(big), kMultipart);
  EXPECT_EQ(refused.status, 413) << refused.body;
  EXPECT_EQ(refused.value["error"]["code"], "file_too_large") << refused.body;
  EXPECT_EQ(refused.value["error"]["type"], "invalid_request_error");
  EXPECT_NE(refused.value["error"]["message"].get<std::string>().find("1000"), std::string::npos);
  // Without a Content-Length the limit is found while streaming.
  Reply chunked =
      Call(http_port_, bhttp::verb::post, "/v1/files", Multipart(big), kMultipart, true);
  EXPECT_EQ(chunked.status, 413) << chunked.body;
  // The limit itself is fine, and nothing of the refused ones was kept.
  Reply fits = Call(http_port_, bhttp::verb::post, "/v1/files", Multipart(std::string(1000, 'y')),
                    kMultipart);
  EXPECT_EQ(fits.status, 200) << fits.body;
  EXPECT_EQ(fits.value["bytes"], 1000);
  Reply list = Call(http_port_, bhttp::verb::get, "/v1/files");
  EXPECT_EQ(list.value["data"].size(), 1u) << list.body;
}

TEST_F(HttpApiTest, ABatchAcknowledgedBeforeKillNineIsThereAfterTheRestart) {
  // No worker: the model is allowed before any advertises it.
  Start({"--allow-unknown-models"});
  const std::string input = Lines(3);
  Reply file = Call(http_port_, bhttp::verb::post, "/v1/files", Multipart(input), kMultipart);
  ASSERT_EQ(file.status, 200) << file.body;
  Reply batch = Call(http_port_, bhttp::verb::post, "/v1/batches",
                     json{{"input_file_id", file.value["id"]},
                          {"endpoint", "/v1/completions"},
                          {"completion_window", "24h"}}
                         .dump());
  ASSERT_EQ(batch.status, 200) << batch.body;
  scheduler_->Signal(SIGKILL);  // at once, as the reply arrives
  scheduler_->Wait(10);

  Start({"--allow-unknown-models"});
  const std::string id = batch.value["id"];
  Reply again = Call(http_port_, bhttp::verb::get, "/v1/batches/" + id);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.value["input_file_id"], file.value["id"]);
  EXPECT_EQ(again.value["created_at"], batch.value["created_at"]);
  // It goes on: validated and submitted after the restart.
  Reply running;
  for (int i = 0; i < 100; ++i) {
    running = Call(http_port_, bhttp::verb::get, "/v1/batches/" + id);
    if (running.value.value("status", "") == "in_progress") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(running.value["status"], "in_progress") << running.body;
  EXPECT_EQ(running.value["request_counts"]["total"], 3) << running.body;
  Reply content = Call(http_port_, bhttp::verb::get,
                       "/v1/files/" + file.value["id"].get<std::string>() + "/content");
  EXPECT_EQ(content.body, input);
  // The submission underneath is what the CLI sees, by the same id.
  testutil::ShellOutcome cli =
      testutil::RunShell("env NIGHTSHIFT_CONFIG=/nonexistent " + testutil::BinPath("nightshift") +
                             " status " + id + " --json --scheduler " + grpc_address_,
                         dir_.file("cli.err"));
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(json::parse(cli.out, nullptr, false)["counts"]["queued"], "3") << cli.out;
}

}  // namespace
}  // namespace nightshift
