// The Batch API's handlers and runner in process: a real Store and
// Scheduler on a temporary database, a fake worker link, a fake clock, and
// requests with in-memory bodies. The real SDK against the real binaries is
// tests/openai/.
#include "scheduler/http/batch_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "proto/batch_format.h"
#include "scheduler/disk_full.h"
#include "scheduler/test_util.h"
#include "tests/testing/tiny_fs.h"

namespace nightshift::scheduler::http {
namespace {

using json = nlohmann::json;
using testing::Offer;
using testing::TempDir;
using testing::Worker;

class FakeLink : public WorkerLink {
 public:
  void Send(WorkerCommand command) override { sent.push_back(std::move(command)); }
  void Close(const Status&) override {}
  std::vector<WorkerCommand> sent;
};

// An input line for /v1/completions with a token-id prompt of `tokens` ids.
std::string Line(const std::string& custom_id, const std::string& model = "m", int tokens = 3,
                 const std::string& url = "/v1/completions") {
  json prompt = json::array();
  for (int i = 0; i < tokens; ++i) prompt.push_back(10 + i);
  json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", 2}};
  return json{{"custom_id", custom_id}, {"method", "POST"}, {"url", url}, {"body", body}}.dump();
}

// A valid /v1/chat/completions line.
std::string ChatLine(const std::string& custom_id) {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  return json{
      {"custom_id", custom_id}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}}
      .dump();
}

std::string Multipart(const std::string& file, const std::string& purpose = "batch") {
  return "--BND\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose +
         "\r\n--BND\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
         "Content-Type: application/octet-stream\r\n\r\n" +
         file + "\r\n--BND--\r\n";
}

struct Reply {
  int status = 0;
  json body;
  std::string text;  // the raw body (streamed ones included)
  HttpResponse response;
};

class BatchApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_.file("state.db"), &clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    Restart();
  }

  // A new Scheduler, ApiStore and BatchApi on the same database, as after a
  // restart of the scheduler process.
  void Restart() {
    api_.reset();
    files_.reset();
    SchedulerOptions options;
    options.lease_ms = 10'000;
    options.tokenizer_cache_dir = dir_.file("tokenizers");
    scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
    ASSERT_TRUE(scheduler_->Start().ok());
    auto files = ApiStore::Open(dir_.file("state.db"), dir_.file("files"), &clock_);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    files_ = std::move(files).value();
    api_ =
        std::make_unique<BatchApi>(scheduler_.get(), store_.get(), files_.get(), &clock_, options_);
  }

  void AttachWorker() {
    WorkerHello hello;
    hello.info = Worker("w1", 1 << 20, {Offer("m", 1000, /*max_context=*/64)});
    auto session = scheduler_->Attach(hello, &link_);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    session_ = *session;
  }

  Reply Call(const std::string& method, const std::string& path, std::string body = "",
             std::map<std::string, std::string> headers = {},
             std::map<std::string, std::string> query = {}) {
    StringBody in(body, 100);  // in small pieces, as a socket delivers them
    HttpRequest request;
    request.method = method;
    request.path = path;
    request.query = std::move(query);
    request.headers = std::move(headers);
    request.content_length = static_cast<int64_t>(body.size());
    request.body = &in;
    Reply reply;
    reply.response = api_->Handle(request);
    reply.status = reply.response.status;
    reply.text = reply.response.body;
    if (reply.response.stream) {
      StringWriter out;
      EXPECT_TRUE(reply.response.stream(out).ok());
      reply.text = out.out;
      if (reply.response.stream_length) {
        EXPECT_EQ(*reply.response.stream_length, static_cast<int64_t>(out.out.size()));
      }
    }
    reply.body = json::parse(reply.text, nullptr, false);
    return reply;
  }

  std::string Upload(const std::string& file) {
    Reply r = Call("POST", "/v1/files", Multipart(file),
                   {{"content-type", "multipart/form-data; boundary=BND"}});
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body.value("id", "");
  }

  json Create(const std::string& file_id, const std::string& window = "24h") {
    json request = {{"input_file_id", file_id},
                    {"endpoint", "/v1/completions"},
                    {"completion_window", window},
                    {"metadata", {{"run", "nightly"}}}};
    Reply r = Call("POST", "/v1/batches", request.dump());
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body;
  }

  json Get(const std::string& batch_id) { return Call("GET", "/v1/batches/" + batch_id).body; }

  // Finishes every job the worker was assigned so far, each with its custom id as output.
  void FinishAssigned(size_t at_most = SIZE_MAX) {
    std::vector<JobResult> results;
    for (const WorkerCommand& c : link_.sent) {
      if (c.kind != WorkerCommand::Kind::kAssign) continue;
      for (const Job& job : c.jobs) {
        if (done_.count(job.id) != 0 || results.size() >= at_most) continue;
        done_.insert(job.id);
        JobResult r;
        r.job_id = job.id;
        r.batch_id = c.batch_id;
        r.ok = job.spec.custom_id.rfind("fail", 0) != 0;  // "fail..." jobs fail at run time
        r.error = "the worker could not run it";
        r.output.text = "out " + job.spec.custom_id;
        r.output.finish_reason = "length";
        r.output.prompt_tokens = 3;
        r.output.completion_tokens = 2;
        results.push_back(r);
      }
    }
    auto stored = scheduler_->Results("w1", session_, results);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  }

  std::vector<json> Lines(const std::string& file_id) {
    Reply r = Call("GET", "/v1/files/" + file_id + "/content");
    EXPECT_EQ(r.status, 200) << r.text;
    std::vector<json> lines;
    std::istringstream in(r.text);
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    return lines;
  }

  TempDir dir_;
  FakeClock clock_;
  BatchApiOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ApiStore> files_;
  std::unique_ptr<BatchApi> api_;
  FakeLink link_;
  int64_t session_ = 0;
  std::set<int64_t> done_;
};

TEST_F(BatchApiTest, FilesAreUploadedListedReadBackAndDeleted) {
  const std::string content = Line("a") + "\n" + Line("b") + "\n";
  Reply up = Call("POST", "/v1/files", Multipart(content),
                  {{"content-type", "multipart/form-data; boundary=BND"}});
  ASSERT_EQ(up.status, 200) << up.text;
  EXPECT_EQ(up.body["id"], "file-1");
  EXPECT_EQ(up.body["object"], "file");
  EXPECT_EQ(up.body["bytes"], content.size());
  EXPECT_EQ(up.body["filename"], "in.jsonl");
  EXPECT_EQ(up.body["purpose"], "batch");
  EXPECT_EQ(up.body["created_at"], clock_.NowMs() / 1000);

  EXPECT_EQ(Call("GET", "/v1/files/file-1").body, up.body);
  Reply list = Call("GET", "/v1/files");
  EXPECT_EQ(list.body["object"], "list");
  ASSERT_EQ(list.body["data"].size(), 1u);
  EXPECT_EQ(list.body["data"][0]["id"], "file-1");
  Reply bytes = Call("GET", "/v1/files/file-1/content");
  EXPECT_EQ(bytes.status, 200);
  EXPECT_EQ(bytes.text, content);

  Reply deleted = Call("DELETE", "/v1/files/file-1");
  EXPECT_EQ(deleted.body, json({{"id", "file-1"}, {"object", "file"}, {"deleted", true}}));
  Reply gone = Call("GET", "/v1/files/file-1");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(gone.body["error"].contains("param"));
  EXPECT_TRUE(gone.body["error"].contains("code"));
  EXPECT_EQ(Call("GET", "/v1/files/file-1/content").status, 404);
  // A new upload never takes a deleted file's id.
  EXPECT_EQ(Upload(content), "file-2");
}

TEST_F(BatchApiTest, BadUploadsAreRefusedWithTheRightCode) {
  const std::map<std::string, std::string> multipart = {
      {"content-type", "multipart/form-data; boundary=BND"}};
  Reply purpose = Call("POST", "/v1/files", Multipart("x", "fine-tune"), multipart);
  EXPECT_EQ(purpose.status, 400);
  EXPECT_EQ(purpose.body["error"]["param"], "purpose");
  Reply json_body = Call("POST", "/v1/files", "{}", {{"content-type", "application/json"}});
  EXPECT_EQ(json_body.status, 400);
  Reply no_file = Call("POST", "/v1/files",
                       "--BND\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch"
                       "\r\n--BND--\r\n",
                       multipart);
  EXPECT_EQ(no_file.status, 400);
  EXPECT_EQ(no_file.body["error"]["param"], "file");

  options_.max_upload_bytes = 1000;
  Restart();
  Reply big = Call("POST", "/v1/files", Multipart(std::string(1001, 'x')), multipart);
  EXPECT_EQ(big.status, 413);
  EXPECT_TRUE(big.response.close);
  EXPECT_EQ(big.body["error"]["code"], "file_too_large");
  EXPECT_EQ(Call("POST", "/v1/files", Multipart(std::string(1000, 'x')), multipart).status, 200);
  EXPECT_EQ(Call("GET", "/v1/files").body["data"].size(), 1u);  // the refused one left nothing
}

TEST_F(BatchApiTest, ABatchGoesFromValidatingToCompletedWithItsOutputInInputOrder) {
  AttachWorker();
  const std::string file = Upload(Line("c") + "\n\n" + Line("a") + "\n" + Line("b") + "\n");
  json created = Create(file);
  EXPECT_EQ(created["id"], "batch_1");
  EXPECT_EQ(created["object"], "batch");
  EXPECT_EQ(created["status"], "validating");
  EXPECT_EQ(created["endpoint"], "/v1/completions");
  EXPECT_EQ(created["input_file_id"], file);
  EXPECT_EQ(created["completion_window"], "24h");
  EXPECT_EQ(created["expires_at"], created["created_at"].get<int64_t>() + 24 * 3600);
  EXPECT_EQ(created["metadata"], json({{"run", "nightly"}}));
  for (const char* field :
       {"errors", "output_file_id", "error_file_id", "in_progress_at", "finalizing_at",
        "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at"}) {
    ASSERT_TRUE(created.contains(field)) << field;
    EXPECT_TRUE(created[field].is_null()) << field;
  }
  EXPECT_EQ(created["request_counts"], json({{"total", 0}, {"completed", 0}, {"failed", 0}}));

  api_->Step();
  json running = Get("batch_1");
  EXPECT_EQ(running["status"], "in_progress");
  EXPECT_FALSE(running["in_progress_at"].is_null());
  EXPECT_EQ(running["request_counts"]["total"], 3);
  auto submission = scheduler_->GetSubmission(1);  // a submission underneath
  ASSERT_TRUE(submission.ok());
  EXPECT_TRUE(submission->submission.sealed);

  FinishAssigned();
  EXPECT_EQ(Get("batch_1")["status"], "finalizing");  // done, not yet finalized
  api_->Step();
  json done = Get("batch_1");
  EXPECT_EQ(done["status"], "completed");
  EXPECT_FALSE(done["completed_at"].is_null());
  EXPECT_FALSE(done["finalizing_at"].is_null());
  EXPECT_EQ(done["request_counts"], json({{"total", 3}, {"completed", 3}, {"failed", 0}}));
  EXPECT_TRUE(done["error_file_id"].is_null());
  ASSERT_TRUE(done["output_file_id"].is_string());
  const std::string output = done["output_file_id"];
  std::vector<json> lines = Lines(output);
  ASSERT_EQ(lines.size(), 3u);
  const char* order[] = {"c", "a", "b"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["custom_id"], order[i]);
    EXPECT_EQ(lines[i]["response"]["status_code"], 200);
    EXPECT_EQ(lines[i]["response"]["body"]["choices"][0]["text"], std::string("out ") + order[i]);
    EXPECT_TRUE(lines[i]["error"].is_null());
  }
  json file_object = Call("GET", "/v1/files/" + output).body;
  EXPECT_EQ(file_object["purpose"], "batch_output");
  EXPECT_EQ(file_object["bytes"], Call("GET", "/v1/files/" + output + "/content").text.size());
  // Finished: its input may now go.
  EXPECT_EQ(Call("DELETE", "/v1/files/" + file).status, 200);
  EXPECT_EQ(Lines(output).size(), 3u);  // outputs come from the results, not the input
}

TEST_F(BatchApiTest, AJobThatFailsAtRunTimeGoesToTheErrorFile) {
  AttachWorker();
  Create(Upload(Line("a") + "\n" + Line("fail-b") + "\n" + Line("c") + "\n"));
  api_->Step();
  FinishAssigned();
  api_->Step();
  json done = Get("batch_1");
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["request_counts"], json({{"total", 3}, {"completed", 2}, {"failed", 1}}));
  std::vector<json> output = Lines(done["output_file_id"]);
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["custom_id"], "a");
  EXPECT_EQ(output[1]["custom_id"], "c");
  std::vector<json> errors = Lines(done["error_file_id"]);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["custom_id"], "fail-b");
  EXPECT_EQ(errors[0]["response"]["status_code"], 500);
  EXPECT_EQ(errors[0]["error"]["code"], "job_failed");
  EXPECT_EQ(errors[0]["error"]["message"], "the worker could not run it");
}

TEST_F(BatchApiTest, AMalformedFileFailsValidationWithEveryBadLineAndQueuesNothing) {
  AttachWorker();
  const std::string file =
      Upload(Line("ok") + "\n" + "{not json\n" + Line("typo", "mm") + "\n" + Line("long", "m", 70) +
             "\n" + ChatLine("chat") + "\n" + Line("ok") + "\n");
  json created = Create(file);
  EXPECT_EQ(created["status"], "validating");
  api_->Step();
  json failed = Get("batch_1");
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_FALSE(failed["failed_at"].is_null());
  EXPECT_EQ(failed["errors"]["object"], "list");
  std::map<int64_t, std::string> by_line;
  for (const json& e : failed["errors"]["data"]) {
    EXPECT_TRUE(e.contains("code") && e.contains("param"));
    by_line[e["line"].get<int64_t>()] = e["message"];
  }
  ASSERT_EQ(by_line.size(), 5u) << failed.dump(2);
  EXPECT_NE(by_line[2].find("not valid JSON"), std::string::npos);
  EXPECT_NE(by_line[3].find("model 'mm' is served by no worker"), std::string::npos);
  EXPECT_NE(by_line[4].find("exceeds the model's context of 64"), std::string::npos);
  EXPECT_NE(by_line[5].find("not the batch's endpoint"), std::string::npos);
  EXPECT_NE(by_line[6].find("duplicate custom_id 'ok' (first on line 1)"), std::string::npos);
  EXPECT_EQ(failed["request_counts"]["total"], 0);
  auto jobs = scheduler_->ListJobs({}, 0, 100);
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->jobs.empty());
  EXPECT_TRUE(scheduler_->GetSubmission(1)->submission.sealed);
  EXPECT_EQ(Call("POST", "/v1/batches/batch_1/cancel").status, 409);
}

TEST_F(BatchApiTest, ManyBadLinesAreListedUpToACapAndCountedAll) {
  AttachWorker();
  std::string file = "{not json\n";
  for (int i = 0; i < 250; ++i) file += Line("typo" + std::to_string(i), "nobody") + "\n";
  Create(Upload(file));
  api_->Step();
  const Reply reply = Call("GET", "/v1/batches/batch_1");
  const json& failed = reply.body;
  EXPECT_EQ(failed["status"], "failed");
  const json& data = failed["errors"]["data"];
  ASSERT_EQ(data.size(), static_cast<size_t>(kMaxErrorLines) + 1) << reply.text.substr(0, 2000);
  // The first lines in order, every kind together: the format error and the unknown models.
  EXPECT_EQ(data[0]["line"], 1);
  EXPECT_NE(data[0]["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  for (int64_t i = 1; i < kMaxErrorLines; ++i) {
    EXPECT_EQ(data[i]["line"], i + 1);
    EXPECT_NE(data[i]["message"].get<std::string>().find("model 'nobody' is served by no worker"),
              std::string::npos);
  }
  const json& count = data[kMaxErrorLines];
  EXPECT_EQ(count["code"], "too_many_errors");
  EXPECT_TRUE(count["line"].is_null());
  EXPECT_NE(count["message"].get<std::string>().find("151 more bad lines (251 in all)"),
            std::string::npos)
      << count.dump();
  EXPECT_LT(reply.text.size(), 64u << 10);
  EXPECT_TRUE(scheduler_->ListJobs({}, 0, 10)->jobs.empty());
}

// The upload directory on a tmpfs filled to its last KiB: the upload that
// does not fit is 507 in OpenAI's error shape, leaves no file behind, and
// goes through once space is freed.
TEST_F(BatchApiTest, AnUploadToAFullDiskIs507AndKeepsNothing) {
  std::string why;
  auto fs = testutil::TinyFilesystem::Mount(1 << 20, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  auto files = ApiStore::Open(dir_.file("state.db"), fs->file("files"), &clock_);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  files_ = std::move(files).value();
  api_ =
      std::make_unique<BatchApi>(scheduler_.get(), store_.get(), files_.get(), &clock_, options_);
  ASSERT_TRUE(fs->Fill(16 << 10));
  std::string big;
  while (big.size() < (200u << 10)) big += Line("x" + std::to_string(big.size())) + "\n";
  const int64_t full_before = DiskFullCount();
  Reply r = Call("POST", "/v1/files", Multipart(big),
                 {{"content-type", "multipart/form-data; boundary=BND"}});
  EXPECT_EQ(r.status, 507) << r.text;
  EXPECT_EQ(r.body["error"]["type"], "server_error") << r.text;
  EXPECT_EQ(r.body["error"]["code"], "insufficient_storage") << r.text;
  EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind(
                "the scheduler's disk is full: writing the upload: No space left on device", 0),
            0u)
      << r.text;
  EXPECT_TRUE(r.response.close);
  EXPECT_GT(DiskFullCount(), full_before);
  EXPECT_TRUE(Call("GET", "/v1/files").body["data"].empty());
  size_t left = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(fs->file("files"))) {
    ++left;
  }
  EXPECT_EQ(left, 0u) << "a partial upload was left behind";
  fs->Free();
  EXPECT_FALSE(Upload(big).empty());
}

TEST_F(BatchApiTest, FileLevelProblemsFailTheBatchToo) {
  AttachWorker();
  options_.max_batch_requests = 3;
  Restart();
  AttachWorker();
  Create(Upload(Line("a") + "\n" + Line("b") + "\n" + Line("c") + "\n" + Line("d") + "\n"));
  Create(Upload("\n\n"));
  api_->Step();
  json too_many = Get("batch_1");
  EXPECT_EQ(too_many["status"], "failed");
  EXPECT_EQ(too_many["errors"]["data"][0]["code"], "too_many_requests");
  json empty = Get("batch_2");
  EXPECT_EQ(empty["status"], "failed");
  EXPECT_EQ(empty["errors"]["data"][0]["code"], "empty_file");
}

TEST_F(BatchApiTest, CreateRefusesBadFieldsByName) {
  const std::string file = Upload(Line("a") + "\n");
  const auto refused = [&](json request, const std::string& param) {
    Reply r = Call("POST", "/v1/batches", request.dump());
    EXPECT_EQ(r.status, 400) << r.text;
    EXPECT_EQ(r.body["error"]["param"], param) << r.text;
  };
  const json good = {
      {"input_file_id", file}, {"endpoint", "/v1/completions"}, {"completion_window", "24h"}};
  json j = good;
  j["input_file_id"] = "file-99";
  refused(j, "input_file_id");
  j = good;
  j["endpoint"] = "/v1/embeddings";
  refused(j, "endpoint");
  for (const char* window : {"25h", "0s", "1d", "h", "-1h", "1.5h"}) {
    j = good;
    j["completion_window"] = window;
    refused(j, "completion_window");
  }
  j = good;
  j["metadata"] = {{"k", 1}};
  refused(j, "metadata");
  EXPECT_EQ(Call("POST", "/v1/batches", "not json").status, 400);
  EXPECT_EQ(Call("GET", "/v1/batches/batch_9").status, 404);
  EXPECT_EQ(Call("GET", "/v1/batches/9").status, 404);
  EXPECT_EQ(Call("GET", "/v1/nothing").status, 404);
  EXPECT_EQ(Call("PUT", "/v1/batches").status, 405);
}

TEST_F(BatchApiTest, CompletionWindowsAreSecondsMinutesOrHoursUpToADay) {
  EXPECT_EQ(*ParseCompletionWindow("24h"), 24 * 3600'000LL);
  EXPECT_EQ(*ParseCompletionWindow("90s"), 90'000);
  EXPECT_EQ(*ParseCompletionWindow("15m"), 900'000);
  EXPECT_EQ(*ParseCompletionWindow("86400s"), 24 * 3600'000LL);
  EXPECT_FALSE(ParseCompletionWindow("86401s").ok());
  EXPECT_FALSE(ParseCompletionWindow("1441m").ok());
  EXPECT_FALSE(ParseCompletionWindow("99999999999999999999h").ok());
}

TEST_F(BatchApiTest, CancellingKeepsFinishedResultsAndCancelsTheRest) {
  AttachWorker();
  const std::string file =
      Upload(Line("a") + "\n" + Line("b") + "\n" + Line("c") + "\n" + Line("d") + "\n");
  Create(file);
  api_->Step();
  // The input of an unfinished batch cannot be deleted.
  Reply in_use = Call("DELETE", "/v1/files/" + file);
  EXPECT_EQ(in_use.status, 409);
  EXPECT_NE(in_use.text.find("batch_1"), std::string::npos);
  FinishAssigned(/*at_most=*/2);
  Reply cancel = Call("POST", "/v1/batches/batch_1/cancel");
  ASSERT_EQ(cancel.status, 200) << cancel.text;
  EXPECT_EQ(cancel.body["status"], "cancelling");
  EXPECT_FALSE(cancel.body["cancelling_at"].is_null());
  bool told = false;  // the worker running them is told at once
  for (const WorkerCommand& c : link_.sent) told |= c.kind == WorkerCommand::Kind::kCancel;
  EXPECT_TRUE(told);
  api_->Step();
  json cancelled = Get("batch_1");
  EXPECT_EQ(cancelled["status"], "cancelled");
  EXPECT_FALSE(cancelled["cancelled_at"].is_null());
  EXPECT_EQ(cancelled["request_counts"], json({{"total", 4}, {"completed", 2}, {"failed", 0}}));
  std::vector<json> output = Lines(cancelled["output_file_id"]);
  std::vector<json> errors = Lines(cancelled["error_file_id"]);
  ASSERT_EQ(output.size(), 2u);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(output[0]["custom_id"], "a");
  EXPECT_EQ(output[1]["custom_id"], "b");
  EXPECT_EQ(errors[0]["custom_id"], "c");
  EXPECT_EQ(errors[0]["error"]["code"], "job_cancelled");
  EXPECT_EQ(Call("POST", "/v1/batches/batch_1/cancel").body["status"], "cancelled");
}

TEST_F(BatchApiTest, ABatchCancelledWhileValidatingQueuesNothing) {
  AttachWorker();
  Create(Upload(Line("a") + "\n"));
  EXPECT_EQ(Call("POST", "/v1/batches/batch_1/cancel").body["status"], "cancelling");
  api_->Step();
  api_->Step();
  json cancelled = Get("batch_1");
  EXPECT_EQ(cancelled["status"], "cancelled");
  EXPECT_TRUE(cancelled["output_file_id"].is_null());
  EXPECT_TRUE(scheduler_->ListJobs({}, 0, 10)->jobs.empty());
}

TEST_F(BatchApiTest, AnExpiredWindowEndsUnfinishedJobsAsBatchExpired) {
  AttachWorker();
  Create(Upload(Line("a") + "\n" + Line("b") + "\n" + Line("c") + "\n"), "10s");
  api_->Step();
  FinishAssigned(/*at_most=*/1);
  clock_.Advance(9'000);
  api_->Step();
  EXPECT_EQ(Get("batch_1")["status"], "in_progress");
  clock_.Advance(2'000);
  api_->Step();
  json expired = Get("batch_1");
  EXPECT_EQ(expired["status"], "expired");
  EXPECT_FALSE(expired["expired_at"].is_null());
  EXPECT_EQ(Lines(expired["output_file_id"]).size(), 1u);
  std::vector<json> errors = Lines(expired["error_file_id"]);
  ASSERT_EQ(errors.size(), 2u);
  for (const json& e : errors) {
    EXPECT_EQ(e["error"]["code"], "batch_expired");
    EXPECT_TRUE(e["response"].is_null());
  }
  EXPECT_EQ(errors[0]["custom_id"], "b");
  // The CLI's view of the same jobs: cancelled with the reason.
  auto jobs = scheduler_->ListJobs({1, JobState::kCancelled, "", false}, 0, 10);
  ASSERT_EQ(jobs->jobs.size(), 2u);
  EXPECT_EQ(jobs->jobs[0].job.reason.rfind("batch_expired: the batch's completion window (10s)", 0),
            0u)
      << jobs->jobs[0].job.reason;
}

TEST_F(BatchApiTest, BatchesAreListedNewestFirstAPageAtATime) {
  AttachWorker();
  const std::string file = Upload(Line("a") + "\n");
  for (int i = 0; i < 3; ++i) Create(file);
  Reply first = Call("GET", "/v1/batches", "", {}, {{"limit", "2"}});
  ASSERT_EQ(first.status, 200) << first.text;
  EXPECT_EQ(first.body["object"], "list");
  ASSERT_EQ(first.body["data"].size(), 2u);
  EXPECT_EQ(first.body["data"][0]["id"], "batch_3");
  EXPECT_EQ(first.body["data"][1]["id"], "batch_2");
  EXPECT_EQ(first.body["first_id"], "batch_3");
  EXPECT_EQ(first.body["last_id"], "batch_2");
  EXPECT_EQ(first.body["has_more"], true);
  Reply second = Call("GET", "/v1/batches", "", {}, {{"limit", "2"}, {"after", "batch_2"}});
  ASSERT_EQ(second.body["data"].size(), 1u);
  EXPECT_EQ(second.body["data"][0]["id"], "batch_1");
  EXPECT_EQ(second.body["has_more"], false);
  EXPECT_EQ(Call("GET", "/v1/batches").body["data"].size(), 3u);  // limit 20 by default
  EXPECT_EQ(Call("GET", "/v1/batches", "", {}, {{"limit", "0"}}).status, 400);
}

TEST_F(BatchApiTest, ARestartGoesOnWhereTheRunnerStopped) {
  AttachWorker();
  options_.chunk_jobs = 2;
  Restart();
  AttachWorker();
  std::string lines;
  for (const char* id : {"a", "b", "c", "d", "e"}) lines += Line(id) + "\n";
  Create(Upload(lines));
  // As if a crash came after the first chunk was stored: the restarted
  // runner submits only the rest.
  SubmitRequest first;
  first.submission_id = 1;
  first.keep_open = true;
  for (const char* id : {"a", "b"}) {
    api::JobSpec spec;
    std::vector<api::LineError> errors;
    ASSERT_TRUE(api::ParseBatchLine(Line(id), 1, {}, &spec, &errors));
    first.jobs.push_back(spec);
  }
  ASSERT_TRUE(scheduler_->Submit(first).ok());
  Restart();
  AttachWorker();
  EXPECT_EQ(Get("batch_1")["status"], "validating");
  api_->Step();
  json running = Get("batch_1");
  EXPECT_EQ(running["status"], "in_progress");
  EXPECT_EQ(running["request_counts"]["total"], 5);
  std::vector<std::string> custom_ids;
  auto page = scheduler_->ListJobs({}, 0, 10);
  ASSERT_TRUE(page.ok());
  for (const JobView& v : page->jobs) {
    custom_ids.push_back(v.job.spec.custom_id);
  }
  EXPECT_EQ(custom_ids, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
}

TEST_F(BatchApiTest, TokensAreCheckedAsForGrpc) {
  options_.client_token = "client-secret";
  options_.worker_token = "worker-secret";
  Restart();
  Reply none = Call("GET", "/v1/batches");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(Call("GET", "/v1/batches", "", {{"authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(Call("GET", "/v1/batches", "", {{"authorization", "Basic x"}}).status, 401);
  EXPECT_EQ(Call("GET", "/v1/batches", "", {{"authorization", "Bearer worker-secret"}}).status,
            403);
  EXPECT_EQ(Call("GET", "/v1/batches", "", {{"authorization", "Bearer client-secret"}}).status,
            200);
}

TEST_F(BatchApiTest, ModelsAreThoseOfConnectedWorkers) {
  EXPECT_EQ(Call("GET", "/v1/models").body["data"].size(), 0u);
  AttachWorker();
  json models = Call("GET", "/v1/models").body;
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "m");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["workers"], 1);
  EXPECT_EQ(models["data"][0]["context_length"], 64);
  EXPECT_EQ(Call("GET", "/v1/models/m").body["id"], "m");
  EXPECT_EQ(Call("GET", "/v1/models/x").status, 404);
  scheduler_->Detach("w1", session_);
  EXPECT_EQ(Call("GET", "/v1/models").body["data"].size(), 0u);
}

}  // namespace
}  // namespace nightshift::scheduler::http
