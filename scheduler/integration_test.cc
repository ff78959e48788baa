// The real nightshift-scheduler binary with the scripted fake worker
// (nightshift-fake-worker) over real gRPC on loopback: submit -> lease ->
// progress -> results -> the watch stream closes; auth; fencing; a worker
// killed mid-batch; kill -9 of the scheduler during submissions (durability).

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <grpcpp/generic/generic_stub.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>

#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "scheduler/test_util.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace nightshift::scheduler {
namespace {

using testing::TempDir;
using testutil::BinPath;
using testutil::Process;

std::string TinyModelDir() { return testutil::DataPath("scheduler/tiny-model"); }

class IntegrationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      for (const auto& p : processes_) std::cerr << "---- " << p->pid() << " log:\n" << p->Log();
    }
  }

  // Starts a scheduler on a free loopback port; returns its address.
  std::string StartScheduler(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = testutil::SchedulerArgv(dir_.file("state.db"), "1.5");
    // These tests submit before (or without) their fake workers attaching.
    argv.push_back("--allow-unknown-models");
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::Start(argv, dir_.file("scheduler.log"));
    EXPECT_NE(p, nullptr);
    const std::string address = testutil::WaitForListenAddress(*p, 20);
    EXPECT_FALSE(address.empty()) << p->Log();
    scheduler_ = p.get();
    processes_.push_back(std::move(p));
    return address;
  }

  Process* StartWorker(const std::string& address, const std::string& id,
                       std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {BinPath("nightshift-fake-worker"),
                                     "--scheduler",
                                     address,
                                     "--id",
                                     id,
                                     "--model",
                                     "tiny",
                                     "--tokenizer-dir",
                                     TinyModelDir(),
                                     "--pass-seconds",
                                     "0.05"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::Start(argv, dir_.file(id + ".log"));
    EXPECT_NE(p, nullptr);
    processes_.push_back(std::move(p));
    return processes_.back().get();
  }

  // Polls a process's log for `needle`.
  static bool WaitForLog(Process* p, const std::string& needle, double timeout_seconds) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (p->Log().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::unique_ptr<v1::JobService::Stub> Jobs(const std::string& address) {
    auto channel = api::Connect({address, "", false, ""});
    return v1::JobService::NewStub(*channel);
  }

  static v1::JobRequest Generation(const std::string& custom_id, int max_new_tokens) {
    v1::JobRequest job;
    job.set_custom_id(custom_id);
    job.set_model("tiny");
    job.set_url("/v1/completions");
    job.set_text("hello " + custom_id);
    job.set_max_new_tokens(max_new_tokens);
    return job;
  }

  static v1::JobRequest Classification(const std::string& custom_id) {
    v1::JobRequest job;
    job.set_custom_id(custom_id);
    job.set_model("tiny");
    job.set_url("/v1/completions");
    job.set_text("is it ok?");
    job.add_labels(" yes");
    job.add_labels(" no");
    return job;
  }

  // Watches until the stream closes; returns every event.
  std::vector<v1::SubmissionEvent> WatchToEnd(v1::JobService::Stub* stub, int64_t submission,
                                              grpc::Status* status, const std::string& token = "") {
    grpc::ClientContext ctx;
    api::AddToken(&ctx, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::WatchSubmissionRequest request;
    request.set_submission_id(submission);
    auto reader = stub->WatchSubmission(&ctx, request);
    std::vector<v1::SubmissionEvent> events;
    v1::SubmissionEvent event;
    while (reader->Read(&event)) events.push_back(event);
    *status = reader->Finish();
    return events;
  }

  std::vector<v1::Job> Results(v1::JobService::Stub* stub, int64_t submission) {
    grpc::ClientContext ctx;
    v1::StreamResultsRequest request;
    request.set_submission_id(submission);
    auto reader = stub->StreamResults(&ctx, request);
    std::vector<v1::Job> jobs;
    v1::Job job;
    while (reader->Read(&job)) jobs.push_back(job);
    EXPECT_TRUE(reader->Finish().ok());
    return jobs;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<Process>> processes_;
  Process* scheduler_ = nullptr;
};

TEST_F(IntegrationTest, SubmitLeaseProgressResultsAndTheWatchStreamCloses) {
  const std::string address = StartScheduler();
  StartWorker(address, "w1");
  auto stub = Jobs(address);

  v1::SubmitJobsRequest request;
  *request.add_jobs() = Generation("gen-a", 3);
  *request.add_jobs() = Generation("gen-b", 5);
  *request.add_jobs() = Classification("cls");
  v1::JobRequest chat;
  chat.set_custom_id("chat");
  chat.set_model("tiny");
  chat.set_url("/v1/chat/completions");
  auto* message = chat.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("hi");
  chat.set_max_new_tokens(2);
  *request.add_jobs() = chat;
  const int count = request.jobs_size();
  v1::SubmitJobsResponse response;
  grpc::ClientContext ctx;
  grpc::Status status = stub->SubmitJobs(&ctx, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.job_ids_size(), count);

  grpc::Status watch_status;
  auto events = WatchToEnd(stub.get(), response.submission_id(), &watch_status);
  ASSERT_TRUE(watch_status.ok()) << watch_status.error_message();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front().changes_size(), 0);  // the snapshot comes first
  EXPECT_TRUE(events.back().submission().done());
  EXPECT_EQ(events.back().submission().counts().succeeded(), count);
  bool saw_pass = false, saw_eta = false, saw_running = false;
  for (const auto& e : events) {
    for (const auto& b : e.submission().batches()) {
      if (b.passes_done() > 0 && b.seconds_per_pass() > 0 && b.worker_id() == "w1") saw_pass = true;
    }
    if (e.submission().has_eta_seconds() && !e.submission().done()) saw_eta = true;
    for (const auto& c : e.changes()) saw_running |= c.to() == v1::JOB_STATE_RUNNING;
  }
  EXPECT_TRUE(saw_pass);
  EXPECT_TRUE(saw_eta);
  EXPECT_TRUE(saw_running);

  auto jobs = Results(stub.get(), response.submission_id());
  ASSERT_EQ(static_cast<int>(jobs.size()), count);
  for (const auto& job : jobs) {
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.custom_id();
    EXPECT_EQ(job.output().text(), "fake output for " + job.custom_id());
    EXPECT_EQ(job.worker_id(), "w1");
  }
  EXPECT_EQ(jobs[0].custom_id(), "gen-a");  // input order
  EXPECT_EQ(jobs[0].output().token_ids_size(), 3);
  EXPECT_EQ(jobs[0].prompt_tokens(), 11);  // "hello gen-a": one byte a token
  EXPECT_EQ(jobs[2].output().labels_size(), 2);
  EXPECT_EQ(jobs[2].output().labels(0).label(), " yes");
  EXPECT_EQ(jobs[2].kv_tokens(), 9 + 1 + 3);  // prompt + " yes" (one token) + " no" (three)

  grpc::ClientContext get_ctx;
  v1::GetSubmissionRequest get;
  get.set_submission_id(response.submission_id());
  v1::Submission submission;
  ASSERT_TRUE(stub->GetSubmission(&get_ctx, get, &submission).ok());
  EXPECT_TRUE(submission.done());
  EXPECT_EQ(submission.eta_seconds(), 0);
  EXPECT_FALSE(submission.has_prompt_tokens());  // not asked for: pollers pay nothing

  // The fake worker shares, as the engine's trie does, the prompt prefix of
  // jobs starting in the same pass: "hello gen-" of gen-a and gen-b.
  EXPECT_EQ(jobs[0].output().cached_prompt_tokens(), 10);
  EXPECT_EQ(jobs[1].output().cached_prompt_tokens(), 10);
  int64_t prompt_tokens = 0, cached = 0;
  for (const auto& job : jobs) {
    prompt_tokens += job.output().prompt_tokens();
    cached += job.output().cached_prompt_tokens();
  }
  grpc::ClientContext sum_ctx;
  get.set_with_prompt_tokens(true);
  ASSERT_TRUE(stub->GetSubmission(&sum_ctx, get, &submission).ok());
  ASSERT_TRUE(submission.has_prompt_tokens());
  EXPECT_EQ(submission.prompt_tokens().jobs(), count);
  EXPECT_EQ(submission.prompt_tokens().prompt_tokens(), prompt_tokens);
  EXPECT_EQ(submission.prompt_tokens().cached_prompt_tokens(), cached);
  EXPECT_GE(cached, 20);

  grpc::ClientContext workers_ctx;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(stub->ListWorkers(&workers_ctx, {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_TRUE(workers.workers(0).connected());
  EXPECT_GT(workers.workers(0).models(0).measured_seconds_per_pass(), 0);

  scheduler_->Signal(SIGTERM);
  EXPECT_EQ(scheduler_->Wait(10), 0);
}

TEST_F(IntegrationTest, AnInvalidSubmissionIsRefusedWholeWithEveryBadJob) {
  const std::string address = StartScheduler();
  auto stub = Jobs(address);
  v1::SubmitJobsRequest request;
  *request.add_jobs() = Generation("ok", 3);
  *request.add_jobs() = Generation("ok", 3);
  v1::JobRequest bad_url = Generation("url", 3);
  bad_url.set_url("/v1/embeddings");
  *request.add_jobs() = bad_url;
  v1::JobRequest empty = Generation("empty", 3);
  empty.clear_prompt();
  *request.add_jobs() = empty;
  grpc::ClientContext ctx;
  v1::SubmitJobsResponse response;
  grpc::Status status = stub->SubmitJobs(&ctx, request, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string& m = status.error_message();
  EXPECT_NE(m.find("job 1: duplicate custom_id 'ok' (job 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("job 2: unsupported url '/v1/embeddings'"), std::string::npos) << m;
  EXPECT_NE(m.find("job 3: prompt is empty"), std::string::npos) << m;
  grpc::ClientContext list_ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&list_ctx, {}, &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  // An unknown submission is NOT_FOUND, for reads and watches alike.
  grpc::Status watch_status;
  WatchToEnd(stub.get(), 12345, &watch_status);
  EXPECT_EQ(watch_status.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Raw bytes of a protobuf message with one length-delimited field.
std::string Field(int number, const std::string& bytes) {
  return std::string(1, static_cast<char>((number << 3) | 2)) +
         std::string(1, static_cast<char>(bytes.size())) + bytes;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One request and the first response of any method, by name, without its
// generated stubs (the health and reflection protos are not installed).
std::string RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                    const std::string& request, grpc::Status* status) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(&ctx, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](int id) {
    return cq.Next(&tag, &ok) && tag == reinterpret_cast<void*>(id) && ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  std::string out;
  if (step(1)) {
    call->Write(Buffer(request), reinterpret_cast<void*>(2));
    if (step(2)) {
      grpc::ByteBuffer response;
      call->Read(&response, reinterpret_cast<void*>(3));
      if (step(3)) out = Bytes(response);
      call->WritesDone(reinterpret_cast<void*>(4));
      step(4);
    }
  }
  call->Finish(status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

TEST_F(IntegrationTest, TokensSeparateClientsFromWorkersAndHealthAndReflectionNeedNone) {
  const std::string address =
      StartScheduler({"--client-token", "client-secret", "--worker-token", "worker-secret"});
  auto stub = Jobs(address);
  auto info = [&](const std::string& token) {
    grpc::ClientContext ctx;
    api::AddToken(&ctx, token);
    v1::ServerInfo reply;
    return stub->GetServerInfo(&ctx, {}, &reply).error_code();
  };
  EXPECT_EQ(info(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(info("wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(info("worker-secret"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(info("client-secret"), grpc::StatusCode::OK);

  // A client token cannot attach as a worker.
  Process* intruder = StartWorker(address, "intruder", {"--token", "client-secret"});
  EXPECT_EQ(intruder->Wait(20), 1);
  EXPECT_NE(intruder->Log().find("a client token cannot attach as a worker"), std::string::npos)
      << intruder->Log();

  auto channel = *api::Connect({address, "", false, ""});
  grpc::Status status;
  // grpc.health.v1.Health/Check with an empty request: SERVING is field 1 = 1.
  const std::string health = RawCall(channel, "/grpc.health.v1.Health/Check", "", &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(health, std::string("\x08\x01", 2));
  // Server reflection lists our services (list_services is field 7).
  const std::string listed =
      RawCall(channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
              Field(7, ""), &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(listed.find("nightshift.v1.JobService"), std::string::npos);
  EXPECT_NE(listed.find("nightshift.v1.WorkerService"), std::string::npos);
}

TEST_F(IntegrationTest, ServesTlsWithTheGivenCertificate) {
  const std::string tls = testutil::DataPath("scheduler/tls/");
  const std::string address =
      StartScheduler({"--tls-cert", tls + "cert.pem", "--tls-key", tls + "key.pem",
                      "--client-token", "c", "--worker-token", "w"});
  auto info = [&](bool use_tls) {
    auto channel = api::Connect({address, "c", use_tls, use_tls ? tls + "cert.pem" : ""});
    auto stub = v1::JobService::NewStub(*channel);
    grpc::ClientContext ctx;
    api::AddToken(&ctx, "c");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ServerInfo reply;
    grpc::Status status = stub->GetServerInfo(&ctx, {}, &reply);
    return std::make_pair(status.error_code(), reply.version());
  };
  auto secure = info(true);
  EXPECT_EQ(secure.first, grpc::StatusCode::OK);
  EXPECT_FALSE(secure.second.empty());
  EXPECT_EQ(info(false).first, grpc::StatusCode::UNAVAILABLE);
  Process* worker = StartWorker(address, "plaintext", {"--token", "w"});
  EXPECT_EQ(worker->Wait(20), 1);  // a plaintext worker cannot attach either
}

TEST_F(IntegrationTest, WithoutTokensItBindsToLoopbackOnly) {
  std::vector<std::string> argv = {BinPath("nightshift-scheduler"), "--listen", "0.0.0.0:0", "--db",
                                   dir_.file("state.db")};
  auto p = Process::Start(argv, dir_.file("loopback.log"));
  const std::string line = p->WaitForLine("listening on", 20);
  EXPECT_NE(line.find("listening on 127.0.0.1:"), std::string::npos) << line;
  EXPECT_NE(p->Log().find("listening on loopback 127.0.0.1"), std::string::npos) << p->Log();
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(10), 0);
}

TEST_F(IntegrationTest, ItRefusesADatabaseFromANewerScheduler) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.file("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT "
                         "NOT NULL, applied_at_ms INTEGER NOT NULL); INSERT INTO schema_migrations "
                         "VALUES (999, '0999_future.sql', 0);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto p = Process::Start(
      {BinPath("nightshift-scheduler"), "--listen", "127.0.0.1:0", "--db", dir_.file("state.db")},
      dir_.file("newer.log"));
  EXPECT_EQ(p->Wait(20), 1);
  EXPECT_NE(p->Log().find("schema version 999"), std::string::npos) << p->Log();
  EXPECT_NE(p->Log().find("newer nightshift-scheduler"), std::string::npos);
}

TEST_F(IntegrationTest, ASecondAttachWithTheSameIdFencesTheFirst) {
  const std::string address = StartScheduler();
  Process* first = StartWorker(address, "same");
  ASSERT_TRUE(WaitForLog(scheduler_, "worker same attached (session 1", 20));
  StartWorker(address, "same");
  EXPECT_EQ(first->Wait(20), 1);
  EXPECT_NE(first->Log().find("superseded by a newer attach of worker same"), std::string::npos)
      << first->Log();
}

TEST_F(IntegrationTest, AWorkerKilledMidBatchCostsTimeNotJobs) {
  const std::string address = StartScheduler();
  Process* doomed =
      StartWorker(address, "doomed", {"--crash-after-passes", "2", "--pass-seconds", "0.1"});
  auto stub = Jobs(address);
  v1::SubmitJobsRequest request;
  for (int i = 0; i < 4; ++i) *request.add_jobs() = Generation("job-" + std::to_string(i), 5);
  v1::SubmitJobsResponse response;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->SubmitJobs(&ctx, request, &response).ok());
  EXPECT_EQ(doomed->Wait(20), 128 + SIGKILL);
  StartWorker(address, "healthy");
  grpc::Status status;
  auto events = WatchToEnd(stub.get(), response.submission_id(), &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(events.back().submission().counts().succeeded(), 4);
  auto jobs = Results(stub.get(), response.submission_id());
  ASSERT_EQ(jobs.size(), 4u);
  for (const auto& job : jobs) {
    EXPECT_EQ(job.worker_id(), "healthy");
    EXPECT_EQ(job.attempt(), 1);  // one lease lost, then done once
    EXPECT_EQ(job.output().token_ids_size(), 5);
  }
}

// Invariant 1: an acknowledged SubmitJobs survives kill -9 right after the
// reply. Submissions run in a loop while the scheduler is killed at random
// moments; after each restart every acknowledged job must be there.
TEST_F(IntegrationTest, AcknowledgedSubmissionsSurviveKillNine) {
  std::mt19937 random(12345);
  std::set<int64_t> acknowledged;
  for (int round = 0; round < 4; ++round) {
    const std::string address = StartScheduler();
    auto stub = Jobs(address);
    std::atomic<bool> stop{false};
    std::thread submitter([&, round] {
      for (int i = 0; !stop; ++i) {
        v1::SubmitJobsRequest request;
        for (int j = 0; j < 20; ++j) {
          *request.add_jobs() = Generation(
              "r" + std::to_string(round) + "-" + std::to_string(i) + "-" + std::to_string(j), 4);
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1::SubmitJobsResponse response;
        if (!stub->SubmitJobs(&ctx, request, &response).ok()) return;
        for (int64_t id : response.job_ids()) acknowledged.insert(id);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + random() % 400));
    scheduler_->Signal(SIGKILL);
    EXPECT_EQ(scheduler_->Wait(10), 128 + SIGKILL);
    stop = true;
    submitter.join();
  }
  ASSERT_GT(acknowledged.size(), 0u);
  const std::string address = StartScheduler();
  auto stub = Jobs(address);
  std::set<int64_t> stored;
  std::string token;
  do {
    grpc::ClientContext ctx;
    v1::ListJobsRequest request;
    request.set_page_size(1000);
    request.set_page_token(token);
    v1::ListJobsResponse response;
    ASSERT_TRUE(stub->ListJobs(&ctx, request, &response).ok());
    for (const auto& job : response.jobs()) stored.insert(job.id());
    token = response.next_page_token();
  } while (!token.empty());
  size_t missing = 0;
  for (int64_t id : acknowledged) missing += stored.count(id) == 0 ? 1 : 0;
  EXPECT_EQ(missing, 0u) << "of " << acknowledged.size() << " acknowledged jobs";
  std::cerr << acknowledged.size() << " acknowledged jobs over 4 kill -9 rounds, " << stored.size()
            << " stored, none missing" << std::endl;
}

}  // namespace
}  // namespace nightshift::scheduler
