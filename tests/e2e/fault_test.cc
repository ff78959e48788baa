// Failures of the whole product on loopback, with real binaries: a worker
// killed with SIGKILL mid-batch, the scheduler killed with SIGKILL mid-run and
// restarted on the same database and port, and a checkpoint corrupted under a
// worker after it was advertised. Passes are slowed with --min-pass-seconds
// so each fault lands mid-batch.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <set>
#include <thread>

#include "scheduler/test_util.h"
#include "tests/e2e/cluster.h"

namespace nightshift::e2e {
namespace {

using testutil::TempDir;

class FaultTest : public ::testing::Test {
 protected:
  // Both models under one root, made once for the suite.
  static void SetUpTestSuite() {
    models_ = new TempDir;
    std::string error = MakeCheckpoint(LlamaMini(), models_->file(kLlama));
    if (error.empty()) error = MakeCheckpoint(QwenMini(), models_->file(kQwen));
    models_error_ = new std::string(error);
  }
  static void TearDownTestSuite() {
    delete models_;
    delete models_error_;
  }

  void SetUp() override { ASSERT_EQ(*models_error_, ""); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }

  // `count` jobs "job-0"... alternating between `models`: greedy completions
  // of `max_tokens` tokens, every third one (IsClassification) a
  // classification.
  std::string WriteBatch(int count, const std::vector<std::string>& models, int max_tokens) {
    std::vector<json> lines;
    for (int i = 0; i < count; ++i) {
      const std::string model = models[i % models.size()];
      const std::string id = "job-" + std::to_string(i);
      const std::string prompt = "Story " + std::to_string(i) + ": once upon a time";
      lines.push_back(IsClassification(id)
                          ? ClassifyLine(id, model, prompt + "? Answer:", {" yes", " no"})
                          : CompletionLine(id, model, prompt, max_tokens));
    }
    return WriteJsonLines(dir_.file("batch.jsonl"), lines);
  }
  static bool IsClassification(const std::string& custom_id) {
    return std::stoi(custom_id.substr(custom_id.find('-') + 1)) % 3 == 2;
  }

  // `nightshift results ID -o FILE`: the rows, checked to be one per
  // custom_id ("job-0" ... "job-<count-1>", in input order).
  std::vector<json> Results(int64_t submission, int count) {
    const std::string file = dir_.file("results.jsonl");
    Outcome run = cluster_.Nightshift("results " + std::to_string(submission) + " -o " + file);
    EXPECT_EQ(run.code, 0) << run.err;
    std::vector<json> rows = JsonLines(ReadFile(file));
    EXPECT_EQ(rows.size(), static_cast<size_t>(count));
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i]["custom_id"], "job-" + std::to_string(i)) << rows[i];
    }
    return rows;
  }

  // Every job succeeded, once, with an output and no error.
  void ExpectAllSucceededOnce(int64_t submission, int count) {
    json status = cluster_.Status(submission);
    EXPECT_TRUE(status.value("done", false)) << status;
    EXPECT_EQ(Int(status["counts"]["succeeded"]), count) << status;
    EXPECT_EQ(Int(status["counts"]["total"]), count) << status;
    for (const json& row : Results(submission, count)) {
      EXPECT_TRUE(row["error"].is_null()) << row;
      EXPECT_EQ(row["response"]["status_code"], 200) << row;
    }
  }

  // The jobs of the submission in `state` on `worker`, by id.
  std::set<std::string> JobsOn(int64_t submission, const std::string& worker) {
    std::set<std::string> ids;
    for (const json& job : cluster_.ListJobs(submission)) {
      const std::string state = job.value("state", "");
      if (job.value("worker_id", "") == worker &&
          (state == "JOB_STATE_LEASED" || state == "JOB_STATE_RUNNING")) {
        ids.insert(job.value("id", ""));
      }
    }
    return ids;
  }

  // True once one of `ids` reports a batch with at least one pass done.
  bool WaitForPasses(const std::set<std::string>& ids, double timeout_seconds) {
    return WaitUntil(
        [&] {
          for (const json& w : cluster_.Workers().value("workers", json::array())) {
            if (ids.count(w.value("id", "")) == 1 && w.contains("batch") &&
                Int(w["batch"].value("passes_done", json(0))) >= 1) {
              return true;
            }
          }
          return false;
        },
        timeout_seconds);
  }

  static TempDir* models_;
  static std::string* models_error_;
  TempDir dir_;
  Cluster cluster_{dir_.path()};
};

TempDir* FaultTest::models_ = nullptr;
std::string* FaultTest::models_error_ = nullptr;

TEST_F(FaultTest, AWorkerKilledMidBatchCostsTimeNotJobs) {
  ASSERT_EQ(cluster_.StartScheduler(/*lease_seconds=*/2), "");
  // 20 generation passes of at least 0.25 s: the batch runs for 5 s.
  ASSERT_NE(cluster_.StartWorker("w1", {models_->path()}, {"--min-pass-seconds", "0.25"}), nullptr);
  ASSERT_TRUE(cluster_.WaitForWorker("w1", {kLlama, kQwen}, 60));
  const int64_t id = cluster_.Submit(WriteBatch(24, {kLlama}, 20));
  ASSERT_GT(id, 0) << cluster_.last_error();

  ASSERT_TRUE(WaitForPasses({"w1"}, 60));
  const std::set<std::string> on_w1 = JobsOn(id, "w1");
  ASSERT_FALSE(on_w1.empty());
  cluster_.worker("w1")->Signal(SIGKILL);
  EXPECT_EQ(cluster_.worker("w1")->Wait(10), 128 + SIGKILL);

  ASSERT_NE(cluster_.StartWorker("w2", {models_->path()}), nullptr);
  Outcome watch = cluster_.Nightshift("watch " + std::to_string(id), 120);
  EXPECT_EQ(watch.code, 0) << watch.out << watch.err;
  ExpectAllSucceededOnce(id, 24);
  // Classifications finish in the first pass, so w1 may have delivered them
  // before it died; its generation jobs (20 passes) cannot have finished.
  int re_leased = 0;
  for (const json& job : cluster_.ListJobs(id)) {
    if (on_w1.count(job.value("id", "")) == 0 || IsClassification(job["custom_id"])) continue;
    EXPECT_EQ(job["worker_id"], "w2") << "re-leased to the other worker: " << job;
    EXPECT_GE(job.value("attempt", 0), 1) << "its lease on w1 was lost: " << job;
    ++re_leased;
  }
  EXPECT_GT(re_leased, 0);
}

TEST_F(FaultTest, TheSchedulerKilledMidRunRestartsAndEveryJobCompletesOnce) {
  ASSERT_EQ(cluster_.StartScheduler(/*lease_seconds=*/5), "");
  for (const char* worker : {"w1", "w2"}) {
    ASSERT_NE(cluster_.StartWorker(worker, {models_->path()}, {"--min-pass-seconds", "0.25"}),
              nullptr);
  }
  for (const char* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster_.WaitForWorker(worker, {kLlama, kQwen}, 60));
  }
  // 24 passes of at least 0.25 s: 6 s a batch.
  const int64_t id = cluster_.Submit(WriteBatch(40, {kLlama, kQwen}, 24));
  ASSERT_GT(id, 0) << cluster_.last_error();
  ASSERT_TRUE(WaitForPasses({"w1", "w2"}, 60));
  ASSERT_FALSE(cluster_.Submission(id).value("done", true)) << "the kill lands mid-run";

  const std::string address = cluster_.address();
  cluster_.KillScheduler();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the workers run on alone
  ASSERT_EQ(cluster_.StartScheduler(/*lease_seconds=*/5, address), "");
  ASSERT_EQ(cluster_.address(), address);
  for (const char* worker : {"w1", "w2"}) {
    EXPECT_TRUE(cluster_.WaitForWorker(worker, {kLlama, kQwen}, 60)) << worker << " reconnects";
  }
  Outcome watch = cluster_.Nightshift("watch " + std::to_string(id), 120);
  EXPECT_EQ(watch.code, 0) << watch.out << watch.err;
  ExpectAllSucceededOnce(id, 40);
  EXPECT_TRUE(cluster_.worker("w1")->running());
  EXPECT_TRUE(cluster_.worker("w2")->running());
}

// Results a worker sent that the scheduler never committed (it was frozen,
// then killed) must not be lost: after the restart every job still
// completes. SIGSTOP makes the window deterministic: the worker's first-pass
// results (the classifications) go into the socket of a scheduler that will
// never read them.
TEST_F(FaultTest, ResultsSentToASchedulerThatDiesBeforeCommittingThemAreNotLost) {
  ASSERT_EQ(cluster_.StartScheduler(/*lease_seconds=*/5), "");
  Process* worker = cluster_.StartWorker("w1", {models_->path()}, {"--min-pass-seconds", "0.25"});
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(cluster_.WaitForWorker("w1", {kLlama, kQwen}, 60));
  const int64_t id = cluster_.Submit(WriteBatch(12, {kLlama}, 8));
  ASSERT_GT(id, 0) << cluster_.last_error();

  auto logged = [&](const std::string& needle) {
    return WaitUntil([&] { return worker->Log().find(needle) != std::string::npos; }, 60);
  };
  ASSERT_TRUE(logged("batch 1 started"));
  cluster_.scheduler()->Signal(SIGSTOP);
  ASSERT_TRUE(logged("results sent"));  // pass 0 finished the 4 classifications
  // Time for the worker's writer to put them on the wire: from then on only
  // the worker can tell that the scheduler never committed them.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string address = cluster_.address();
  cluster_.KillScheduler();
  ASSERT_EQ(cluster_.StartScheduler(/*lease_seconds=*/5, address), "");
  EXPECT_TRUE(cluster_.WaitForWorker("w1", {kLlama, kQwen}, 60)) << "w1 reconnects";
  Outcome watch = cluster_.Nightshift("watch " + std::to_string(id), 60);
  EXPECT_EQ(watch.code, 0) << watch.out << watch.err;
  ExpectAllSucceededOnce(id, 12);
}

TEST_F(FaultTest, ACheckpointCorruptedAfterItWasAdvertisedFailsOnlyItsModelsJobs) {
  // w1 serves both models from its own root; w2 serves only the Qwen model.
  const std::string root1 = dir_.file("root1"), root2 = dir_.file("root2");
  ASSERT_EQ(MakeCheckpoint(LlamaMini(), root1 + "/" + kLlama), "");
  ASSERT_EQ(MakeCheckpoint(QwenMini(), root1 + "/" + kQwen), "");
  ASSERT_EQ(MakeCheckpoint(QwenMini(), root2 + "/" + kQwen), "");
  ASSERT_EQ(cluster_.StartScheduler(/*lease_seconds=*/2), "");
  ASSERT_NE(cluster_.StartWorker("w1", {root1}), nullptr);
  ASSERT_NE(cluster_.StartWorker("w2", {root2}), nullptr);
  ASSERT_TRUE(cluster_.WaitForWorker("w1", {kLlama, kQwen}, 60));
  ASSERT_TRUE(cluster_.WaitForWorker("w2", {kQwen}, 60));

  // Cut the Llama's weights in half under w1, after it advertised them.
  const std::string shard = root1 + "/" + kLlama + "/model.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);

  const int64_t id = cluster_.Submit(WriteBatch(20, {kLlama, kQwen}, 4));
  ASSERT_GT(id, 0) << cluster_.last_error();
  Outcome watch = cluster_.Nightshift("watch " + std::to_string(id), 120);
  EXPECT_EQ(watch.code, 1) << "some jobs failed: " << watch.out << watch.err;
  EXPECT_NE(watch.out.find("done: 10 succeeded, 10 failed, 0 cancelled"), std::string::npos)
      << watch.out;

  std::vector<json> rows = Results(id, 20);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i % 2 == 1) {  // Qwen
      EXPECT_TRUE(rows[i]["error"].is_null()) << rows[i];
      continue;
    }
    EXPECT_EQ(rows[i]["response"]["status_code"], 500) << rows[i];
    const std::string message = rows[i]["error"].value("message", "");
    EXPECT_NE(message.find("model.safetensors"), std::string::npos)
        << "the reason names the file: " << rows[i];
  }
  // w1 is still up, serving the model that is intact.
  EXPECT_TRUE(cluster_.worker("w1")->running());
  json reply = json::parse(cluster_.Nightshift("workers --json").out, nullptr, false);
  ASSERT_TRUE(reply.is_object());
  for (const json& w : reply["workers"]) {
    if (w["id"] != "w1") continue;
    EXPECT_TRUE(w.value("connected", false)) << w;
    std::set<std::string> models;
    for (const json& m : w.value("models", json::array())) models.insert(m.value("name", ""));
    EXPECT_EQ(models, std::set<std::string>{kQwen}) << "the corrupt model is withdrawn: " << w;
  }
}

}  // namespace
}  // namespace nightshift::e2e
