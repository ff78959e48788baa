#include "worker/daemon/worker.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "worker/daemon/fake_engine.h"
#include "worker/daemon/test_util.h"

namespace nightshift::worker {
namespace {

using testing::FakeEngine;
using testing::MakeStoriesModel;
using testing::TempDir;

// Records what the runner sends.
class RecordingLink : public SchedulerLink {
 public:
  void SendPass(const api::PassProgress& pass) override {
    passes.push_back(pass);
    order.push_back("pass");
  }
  void SendResults(std::vector<JobOutcome> r) override {
    results.push_back(std::move(r));
    order.push_back("results");
  }
  void SendHandBack(int64_t batch_id, std::vector<int64_t> ids, bool draining) override {
    hand_backs.push_back({batch_id, std::move(ids), draining});
    order.push_back("hand_back");
  }
  void SendWithdraw(const std::string& model, const std::string& reason) override {
    withdrawals.push_back({model, reason});
    order.push_back("withdraw");
  }
  void SendCouldNotRun(int64_t batch_id, std::vector<int64_t> ids,
                       const std::string& error) override {
    could_not_run.push_back({batch_id, std::move(ids), error});
    order.push_back("could_not_run");
  }
  void SendModelHealth(const std::string& model, const std::string& unhealthy) override {
    health.push_back({model, unhealthy});
    order.push_back(unhealthy.empty() ? "healthy" : "unhealthy");
  }

  struct HandBack {
    int64_t batch_id;
    std::vector<int64_t> ids;
    bool draining;
  };
  std::vector<api::PassProgress> passes;
  std::vector<std::vector<JobOutcome>> results;
  std::vector<HandBack> hand_backs;
  struct CouldNotRun {
    int64_t batch_id;
    std::vector<int64_t> ids;
    std::string error;
  };
  std::vector<CouldNotRun> could_not_run;
  std::vector<std::pair<std::string, std::string>> health;  // model, unhealthy reason
  std::vector<std::pair<std::string, std::string>> withdrawals;
  std::vector<std::string> order;  // every message, in the order sent

  std::map<int64_t, JobOutcome> Outcomes() const {
    std::map<int64_t, JobOutcome> all;
    for (const auto& batch : results) {
      for (const JobOutcome& o : batch) {
        EXPECT_EQ(all.count(o.job_id), 0u) << "job " << o.job_id << " reported twice";
        all[o.job_id] = o;
      }
    }
    return all;
  }
};

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeStoriesModel(root_.path(), "alpha");
    MakeStoriesModel(root_.path(), "beta");
    CatalogOptions options;
    options.roots = {root_.path()};
    options.read_bytes_per_second = {1e9};
    options.memory_budget_bytes = 1ull << 30;
    options.kv_budget_bytes = 1 << 20;
    auto catalog = ScanModelRoots(options);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    catalog_ = std::move(*catalog);
  }

  std::unique_ptr<Worker> MakeWorker(WorkerOptions options = {}, WorkerMetrics* metrics = nullptr) {
    EngineFactory factory = [this](const ModelEntry& model,
                                   uint64_t kv) -> StatusOr<std::unique_ptr<BatchEngine>> {
      opened_.push_back(model.offer.name);
      if (!open_error_.ok()) return open_error_;
      auto engine = std::make_unique<FakeEngine>();
      engine->kv_budget = kv;
      engine->step_error = step_error_;
      if (next_token_) engine->next_token = next_token_;
      return std::unique_ptr<BatchEngine>(std::move(engine));
    };
    return std::make_unique<Worker>(&catalog_, factory, &link_, metrics, options);
  }

  static BatchAssignment Batch(int64_t id, const std::string& model, std::vector<int64_t> jobs,
                               int32_t max_new_tokens = 2, bool top_up = false) {
    BatchAssignment batch;
    batch.batch_id = id;
    batch.model = model;
    batch.top_up = top_up;
    for (int64_t job_id : jobs) {
      JobAssignment job;
      job.job_id = job_id;
      job.prompt = {1, 2, 3};
      job.max_new_tokens = max_new_tokens;
      batch.jobs.push_back(job);
    }
    return batch;
  }

  static void RunUntilIdle(Worker& worker) {
    for (int i = 0; i < 100 && worker.RunOnce(); ++i) {
    }
  }

  TempDir root_;
  Catalog catalog_;
  RecordingLink link_;
  std::vector<std::string> opened_;
  Status open_error_;
  Status step_error_;
  std::function<engine::TokenId(const engine::SequenceRequest&, int64_t)> next_token_;
};

TEST_F(WorkerTest, RunsABatchReportingEveryPassAndEachPassesResults) {
  auto worker = MakeWorker();
  worker->Assign(Batch(10, "alpha", {1, 2}, /*max_new_tokens=*/3));
  ASSERT_TRUE(worker->RunOnce());
  EXPECT_EQ(worker->RunningBatches(), std::vector<int64_t>{10});
  EXPECT_EQ(worker->OpenModel(), "alpha");
  RunUntilIdle(*worker);

  ASSERT_EQ(link_.passes.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const api::PassProgress& p = link_.passes[i];
    EXPECT_EQ(p.batch_id, 10);
    EXPECT_EQ(p.pass_index, i);
    EXPECT_EQ(p.mode, "streaming");
    EXPECT_EQ(p.sequences, 2);
    EXPECT_EQ(p.bytes_read, 1000);
    EXPECT_EQ(p.generated, (std::map<int64_t, int64_t>{{1, i + 1}, {2, i + 1}}));
  }
  EXPECT_TRUE(link_.passes[0].want_top_up);
  EXPECT_EQ(link_.passes[0].free_kv_bytes, (1 << 20) - 2 * (3 + 3) * 8);
  ASSERT_EQ(link_.results.size(), 1u);  // both finished in the last pass: one message
  EXPECT_EQ(link_.results[0].size(), 2u);
  // A pass's results go before its report, so the room they free counts at
  // the top-up the report asks for.
  EXPECT_EQ(link_.order, (std::vector<std::string>{"pass", "pass", "results", "pass"}));
  EXPECT_TRUE(link_.Outcomes()[1].ok);
  EXPECT_EQ(link_.Outcomes()[1].output.token_ids.size(), 3u);
  EXPECT_TRUE(worker->RunningBatches().empty());
  EXPECT_TRUE(link_.withdrawals.empty());
}

TEST_F(WorkerTest, KeepsTheCheckpointOpenAcrossBatchesOfTheSameModel) {
  auto worker = MakeWorker();
  worker->Assign(Batch(1, "alpha", {1}));
  RunUntilIdle(*worker);
  worker->Assign(Batch(2, "alpha", {2}));
  RunUntilIdle(*worker);
  EXPECT_EQ(opened_, std::vector<std::string>{"alpha"});
  worker->Assign(Batch(3, "beta", {3}));
  RunUntilIdle(*worker);
  EXPECT_EQ(opened_, (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(worker->OpenModel(), "beta");
  EXPECT_EQ(link_.Outcomes().size(), 3u);
}

TEST_F(WorkerTest, TopUpsJoinTheRunningBatchAndCancelsDropJobs) {
  auto worker = MakeWorker();
  worker->Assign(Batch(4, "alpha", {1, 2}, /*max_new_tokens=*/4));
  worker->RunOnce();
  worker->Assign(Batch(4, "alpha", {3}, /*max_new_tokens=*/1, /*top_up=*/true));
  worker->Cancel({4, {2}, "cancelled by the client"});
  worker->RunOnce();
  const api::PassProgress& second = link_.passes.back();
  EXPECT_EQ(second.pass_index, 1);
  EXPECT_EQ(second.sequences, 2);  // 1 and the top-up 3
  EXPECT_EQ(second.generated.count(3), 1u);
  EXPECT_EQ(second.generated.count(2), 0u);
  RunUntilIdle(*worker);
  auto outcomes = link_.Outcomes();
  EXPECT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes.count(2), 0u);
  EXPECT_EQ(outcomes[1].output.token_ids.size(), 4u);
  EXPECT_EQ(outcomes[3].output.token_ids.size(), 1u);
  // A cancel for another batch changes nothing.
  worker->Assign(Batch(5, "alpha", {6}));
  worker->Cancel({99, {6}, ""});
  RunUntilIdle(*worker);
  EXPECT_TRUE(link_.Outcomes()[6].ok);
}

TEST_F(WorkerTest, ACheckpointFailingToOpenFailsTheBatchAndWithdrawsTheModel) {
  open_error_ = DataLoss("model.safetensors: header length past the file");
  auto worker = MakeWorker();
  worker->Assign(Batch(1, "alpha", {1, 2}));
  RunUntilIdle(*worker);
  auto outcomes = link_.Outcomes();
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_FALSE(outcomes[1].ok);
  EXPECT_NE(outcomes[1].error.find("header length past the file"), std::string::npos);
  ASSERT_EQ(link_.withdrawals.size(), 1u);
  EXPECT_EQ(link_.withdrawals[0].first, "alpha");
  EXPECT_EQ(worker->WithdrawnModels(), std::set<std::string>{"alpha"});
  EXPECT_TRUE(worker->RunningBatches().empty());
  // The withdrawal goes first: the failed results make the worker idle for
  // the scheduler, which would otherwise lease it the model again.
  EXPECT_EQ(link_.order, (std::vector<std::string>{"withdraw", "results"}));

  // An assignment of it sent before the scheduler saw the withdrawal never
  // ran here: it is handed back (another worker may serve the model), not
  // failed, and the checkpoint is not opened again. Other models still open.
  open_error_ = Status::Ok();
  worker->Assign(Batch(2, "alpha", {3}));
  worker->Assign(Batch(3, "beta", {4}));
  RunUntilIdle(*worker);
  EXPECT_EQ(opened_, (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(link_.Outcomes().count(3), 0u);
  ASSERT_EQ(link_.hand_backs.size(), 1u);
  EXPECT_EQ(link_.hand_backs[0].batch_id, 2);
  EXPECT_EQ(link_.hand_backs[0].ids, std::vector<int64_t>{3});
  EXPECT_FALSE(link_.hand_backs[0].draining);
  EXPECT_EQ(link_.withdrawals.size(), 1u);
  EXPECT_TRUE(link_.Outcomes()[4].ok);
}

TEST_F(WorkerTest, AFailingPassFailsTheBatchAndTheWorkerGoesOn) {
  step_error_ = Internal("layer 3: shapes do not match");
  auto worker = MakeWorker();
  worker->Assign(Batch(1, "alpha", {1}));
  RunUntilIdle(*worker);
  EXPECT_FALSE(link_.Outcomes()[1].ok);
  EXPECT_NE(link_.Outcomes()[1].error.find("shapes do not match"), std::string::npos);
  EXPECT_EQ(link_.withdrawals.size(), 1u);
  EXPECT_TRUE(link_.could_not_run.empty());
  step_error_ = Status::Ok();
  worker->Assign(Batch(2, "beta", {2}));
  RunUntilIdle(*worker);
  EXPECT_TRUE(link_.Outcomes()[2].ok);
}

// A disk that fails under a pass: the jobs are not failed but handed back
// with the error (each costs an attempt at the scheduler), the model is
// unhealthy (reported before the hand-back, in the metrics, and in a
// reconnect's hello) and its assignments are handed back while other models
// run; after unhealthy_seconds it is offered again and its next batch
// reopens the checkpoint.
TEST_F(WorkerTest, ACheckpointReadErrorMidPassHandsTheJobsBackAndTheModelIsUnhealthyForAWhile) {
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(registry, "w1");
  step_error_ = DataLoss("model.safetensors: read at offset 4096 failed: Input/output error");
  WorkerOptions options;
  options.unhealthy_seconds = 0.3;
  auto worker = MakeWorker(options, &metrics);
  worker->Assign(Batch(1, "alpha", {1, 2}));
  worker->RunOnce();
  EXPECT_TRUE(link_.Outcomes().empty()) << "no job failed";
  EXPECT_TRUE(link_.withdrawals.empty());
  ASSERT_EQ(link_.could_not_run.size(), 1u);
  EXPECT_EQ(link_.could_not_run[0].batch_id, 1);
  EXPECT_EQ(link_.could_not_run[0].ids, (std::vector<int64_t>{1, 2}));
  EXPECT_NE(link_.could_not_run[0].error.find("Input/output error"), std::string::npos);
  EXPECT_EQ(link_.order, (std::vector<std::string>{"unhealthy", "could_not_run"}));
  ASSERT_EQ(worker->UnhealthyModels().count("alpha"), 1u);
  EXPECT_NE(worker->UnhealthyModels()["alpha"].find("Input/output error"), std::string::npos);
  EXPECT_TRUE(worker->RunningBatches().empty());
  EXPECT_EQ(worker->OpenModel(), "");
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  const std::string mw = "{model=\"alpha\",worker=\"w1\"}";
  EXPECT_NE(text.find("nightshift_checkpoint_read_errors_total" + mw + " 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("nightshift_model_unhealthy" + mw + " 1"), std::string::npos) << text;

  // While unhealthy: an assignment of it is handed back (not run, not
  // failed); another model runs.
  step_error_ = Status::Ok();
  worker->Assign(Batch(2, "alpha", {3}));
  worker->Assign(Batch(3, "beta", {4}));
  RunUntilIdle(*worker);
  ASSERT_EQ(link_.hand_backs.size(), 1u);
  EXPECT_EQ(link_.hand_backs[0].ids, std::vector<int64_t>{3});
  EXPECT_FALSE(link_.hand_backs[0].draining);
  EXPECT_TRUE(link_.Outcomes()[4].ok);
  EXPECT_EQ(link_.Outcomes().count(3), 0u);

  // Then it is offered again, and runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  worker->RunOnce();
  ASSERT_EQ(link_.health.size(), 2u);
  EXPECT_EQ(link_.health[1], std::make_pair(std::string("alpha"), std::string()));
  EXPECT_TRUE(worker->UnhealthyModels().empty());
  worker->Assign(Batch(5, "alpha", {5}));
  RunUntilIdle(*worker);
  EXPECT_TRUE(link_.Outcomes()[5].ok);
  EXPECT_EQ(opened_, (std::vector<std::string>{"alpha", "beta", "alpha"}));
  const std::string after = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(after.find("nightshift_model_unhealthy" + mw + " 0"), std::string::npos) << after;
}

TEST(IsCheckpointReadErrorTest, ReadFailuresAreAndOtherErrorsAreNot) {
  EXPECT_TRUE(IsCheckpointReadError(DataLoss("x: file ends before offset 8")));
  EXPECT_TRUE(IsCheckpointReadError(Unavailable("x: read failed")));
  EXPECT_FALSE(IsCheckpointReadError(Internal("a bug")));
  EXPECT_FALSE(IsCheckpointReadError(ResourceExhausted("KV budget")));
  EXPECT_FALSE(IsCheckpointReadError(Status::Ok()));
}

TEST_F(WorkerTest, UnknownModelFailsItsJobsWithoutAWithdrawal) {
  auto worker = MakeWorker();
  worker->Assign(Batch(1, "../alpha", {1}));
  RunUntilIdle(*worker);
  EXPECT_FALSE(link_.Outcomes()[1].ok);
  EXPECT_NE(link_.Outcomes()[1].error.find("not served"), std::string::npos);
  EXPECT_TRUE(link_.withdrawals.empty());
  EXPECT_TRUE(opened_.empty());
}

// What the scan checked is checked again when the checkpoint is opened: a
// config.json swapped for a link out of the root after the advert is never
// read; the batch fails with the reason and the model is withdrawn.
TEST_F(WorkerTest, AConfigLinkedOutOfTheRootAfterTheScanIsNotOpened) {
  TempDir outside;
  const std::string config = root_.file("alpha/config.json");
  std::filesystem::copy_file(config, outside.file("config.json"));
  std::filesystem::remove(config);
  std::filesystem::create_symlink(outside.file("config.json"), config);
  auto worker = MakeWorker();
  worker->Assign(Batch(1, "alpha", {1}));
  RunUntilIdle(*worker);
  EXPECT_TRUE(opened_.empty());
  ASSERT_EQ(link_.Outcomes().count(1), 1u);
  EXPECT_FALSE(link_.Outcomes()[1].ok);
  EXPECT_NE(link_.Outcomes()[1].error.find("outside the model root"), std::string::npos)
      << link_.Outcomes()[1].error;
  EXPECT_EQ(link_.withdrawals.size(), 1u);
}

TEST_F(WorkerTest, DrainHandsBackTheRestWithDraining) {
  auto worker = MakeWorker();
  worker->Assign(Batch(8, "alpha", {1, 2}, /*max_new_tokens=*/10));
  worker->RunOnce();
  worker->Assign(Batch(8, "alpha", {3}, 10, /*top_up=*/true));
  std::atomic<bool> stop{true};
  worker->Run(stop);  // stop already set: drains at once
  ASSERT_EQ(link_.hand_backs.size(), 2u);
  EXPECT_EQ(link_.hand_backs[0].ids, std::vector<int64_t>{3});  // the queued top-up
  EXPECT_EQ(link_.hand_backs[1].batch_id, 8);
  EXPECT_EQ(link_.hand_backs[1].ids, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(link_.hand_backs[1].draining);
  EXPECT_TRUE(link_.results.empty());
  EXPECT_TRUE(worker->RunningBatches().empty());
}

TEST_F(WorkerTest, MinPassSecondsSlowsPasses) {
  auto worker = MakeWorker({/*min_pass_seconds=*/0.05});
  worker->Assign(Batch(1, "alpha", {1}, /*max_new_tokens=*/2));
  const auto start = std::chrono::steady_clock::now();
  RunUntilIdle(*worker);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(elapsed, 0.1);
  ASSERT_EQ(link_.passes.size(), 2u);
  EXPECT_GE(link_.passes[0].seconds, 0.05);
}

// The scheduler tops up a batch when a pass report says KV is free; when the
// top-up arrives after the batch's last job finished, it still joins that
// batch: pass indices go on (the scheduler keeps one progress row per pass
// index of a batch) and the checkpoint is not opened again.
TEST_F(WorkerTest, ATopUpOfABatchThatJustRanEmptyContinuesItsPasses) {
  auto worker = MakeWorker();
  worker->Assign(Batch(7, "alpha", {1}, /*max_new_tokens=*/1));
  RunUntilIdle(*worker);
  ASSERT_EQ(link_.passes.size(), 1u);
  EXPECT_TRUE(link_.passes[0].want_top_up);
  worker->Assign(Batch(7, "alpha", {2}, /*max_new_tokens=*/1, /*top_up=*/true));
  RunUntilIdle(*worker);
  ASSERT_EQ(link_.passes.size(), 2u);
  EXPECT_EQ(link_.passes[1].batch_id, 7);
  EXPECT_EQ(link_.passes[1].pass_index, 1);
  EXPECT_TRUE(link_.Outcomes()[2].ok);
  // Another batch counts from 0 again.
  worker->Assign(Batch(8, "alpha", {3}, /*max_new_tokens=*/1));
  RunUntilIdle(*worker);
  ASSERT_EQ(link_.passes.size(), 3u);
  EXPECT_EQ(link_.passes[2].pass_index, 0);
  EXPECT_EQ(opened_, std::vector<std::string>{"alpha"});
}

// SIGTERM during a pass: the scheduler hears "draining" before that pass's
// report and results (which would otherwise make it lease this worker more),
// the report asks for no top-up, and the rest is handed back after.
TEST_F(WorkerTest, ADrainIsAnnouncedBeforeTheLastPassesResults) {
  std::atomic<bool> stop{false};
  next_token_ = [&](const engine::SequenceRequest&, int64_t step) {
    if (step == 1) stop = true;  // the signal arrives during the second pass
    return static_cast<engine::TokenId>('a' + step);
  };
  auto worker = MakeWorker();
  worker->Assign(Batch(3, "alpha", {1}, /*max_new_tokens=*/2));
  worker->Assign(Batch(3, "alpha", {2}, /*max_new_tokens=*/10, /*top_up=*/true));
  worker->Run(stop);
  EXPECT_EQ(link_.order,
            (std::vector<std::string>{"pass", "hand_back", "results", "pass", "hand_back"}));
  ASSERT_EQ(link_.hand_backs.size(), 2u);
  EXPECT_EQ(link_.hand_backs[0].batch_id, 3);
  EXPECT_TRUE(link_.hand_backs[0].ids.empty());
  EXPECT_TRUE(link_.hand_backs[0].draining);
  ASSERT_EQ(link_.passes.size(), 2u);
  EXPECT_FALSE(link_.passes[1].want_top_up);
  EXPECT_TRUE(link_.Outcomes()[1].ok);
  EXPECT_EQ(link_.hand_backs[1].ids, std::vector<int64_t>{2});
  EXPECT_TRUE(link_.hand_backs[1].draining);
}

// An assignment the scheduler sent before it saw the drain reaches the worker
// after it: it is handed back at once instead of waiting, leased, for its
// lease to expire (which would cost the jobs an attempt).
TEST_F(WorkerTest, AssignmentsArrivingAfterTheDrainAreHandedBack) {
  auto worker = MakeWorker();
  std::atomic<bool> stop{true};
  worker->Run(stop);
  ASSERT_EQ(link_.hand_backs.size(), 1u);  // idle: only the drain notice
  EXPECT_TRUE(link_.hand_backs[0].draining);
  worker->Assign(Batch(9, "alpha", {4, 5}));
  ASSERT_EQ(link_.hand_backs.size(), 2u);
  EXPECT_EQ(link_.hand_backs[1].batch_id, 9);
  EXPECT_EQ(link_.hand_backs[1].ids, (std::vector<int64_t>{4, 5}));
  EXPECT_TRUE(link_.hand_backs[1].draining);
  EXPECT_FALSE(worker->RunOnce());
  EXPECT_TRUE(opened_.empty());
}

// nightshift_kv_in_use_bytes follows the batch between passes too: jobs
// cancelled (or handed back, or failed) free their KV at once.
TEST_F(WorkerTest, KvInUseGaugeDropsWhenJobsLeaveBetweenPasses) {
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(registry, "w1");
  auto worker = MakeWorker({}, &metrics);
  auto gauge = [&] {
    const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
    const std::string key = "nightshift_kv_in_use_bytes{worker=\"w1\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos
               ? std::string("absent")
               : text.substr(at + key.size(), text.find('\n', at) - at - key.size());
  };
  worker->Assign(Batch(2, "alpha", {1, 2}, /*max_new_tokens=*/10));
  worker->RunOnce();
  EXPECT_EQ(gauge(), std::to_string(2 * (3 + 10) * 8));
  worker->Cancel({2, {1, 2}, "cancelled by a client"});
  worker->RunOnce();
  EXPECT_EQ(gauge(), "0");
}

}  // namespace
}  // namespace nightshift::worker
