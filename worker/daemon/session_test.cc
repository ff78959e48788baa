#include "worker/daemon/session.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "worker/daemon/fake_engine.h"
#include "worker/daemon/test_util.h"

namespace nightshift::worker {
namespace {

using std::chrono::seconds;

using SchedulerStream = grpc::ServerReaderWriter<v1::SchedulerMessage, v1::WorkerMessage>;

// Writes the welcome of session `session` (heartbeats every 60 s).
void Welcome(SchedulerStream* stream, int64_t session) {
  v1::SchedulerMessage welcome;
  welcome.mutable_welcome()->set_session(session);
  welcome.mutable_welcome()->set_heartbeat_seconds(60);
  stream->Write(welcome);
}

// A scheduler that welcomes the worker and then reads nothing until
// released, as a stuck or unreachable one does (the connection stays open).
class StallingScheduler final : public v1::WorkerService::Service {
 public:
  grpc::Status Attach(grpc::ServerContext* context, SchedulerStream* stream) override {
    v1::WorkerMessage hello;
    if (!stream->Read(&hello)) return grpc::Status::OK;
    Welcome(stream, 1);
    while (!released && !context->IsCancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    v1::WorkerMessage m;
    while (stream->Read(&m)) {
    }
    return grpc::Status::OK;
  }

  std::atomic<bool> released{false};
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&scheduler_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    scheduler_.released = true;
    server_->Shutdown(std::chrono::system_clock::now() + seconds(5));
  }

  SessionOptions Options() const {
    SessionOptions options;
    options.connect.address = "127.0.0.1:" + std::to_string(port_);
    options.info.id = "w1";
    options.info.device = "cpu";
    return options;
  }

  static bool WaitConnected(const Session& session) {
    const auto deadline = std::chrono::steady_clock::now() + seconds(10);
    while (!session.connected() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return session.connected();
  }

  StallingScheduler scheduler_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

std::vector<JobOutcome> LargeResult(int64_t job_id) {
  JobOutcome outcome;
  outcome.batch_id = 1;
  outcome.job_id = job_id;
  outcome.ok = true;
  outcome.output.text = std::string(1 << 20, 'x');
  return {outcome};
}

// The runner reports through the session and must never wait for the
// network (SchedulerLink: "must not block"): a scheduler that stops reading
// would stop every pass, and a SIGTERM drain would hang with it. Stop gives
// up on a write that cannot finish once its flush time is over.
TEST_F(SessionTest, AStalledSchedulerBlocksNeitherTheRunnerNorStop) {
  Catalog catalog;
  Worker worker(&catalog, EngineFactory(), nullptr, nullptr, {});
  Session session(Options(), &worker);
  worker.SetLink(&session);
  ASSERT_TRUE(session.Start().ok());
  ASSERT_TRUE(WaitConnected(session));

  // 32 MiB of results, far past what a peer that does not read accepts.
  auto sent = std::async(std::launch::async, [&] {
    for (int64_t job = 1; job <= 32; ++job) session.SendResults(LargeResult(job));
    session.SendHandBack(1, {99}, /*draining=*/true);
  });
  EXPECT_EQ(sent.wait_for(seconds(5)), std::future_status::ready)
      << "reporting results blocked on the network";
  auto stopped = std::async(std::launch::async, [&] { session.Stop(/*flush_seconds=*/0.5); });
  EXPECT_EQ(stopped.wait_for(seconds(10)), std::future_status::ready) << "Stop hung on a write";
  scheduler_.released = true;  // lets whatever still waits finish, so the test ends either way
  sent.get();
  stopped.get();
  EXPECT_FALSE(session.connected());
}

// A scheduler that records the results it is sent.
class RecordingScheduler final : public v1::WorkerService::Service {
 public:
  grpc::Status Attach(grpc::ServerContext*, SchedulerStream* stream) override {
    v1::WorkerMessage m;
    if (!stream->Read(&m)) return grpc::Status::OK;
    Welcome(stream, 1);
    while (stream->Read(&m)) {
      results += m.results().results_size();
      if (m.has_pass()) {
        std::lock_guard<std::mutex> lock(mu);
        pass_indexes.push_back(m.pass().pass_index());
      }
      v1::SchedulerMessage stored;  // as the scheduler acknowledges what it stored
      for (const auto& r : m.results().results()) stored.mutable_stored()->add_job_ids(r.job_id());
      if (m.has_results()) stream->Write(stored);
    }
    return grpc::Status::OK;
  }
  std::atomic<int> results{0};
  std::mutex mu;
  std::vector<int64_t> pass_indexes;  // of the pass reports received
};

// SIGTERM while the scheduler was away: Stop waits for results, and the
// session tries to reconnect at once instead of sleeping out a long backoff
// (up to 30 s) past the flush time, which lost the results.
TEST_F(SessionTest, StopRetriesAtOnceToDeliverResultsKeptForTheReconnect) {
  const int port = port_;
  server_->Shutdown(std::chrono::system_clock::now());  // nobody listens on the port now
  Catalog catalog;
  Worker worker(&catalog, EngineFactory(), nullptr, nullptr, {});
  SessionOptions options = Options();
  options.initial_backoff_seconds = 60;  // the first attach fails; the next try would be in 60 s
  Session session(options, &worker);
  worker.SetLink(&session);
  ASSERT_TRUE(session.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  session.SendResults(LargeResult(1));  // kept: not connected

  RecordingScheduler back;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials());
  builder.RegisterService(&back);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const auto start = std::chrono::steady_clock::now();
  session.Stop(/*flush_seconds=*/10);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(8));
  server->Shutdown(std::chrono::system_clock::now() + seconds(2));
  EXPECT_EQ(back.results, 1);
}

// Progress made while the scheduler was away reaches it on the reconnect:
// the newest pass report (it carries every job's tokens so far), not every
// one, and nothing else.
TEST_F(SessionTest, TheNewestPassReportMadeWhileDisconnectedIsSentOnTheReconnect) {
  const int port = port_;
  server_->Shutdown(std::chrono::system_clock::now());  // nobody listens on the port now
  Catalog catalog;
  Worker worker(&catalog, EngineFactory(), nullptr, nullptr, {});
  SessionOptions options = Options();
  options.initial_backoff_seconds = 0.2;
  options.max_backoff_seconds = 0.2;
  Session session(options, &worker);
  worker.SetLink(&session);
  ASSERT_TRUE(session.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_FALSE(session.connected());
  for (int64_t index : {3, 4}) {
    api::PassProgress pass;
    pass.batch_id = 7;
    pass.pass_index = index;
    pass.generated = {{70, index + 1}};
    session.SendPass(pass);
  }

  RecordingScheduler back;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials());
  builder.RegisterService(&back);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitConnected(session));
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(back.mu);
      if (!back.pass_indexes.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // nothing else follows
  session.Stop(/*flush_seconds=*/1);
  server->Shutdown(std::chrono::system_clock::now() + seconds(2));
  std::lock_guard<std::mutex> lock(back.mu);
  EXPECT_EQ(back.pass_indexes, std::vector<int64_t>{4});
}

// A scheduler that dies after receiving the first results, before
// committing them (the stream breaks), then comes back: it records the
// hello's running batches and the results of its second session.
class ForgetfulScheduler final : public v1::WorkerService::Service {
 public:
  grpc::Status Attach(grpc::ServerContext*, SchedulerStream* stream) override {
    v1::WorkerMessage m;
    if (!stream->Read(&m)) return grpc::Status::OK;
    const bool first = sessions++ == 0;
    if (!first)
      hello_batches.assign(m.hello().running_batches().begin(), m.hello().running_batches().end());
    Welcome(stream, sessions);
    while (stream->Read(&m)) {
      if (!m.has_results()) continue;
      if (first) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "died before committing");
      for (const auto& r : m.results().results()) committed.push_back(r.job_id());
    }
    return grpc::Status::OK;
  }
  std::atomic<int> sessions{0};
  std::vector<int64_t> hello_batches;  // of the second session
  std::vector<int64_t> committed;      // job ids, second session
};

// Results the worker wrote just before the scheduler died were never
// committed. The batch still runs here, so the reconnect's hello keeps its
// lease (heartbeats then extend it for good): unless the worker sends those
// results again, their jobs wait forever. A result the scheduler did commit
// comes back as a refused duplicate, which is harmless.
TEST_F(SessionTest, ResultsOfARunningBatchWrittenBeforeTheStreamBrokeAreSentAgain) {
  server_->Shutdown(std::chrono::system_clock::now());
  ForgetfulScheduler scheduler;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&scheduler);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  testing::TempDir root;
  testing::MakeStoriesModel(root.path(), "m");
  CatalogOptions catalog_options;
  catalog_options.roots = {root.path()};
  catalog_options.read_bytes_per_second = {1e9};
  catalog_options.memory_budget_bytes = 1ull << 30;
  auto catalog = ScanModelRoots(catalog_options);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  EngineFactory factory = [](const ModelEntry&,
                             uint64_t) -> StatusOr<std::unique_ptr<BatchEngine>> {
    return std::unique_ptr<BatchEngine>(std::make_unique<testing::FakeEngine>());
  };
  Worker worker(&*catalog, factory, nullptr, nullptr, {});
  SessionOptions options = Options();
  options.connect.address = "127.0.0.1:" + std::to_string(port);
  options.initial_backoff_seconds = 0.05;
  Session session(options, &worker);
  worker.SetLink(&session);

  // Batch 1 runs: job 1 finishes in the first pass, job 2 goes on.
  BatchAssignment batch;
  batch.batch_id = 1;
  batch.model = "m";
  for (int64_t id : {1, 2}) {
    JobAssignment job;
    job.job_id = id;
    job.prompt = {1, 2, 3};
    job.max_new_tokens = id == 1 ? 1 : 100;
    batch.jobs.push_back(job);
  }
  worker.Assign(batch);
  ASSERT_TRUE(session.Start().ok());
  ASSERT_TRUE(WaitConnected(session));
  ASSERT_TRUE(worker.RunOnce());  // job 1's result goes to the scheduler, which dies with it

  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (scheduler.committed.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  session.Stop(/*flush_seconds=*/1);
  server->Shutdown(std::chrono::system_clock::now() + seconds(2));
  EXPECT_GE(scheduler.sessions, 2);
  EXPECT_EQ(scheduler.hello_batches, std::vector<int64_t>{1});
  EXPECT_EQ(scheduler.committed, std::vector<int64_t>{1});
}

}  // namespace
}  // namespace nightshift::worker
