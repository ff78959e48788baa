// The real nightshift-scheduler and the real nightshift-worker over gRPC on
// loopback, serving stories260k (llama2.c's layout) with a real
// tokenizer: generation, sampling with logprobs, chat and classification
// jobs each succeed once with the outputs the engine gives run directly;
// /metrics is served; SIGTERM drains mid-batch and another worker finishes
// the job; a checkpoint corrupted after it was advertised fails its jobs
// with the reason while the worker stays up.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/metrics_test_util.h"
#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "scheduler/prompt_encoder.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "worker/daemon/model_catalog.h"
#include "worker/daemon/test_util.h"
#include "worker/engine/engine.h"

namespace nightshift::worker {
namespace {

namespace fs = std::filesystem;
using testing::MakeStoriesModel;
using testing::TempDir;
using testutil::BinPath;
using testutil::Process;

bool WaitFor(const std::function<bool()>& done, double timeout_seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

class WorkerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.file("models"));
    model_dir_ = MakeStoriesModel(dir_.file("models"), "stories");
  }

  void TearDown() override {
    if (HasFailure()) {
      for (const auto& p : processes_) std::cerr << "---- " << p->pid() << " log:\n" << p->Log();
    }
  }

  std::string StartScheduler(const std::string& listen = "127.0.0.1:0",
                             const std::string& lease_seconds = "5",
                             std::vector<std::string> extra = {}) {
    std::vector<std::string> argv =
        testutil::SchedulerArgv(dir_.file("state.db"), lease_seconds, "0.2", listen);
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::Start(argv, dir_.file("scheduler.log"));
    EXPECT_NE(p, nullptr);
    const std::string address = testutil::WaitForListenAddress(*p, 20);
    EXPECT_FALSE(address.empty()) << p->Log();
    scheduler_ = p.get();
    processes_.push_back(std::move(p));
    return address;
  }

  // Starts a worker and, when `wait_attached`, waits for its attach.
  Process* StartWorker(const std::string& address, const std::string& id,
                       std::vector<std::string> extra = {}, bool wait_attached = true) {
    std::vector<std::string> argv = {BinPath("nightshift-worker"),
                                     "--scheduler",
                                     address,
                                     "--id",
                                     id,
                                     "--model-root",
                                     dir_.file("models"),
                                     "--memory-budget",
                                     "1G",
                                     "--device",
                                     "cpu",
                                     "--threads",
                                     "1",
                                     "--state-dir",
                                     dir_.file("state"),
                                     "--metrics-port",
                                     "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::Start(argv, dir_.file(id + ".log"));
    EXPECT_NE(p, nullptr);
    processes_.push_back(std::move(p));
    Process* worker = processes_.back().get();
    if (wait_attached) {
      EXPECT_TRUE(WaitForLog(worker, "attached to", 60)) << worker->Log();
    }
    return worker;
  }

  static bool WaitForLog(Process* p, const std::string& needle, double timeout_seconds) {
    return WaitFor([&] { return p->Log().find(needle) != std::string::npos; }, timeout_seconds);
  }

  std::unique_ptr<v1::JobService::Stub> Jobs(const std::string& address,
                                             api::ConnectOptions options = {}) {
    options.address = address;
    auto channel = api::Connect(options);
    EXPECT_TRUE(channel.ok());
    return v1::JobService::NewStub(*channel);
  }

  int64_t Submit(v1::JobService::Stub* stub, const std::vector<v1::JobRequest>& jobs) {
    v1::SubmitJobsRequest request;
    for (const auto& job : jobs) *request.add_jobs() = job;
    v1::SubmitJobsResponse response;
    grpc::ClientContext ctx;
    api::AddToken(&ctx, client_token_);
    grpc::Status status = stub->SubmitJobs(&ctx, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.submission_id();
  }

  v1::Submission GetSubmission(v1::JobService::Stub* stub, int64_t id) {
    v1::GetSubmissionRequest request;
    request.set_submission_id(id);
    v1::Submission submission;
    grpc::ClientContext ctx;
    api::AddToken(&ctx, client_token_);
    EXPECT_TRUE(stub->GetSubmission(&ctx, request, &submission).ok());
    return submission;
  }

  std::vector<v1::Job> ListJobs(v1::JobService::Stub* stub, int64_t submission) {
    v1::ListJobsRequest request;
    request.set_submission_id(submission);
    request.set_with_output(true);
    v1::ListJobsResponse response;
    grpc::ClientContext ctx;
    api::AddToken(&ctx, client_token_);
    EXPECT_TRUE(stub->ListJobs(&ctx, request, &response).ok());
    return {response.jobs().begin(), response.jobs().end()};
  }

  bool Done(v1::JobService::Stub* stub, int64_t submission, double timeout_seconds) {
    return WaitFor([&] { return GetSubmission(stub, submission).done(); }, timeout_seconds);
  }

  static v1::JobRequest Completion(const std::string& custom_id, const std::string& text,
                                   int max_new_tokens) {
    v1::JobRequest job;
    job.set_custom_id(custom_id);
    job.set_model("stories");
    job.set_url("/v1/completions");
    job.set_text(text);
    job.set_max_new_tokens(max_new_tokens);
    job.mutable_sampling()->set_temperature(0);
    return job;
  }

  TempDir dir_;
  std::string model_dir_;
  std::vector<std::unique_ptr<Process>> processes_;
  Process* scheduler_ = nullptr;
  std::string client_token_;  // sent with every JobService call
};

// The same job run on the engine directly, in one batch like the worker's.
struct Reference {
  std::vector<engine::SequenceResult> results;  // in request order
};

Reference RunDirectly(const std::string& root, const std::string& model_dir,
                      const std::vector<v1::JobRequest>& jobs, const std::string& cache_dir) {
  auto files = ReadTokenizerFiles(root, model_dir);
  EXPECT_TRUE(files.ok());
  auto encoder = scheduler::PromptEncoder::Create(*files, cache_dir);
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  engine::EngineOptions options;
  options.threads = 1;
  auto eng = engine::Engine::Open(model_dir, options);
  EXPECT_TRUE(eng.ok()) << eng.status().ToString();
  std::vector<engine::SequenceId> ids;
  for (const v1::JobRequest& job : jobs) {
    api::JobSpec spec;
    spec.custom_id = job.custom_id();
    spec.model = job.model();
    spec.endpoint = job.url() == "/v1/chat/completions" ? api::Endpoint::kChatCompletions
                                                        : api::Endpoint::kCompletions;
    if (job.has_chat()) {
      spec.prompt_kind = api::PromptKind::kChat;
      for (const auto& m : job.chat().messages()) spec.messages.push_back({m.role(), m.content()});
    } else {
      spec.prompt_kind = api::PromptKind::kText;
      spec.prompt_text = job.text();
    }
    spec.labels.assign(job.labels().begin(), job.labels().end());
    auto tokens = (*encoder)->Encode(spec);
    EXPECT_TRUE(tokens.ok()) << tokens.status().ToString();
    engine::SequenceRequest r;
    r.prompt = tokens->prompt;
    r.labels = tokens->labels;
    r.max_new_tokens = job.max_new_tokens();
    r.sampling.temperature = job.sampling().temperature();
    r.sampling.seed = job.sampling().seed();
    r.logprobs = job.logprobs();
    r.top_logprobs = job.top_logprobs();
    auto id = (*eng)->Add(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  std::map<engine::SequenceId, engine::SequenceResult> by_id;
  while ((*eng)->active() > 0) {
    EXPECT_TRUE((*eng)->Step().ok());
    for (auto& r : (*eng)->TakeFinished()) by_id[r.id] = std::move(r);
  }
  Reference ref;
  for (engine::SequenceId id : ids) ref.results.push_back(by_id[id]);
  return ref;
}

TEST_F(WorkerIntegrationTest, JobsSucceedOnceWithTheEnginesOutputsAndMetricsAreServed) {
  const std::string address = StartScheduler();
  Process* worker = StartWorker(address, "w1", {"--read-bandwidth", "1e9"});
  auto stub = Jobs(address);

  std::vector<v1::JobRequest> jobs;
  jobs.push_back(Completion("greedy", "Once upon a time", 12));
  v1::JobRequest sampled = Completion("sampled", "The cat", 8);
  sampled.mutable_sampling()->set_temperature(0.8);
  sampled.mutable_sampling()->set_seed(7);
  sampled.set_logprobs(true);
  sampled.set_top_logprobs(2);
  jobs.push_back(sampled);
  v1::JobRequest classify = Completion("classify", "is it ok?", 0);
  classify.add_labels(" yes");
  classify.add_labels(" no");
  jobs.push_back(classify);
  v1::JobRequest chat = Completion("chat", "", 6);
  chat.set_url("/v1/chat/completions");
  auto* message = chat.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("hi");
  jobs.push_back(chat);

  const int64_t submission = Submit(stub.get(), jobs);
  ASSERT_TRUE(Done(stub.get(), submission, 60)) << worker->Log();
  const std::vector<v1::Job> done = ListJobs(stub.get(), submission);
  ASSERT_EQ(done.size(), jobs.size());
  const Reference ref =
      RunDirectly(dir_.file("models"), model_dir_, jobs, dir_.file("encoder-cache"));
  auto tok = tokenizer::Tokenizer::FromModelDir(model_dir_);
  ASSERT_TRUE(tok.ok());
  for (size_t i = 0; i < done.size(); ++i) {
    const v1::Job& job = done[i];
    const engine::SequenceResult& expected = ref.results[i];
    SCOPED_TRACE(job.custom_id());
    ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
    EXPECT_EQ(job.attempt(), 0);
    const v1::JobOutput& out = job.output();
    EXPECT_EQ(out.prompt_tokens(), static_cast<int64_t>(expected.prompt.size()));
    if (!expected.labels.empty()) {
      EXPECT_EQ(out.finish_reason(), "label");
      ASSERT_EQ(out.labels_size(), 2);
      for (int k = 0; k < 2; ++k) {
        EXPECT_NEAR(out.labels(k).logprob(), expected.labels[k].logprob, 1e-4);
      }
      EXPECT_EQ(out.text(), jobs[i].labels(static_cast<int>(expected.best_label)));
      continue;
    }
    const std::vector<int32_t> ids(out.token_ids().begin(), out.token_ids().end());
    EXPECT_EQ(ids, expected.generated);
    EXPECT_EQ(out.completion_tokens(), static_cast<int64_t>(expected.generated.size()));
    EXPECT_EQ(out.finish_reason(), engine::FinishReasonName(expected.finish_reason));
    // The text: every generated id the tokenizer knows (stories260k has 512
    // rows, the test tokenizer 262 ids), without the EOS (2).
    std::vector<int32_t> text_ids;
    for (int32_t id : expected.generated) {
      if (id != 2 && tok->IdToToken(id).has_value()) text_ids.push_back(id);
    }
    EXPECT_EQ(out.text(), *tok->Decode(text_ids, /*skip_special_tokens=*/true));
    ASSERT_EQ(out.logprobs_size(), static_cast<int>(expected.logprobs.size()));
    for (int k = 0; k < out.logprobs_size(); ++k) {
      const int32_t id = out.logprobs(k).token();
      EXPECT_EQ(id, expected.logprobs[k].token);
      EXPECT_NEAR(out.logprobs(k).logprob(), expected.logprobs[k].logprob, 1e-4);
      auto text = tok->Decode({id}, /*skip_special_tokens=*/false);
      EXPECT_EQ(out.logprobs(k).text(), text.ok() ? *text : "");
      EXPECT_EQ(out.logprobs(k).top_size(), 2);
    }
  }

  // /metrics: the port is in the log; the passes and tokens are counted.
  std::smatch match;
  const std::string log = worker->Log();
  ASSERT_TRUE(std::regex_search(log, match, std::regex("metrics listening on [0-9.]+:([0-9]+)")));
  const auto response = metrics::testing::HttpRequest(std::stoi(match[1].str()),
                                                      boost::beast::http::verb::get, "/metrics");
  const std::string& body = response.body();
  EXPECT_NE(body.find("nightshift_pass_duration_seconds_count{mode=\"resident\",model=\"stories\","
                      "worker=\"w1\"}"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("nightshift_generated_tokens_total{model=\"stories\",worker=\"w1\"}"),
            std::string::npos);
  EXPECT_NE(body.find("nightshift_read_bandwidth_bytes_per_second{worker=\"w1\"} 1000000000"),
            std::string::npos);
  EXPECT_NE(log.find("model stories advertised: resident"), std::string::npos);

  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0);
}

TEST_F(WorkerIntegrationTest, SigtermDrainsMidBatchAndAnotherWorkerFinishes) {
  const std::string address = StartScheduler();
  Process* first =
      StartWorker(address, "w1", {"--read-bandwidth", "1e9", "--min-pass-seconds", "0.2"});
  auto stub = Jobs(address);
  const int64_t submission = Submit(stub.get(), {Completion("long", "Once upon a time", 40)});
  ASSERT_TRUE(WaitForLog(first, "pass 1:", 30));
  first->Signal(SIGTERM);
  EXPECT_EQ(first->Wait(20), 0);
  EXPECT_NE(first->Log().find("draining: handing back 1 jobs"), std::string::npos);
  ASSERT_TRUE(WaitFor(
      [&] { return ListJobs(stub.get(), submission)[0].state() == v1::JOB_STATE_QUEUED; }, 10));

  Process* second = StartWorker(address, "w2", {"--read-bandwidth", "1e9"});
  ASSERT_TRUE(Done(stub.get(), submission, 60));
  const v1::Job job = ListJobs(stub.get(), submission)[0];
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.worker_id(), "w2");
  second->Signal(SIGTERM);
  EXPECT_EQ(second->Wait(20), 0);
}

TEST_F(WorkerIntegrationTest, ACancelledJobLeavesTheRunningBatch) {
  const std::string address = StartScheduler();
  Process* worker =
      StartWorker(address, "w1", {"--read-bandwidth", "1e9", "--min-pass-seconds", "0.2"});
  auto stub = Jobs(address);
  const int64_t submission = Submit(
      stub.get(), {Completion("cancel-me", "Once upon a time", 40), Completion("keep", "Once", 8)});
  ASSERT_TRUE(WaitForLog(worker, "pass 1:", 30));
  const int64_t cancel_id = ListJobs(stub.get(), submission)[0].id();
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest request;
    request.set_job_id(cancel_id);
    v1::Job reply;
    ASSERT_TRUE(stub->CancelJob(&ctx, request, &reply).ok());
  }
  ASSERT_TRUE(Done(stub.get(), submission, 30)) << worker->Log();
  const std::vector<v1::Job> jobs = ListJobs(stub.get(), submission);
  EXPECT_EQ(jobs[0].state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(jobs[1].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(jobs[1].output().completion_tokens(), 8);
  EXPECT_TRUE(WaitForLog(worker, "cancelled 1 jobs of batch", 5));
  // The cancelled sequence stopped: the batch ends with the other job, long
  // before the cancelled one's 40 passes.
  EXPECT_TRUE(WaitForLog(worker, "done after 8 passes", 5)) << worker->Log();
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0);
}

TEST_F(WorkerIntegrationTest, ResultsFinishedWhileTheSchedulerIsDownAreSentOnReconnect) {
  // A lease long enough to outlast the restart and the reconnect backoff.
  const std::string address = StartScheduler("127.0.0.1:0", "60");
  Process* worker =
      StartWorker(address, "w1", {"--read-bandwidth", "1e9", "--min-pass-seconds", "0.2"});
  int64_t submission = 0;
  {
    auto stub = Jobs(address);
    submission = Submit(stub.get(), {Completion("short", "Once upon a time", 5)});
  }
  ASSERT_TRUE(WaitForLog(worker, "pass 1:", 30));
  scheduler_->Signal(SIGKILL);
  scheduler_->Wait(10);
  // The batch goes on without the scheduler; its result waits.
  ASSERT_TRUE(WaitForLog(worker, "results kept for the reconnect: 1 jobs", 10)) << worker->Log();
  StartScheduler(address, "60");  // same database, same address
  auto stub = Jobs(address);
  ASSERT_TRUE(Done(stub.get(), submission, 60)) << worker->Log();
  const v1::Job job = ListJobs(stub.get(), submission)[0];
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.attempt(), 0);  // the lease held: nothing ran twice
  EXPECT_EQ(job.output().completion_tokens(), 5);
  const std::string log = worker->Log();
  EXPECT_NE(log.find("connection to the scheduler lost"), std::string::npos);
  EXPECT_NE(log.find("session 2"), std::string::npos);
  EXPECT_LT(log.find("session 2"), log.find("results sent: 1 jobs")) << log;
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0);
}

TEST_F(WorkerIntegrationTest, HeartbeatsKeepTheLeaseThroughPassesLongerThanIt) {
  const std::string address = StartScheduler("127.0.0.1:0", /*lease_seconds=*/"1");
  Process* worker =
      StartWorker(address, "w1", {"--read-bandwidth", "1e9", "--min-pass-seconds", "1.5"});
  auto stub = Jobs(address);
  const int64_t submission = Submit(stub.get(), {Completion("slow", "Once", 2)});
  ASSERT_TRUE(Done(stub.get(), submission, 30)) << worker->Log();
  const v1::Job job = ListJobs(stub.get(), submission)[0];
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.attempt(), 0);  // never expired, never re-run
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0);
}

TEST_F(WorkerIntegrationTest, AttachesOverTlsWithTheWorkerTokenOnly) {
  const std::string tls = testutil::DataPath("scheduler/tls/");
  const std::string address =
      StartScheduler("127.0.0.1:0", "5",
                     {"--tls-cert", tls + "cert.pem", "--tls-key", tls + "key.pem",
                      "--client-token", "client-secret", "--worker-token", "worker-secret"});
  Process* intruder = StartWorker(
      address, "intruder",
      {"--read-bandwidth", "1e9", "--token", "client-secret", "--tls-ca", tls + "cert.pem"},
      /*wait_attached=*/false);
  ASSERT_TRUE(WaitForLog(intruder, "cannot attach to the scheduler", 30)) << intruder->Log();
  EXPECT_EQ(intruder->Log().find("attached to"), std::string::npos);
  intruder->Signal(SIGTERM);
  EXPECT_EQ(intruder->Wait(20), 0);

  setenv("NIGHTSHIFT_WORKER_TOKEN", "worker-secret", 1);  // the token from the environment
  Process* worker =
      StartWorker(address, "w1", {"--read-bandwidth", "1e9", "--tls-ca", tls + "cert.pem"});
  unsetenv("NIGHTSHIFT_WORKER_TOKEN");
  client_token_ = "client-secret";
  auto stub = Jobs(address, {address, client_token_, true, tls + "cert.pem"});
  const int64_t submission = Submit(stub.get(), {Completion("tls", "Once", 3)});
  ASSERT_TRUE(Done(stub.get(), submission, 30)) << worker->Log();
  EXPECT_EQ(ListJobs(stub.get(), submission)[0].state(), v1::JOB_STATE_SUCCEEDED);
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0);
}

// A bad flag value stops the worker at once with exit status 2 and a line
// naming the flag, instead of being taken for its default.
TEST_F(WorkerIntegrationTest, BadFlagValuesAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--threads", "-2"},          {"--max-batch-jobs", "-1"},    {"--read-bandwidth", "-5"},
      {"--min-pass-seconds", "-1"}, {"--pass-token-budget", "-3"}, {"--kv-dtype", "f8"}};
  for (const auto& [flag, value] : bad) {
    SCOPED_TRACE(flag);
    auto p = Process::Start({BinPath("nightshift-worker"), "--scheduler", "127.0.0.1:1",
                             "--model-root", dir_.file("models"), flag, value},
                            dir_.file("bad-flag.log"));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->Wait(20), 2);
    EXPECT_NE(p->Log().find(flag + " must be"), std::string::npos) << p->Log();
  }
}

TEST_F(WorkerIntegrationTest, ACheckpointCorruptedAfterTheAdvertFailsItsJobsAndTheWorkerStaysUp) {
  MakeStoriesModel(dir_.file("models"), "healthy");
  const std::string address = StartScheduler();
  Process* worker = StartWorker(address, "w1", {"--read-bandwidth", "1e9"});
  fs::resize_file(fs::path(model_dir_) / "model.safetensors", 4096);
  auto stub = Jobs(address);
  const int64_t broken = Submit(stub.get(), {Completion("broken", "Once", 4)});
  ASSERT_TRUE(Done(stub.get(), broken, 30)) << worker->Log();
  const v1::Job failed = ListJobs(stub.get(), broken)[0];
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed.error().find("model.safetensors"), std::string::npos) << failed.error();
  EXPECT_TRUE(WaitForLog(worker, "withdrawing it", 5));

  v1::JobRequest other = Completion("other", "Once", 4);
  other.set_model("healthy");
  const int64_t fine = Submit(stub.get(), {other});
  ASSERT_TRUE(Done(stub.get(), fine, 30)) << worker->Log();
  EXPECT_EQ(ListJobs(stub.get(), fine)[0].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(worker->running());
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0);
}

}  // namespace
}  // namespace nightshift::worker
