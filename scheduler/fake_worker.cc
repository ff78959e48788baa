// nightshift-fake-worker: a scripted stand-in for nightshift-worker that
// speaks the real WorkerService protocol over real gRPC but runs no model.
// Tests of the scheduler and the CLI use it; it is not part of the product.
//
// Each pass sleeps --pass-seconds, advances every job of the batch by one
// token, reports the pass (with the tokens per job and free KV, asking for a
// top-up when there is room), then reports each job that finished: a
// generation job after max_new_tokens passes, a classification job after one.
// Outputs are deterministic: text "fake output for CUSTOM_ID", token ids
// 1..N, label i scored -0.5 x (i + 1) (the first label wins), logprobs -0.5.
// A job's cached_prompt_tokens is, as the engine's trie counts it, the longest
// prefix of its prompt ids shared with another job starting in the same pass.
// SIGTERM drains: the jobs not finished are handed back and it exits 0.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/command_line.h"
#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "proto/types.h"

namespace {

namespace v1 = nightshift::v1;
using nightshift::api::TokenizerFiles;

struct Options {
  std::string scheduler = "localhost:50051";
  std::string token;
  std::string id;
  std::vector<std::string> models;
  int64_t kv_bytes_per_token = 1000;
  int64_t kv_budget = 1'000'000'000;
  int64_t max_context = 4096;
  int64_t max_batch_jobs = 0;
  double pass_seconds = 0.05;
  double advertised_seconds_per_pass = -1;  // < 0: pass_seconds
  std::string tokenizer_dir;
  int64_t crash_after_passes = 0;
  std::string fail_custom_id;
};

struct RunningJob {
  v1::JobAssignment assignment;
  int64_t generated = 0;
  int64_t shared_prompt_tokens = 0;  // set in its first pass
};

int64_t CommonPrefix(const v1::JobAssignment& a, const v1::JobAssignment& b) {
  int64_t n = 0;
  while (n < a.prompt_token_ids_size() && n < b.prompt_token_ids_size() &&
         a.prompt_token_ids(static_cast<int>(n)) == b.prompt_token_ids(static_cast<int>(n))) {
    ++n;
  }
  return n;
}

std::atomic<bool> g_terminate{false};

void OnTerminate(int) { g_terminate = true; }

TokenizerFiles ReadTokenizer(const std::string& dir) {
  TokenizerFiles files;
  if (dir.empty()) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    files.files[entry.path().filename().string()] = content.str();
  }
  return files;
}

class FakeWorker {
 public:
  explicit FakeWorker(Options options)
      : options_(std::move(options)), tokenizer_(ReadTokenizer(options_.tokenizer_dir)) {}

  int Run() {
    auto channel = nightshift::api::Connect({options_.scheduler, options_.token, false, ""});
    if (!channel.ok()) return Fail(channel.status().message());
    auto stub = v1::WorkerService::NewStub(*channel);
    nightshift::api::AddToken(&context_, options_.token);
    stream_ = stub->Attach(&context_);
    Write(Hello());
    std::thread reader([this] { Read(); });
    int code = Loop();
    if (code == 0) {
      std::lock_guard<std::mutex> lock(write_mu_);
      stream_->WritesDone();
    } else {
      context_.TryCancel();
    }
    reader.join();
    grpc::Status status = stream_->Finish();
    if (code == 0 && !status.ok() && !g_terminate) {
      return Fail("stream ended: " + status.error_message());
    }
    return code;
  }

 private:
  int Fail(const std::string& message) {
    std::cerr << "nightshift-fake-worker " << options_.id << ": " << message << std::endl;
    return 1;
  }

  v1::WorkerMessage Hello() {
    v1::WorkerMessage m;
    auto* h = m.mutable_hello();
    h->set_worker_id(options_.id);
    h->set_device("fake");
    h->set_memory_budget_bytes(options_.kv_budget * 2);
    h->set_kv_budget_bytes(options_.kv_budget);
    h->set_read_bytes_per_second(2e9);
    h->set_max_batch_jobs(static_cast<int32_t>(options_.max_batch_jobs));
    const std::string hash =
        tokenizer_.files.empty() ? "" : nightshift::api::TokenizerHash(tokenizer_);
    for (const std::string& name : options_.models) {
      auto* model = h->add_models();
      model->set_name(name);
      model->set_kv_bytes_per_token(options_.kv_bytes_per_token);
      model->set_checkpoint_bytes(1'000'000'000);
      model->set_seconds_per_pass(options_.advertised_seconds_per_pass >= 0
                                      ? options_.advertised_seconds_per_pass
                                      : options_.pass_seconds);
      model->set_max_context_tokens(options_.max_context);
      model->set_tokenizer_hash(hash);
    }
    h->set_version("fake");
    return m;
  }

  void Write(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> lock(write_mu_);
    stream_->Write(m);
  }

  // The reader thread: welcome, assignments and cancels.
  void Read() {
    v1::SchedulerMessage m;
    while (stream_->Read(&m)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (m.has_welcome()) {
        heartbeat_seconds_ = m.welcome().heartbeat_seconds();
        for (const std::string& hash : m.welcome().missing_tokenizers()) {
          (void)hash;  // every model shares the one tokenizer of --tokenizer-dir
          v1::WorkerMessage upload;
          for (const auto& [name, content] : tokenizer_.files) {
            (*upload.mutable_tokenizer()->mutable_files())[name] = content;
          }
          for (int32_t id : tokenizer_.eos_ids) upload.mutable_tokenizer()->add_eos_ids(id);
          Write(upload);
        }
      } else if (m.has_assign()) {
        if (!m.assign().top_up() || m.assign().batch_id() != batch_id_) {
          batch_id_ = m.assign().batch_id();
          pass_index_ = 0;
        }
        for (const auto& job : m.assign().jobs()) jobs_[job.job_id()] = {job, 0};
      } else if (m.has_cancel()) {
        for (int64_t id : m.cancel().job_ids()) jobs_.erase(id);
      }
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  // The runner: passes while there are jobs, heartbeats always.
  int Loop() {
    auto next_heartbeat = std::chrono::steady_clock::now();
    while (true) {
      std::unique_lock<std::mutex> lock(mu_);
      // Wakes at least every 100 ms so that SIGTERM is seen promptly.
      const auto wake = std::min(next_heartbeat,
                                 std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      cv_.wait_until(lock, wake, [this] { return ended_ || !jobs_.empty() || g_terminate; });
      if (ended_) return 0;
      if (g_terminate) return Drain(lock);
      if (std::chrono::steady_clock::now() >= next_heartbeat) {
        v1::WorkerMessage beat;
        beat.mutable_heartbeat();
        Write(beat);
        next_heartbeat = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(heartbeat_seconds_ * 1000));
      }
      if (jobs_.empty()) continue;
      lock.unlock();
      std::this_thread::sleep_for(
          std::chrono::milliseconds(static_cast<int64_t>(options_.pass_seconds * 1000)));
      lock.lock();
      Pass();
      if (options_.crash_after_passes > 0 && ++passes_ >= options_.crash_after_passes) {
        kill(getpid(), SIGKILL);
      }
    }
  }

  void Pass() {
    v1::WorkerMessage report;
    auto* p = report.mutable_pass();
    p->set_batch_id(batch_id_);
    p->set_pass_index(pass_index_++);
    p->set_seconds(options_.pass_seconds);
    p->set_bytes_read(1'000'000'000);
    p->set_sequences(static_cast<int32_t>(jobs_.size()));
    p->set_mode("streaming");
    int64_t used = 0;
    std::vector<int64_t> finished;
    std::vector<RunningJob*> starting;
    for (auto& [id, job] : jobs_) {
      if (job.generated == 0) starting.push_back(&job);
    }
    for (RunningJob* job : starting) {
      for (const RunningJob* other : starting) {
        if (other == job) continue;
        job->shared_prompt_tokens =
            std::max(job->shared_prompt_tokens, CommonPrefix(job->assignment, other->assignment));
      }
    }
    for (auto& [id, job] : jobs_) {
      ++job.generated;
      (*p->mutable_generated())[id] = job.generated;
      const auto& a = job.assignment;
      int64_t tokens = a.prompt_token_ids_size();
      for (const auto& label : a.label_token_ids()) tokens += label.ids_size();
      used +=
          (tokens + (a.labels_size() == 0 ? a.max_new_tokens() : 0)) * options_.kv_bytes_per_token;
      p->set_tokens(p->tokens() + (job.generated == 1 ? a.prompt_token_ids_size() : 1));
      if (a.labels_size() > 0 || job.generated >= a.max_new_tokens()) finished.push_back(id);
    }
    p->set_free_kv_bytes(std::max<int64_t>(0, options_.kv_budget - used));
    p->set_want_top_up(p->free_kv_bytes() > 0);
    Write(report);
    if (finished.empty()) return;
    v1::WorkerMessage results;
    for (int64_t id : finished) {
      *results.mutable_results()->add_results() = Result(jobs_[id]);
      jobs_.erase(id);
    }
    Write(results);
  }

  v1::JobResultReport Result(const RunningJob& job) {
    const v1::JobAssignment& a = job.assignment;
    v1::JobResultReport m;
    auto* r = &m;
    r->set_batch_id(batch_id_);
    r->set_job_id(a.job_id());
    if (!options_.fail_custom_id.empty() &&
        a.custom_id().find(options_.fail_custom_id) != std::string::npos) {
      r->set_error("fake failure for " + a.custom_id());
      return m;
    }
    auto* out = r->mutable_output();
    out->set_text("fake output for " + a.custom_id());
    out->set_prompt_tokens(a.prompt_token_ids_size());
    out->set_cached_prompt_tokens(job.shared_prompt_tokens);
    if (a.labels_size() > 0) {
      out->set_finish_reason("label");
      for (int i = 0; i < a.labels_size(); ++i) {
        auto* label = out->add_labels();
        label->set_label(a.labels(i));
        label->set_logprob(-0.5 * (i + 1));
      }
      return m;
    }
    out->set_finish_reason("length");
    out->set_completion_tokens(a.max_new_tokens());
    for (int32_t i = 1; i <= a.max_new_tokens(); ++i) {
      out->add_token_ids(i);
      if (!a.logprobs()) continue;
      auto* lp = out->add_logprobs();
      lp->set_token(i);
      lp->set_text("t" + std::to_string(i));
      lp->set_logprob(-0.5);
      for (int32_t k = 0; k < a.top_logprobs(); ++k) {
        auto* top = lp->add_top();
        top->set_token(i + k);
        top->set_text("t" + std::to_string(i + k));
        top->set_logprob(-0.5 - k);
      }
    }
    return m;
  }

  int Drain(std::unique_lock<std::mutex>& lock) {
    if (!jobs_.empty()) {
      v1::WorkerMessage back;
      back.mutable_hand_back()->set_batch_id(batch_id_);
      back.mutable_hand_back()->set_draining(true);
      for (const auto& [id, job] : jobs_) back.mutable_hand_back()->add_job_ids(id);
      jobs_.clear();
      lock.unlock();
      Write(back);
    }
    return 0;
  }

  Options options_;
  TokenizerFiles tokenizer_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::SchedulerMessage>> stream_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, RunningJob> jobs_;
  int64_t batch_id_ = 0;
  int64_t pass_index_ = 0;
  int64_t passes_ = 0;
  double heartbeat_seconds_ = 1;
  bool ended_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  options.id = "fake-" + std::to_string(getpid());
  if (const char* token = std::getenv("NIGHTSHIFT_WORKER_TOKEN")) options.token = token;
  nightshift::CommandLine flags(
      "nightshift-fake-worker --scheduler ADDR --model NAME [--model NAME ...] [options]",
      "A scripted stand-in worker for tests: real WorkerService protocol, no model.");
  flags.String("scheduler", &options.scheduler, "scheduler address", "HOST:PORT");
  flags.String("token", &options.token, "worker token (or NIGHTSHIFT_WORKER_TOKEN)", "TOKEN");
  flags.String("id", &options.id, "worker id", "ID");
  flags.StringList("model", &options.models, "a model name to advertise", "NAME");
  flags.Int("kv-bytes-per-token", &options.kv_bytes_per_token, "advertised KV bytes per token");
  flags.Int("kv-budget", &options.kv_budget, "advertised KV budget in bytes", "BYTES");
  flags.Int("max-context", &options.max_context, "advertised context length", "TOKENS");
  flags.Int("max-batch-jobs", &options.max_batch_jobs, "advertised job limit per batch");
  flags.Double("pass-seconds", &options.pass_seconds, "how long each fake pass sleeps", "S");
  flags.Double("advertised-seconds-per-pass", &options.advertised_seconds_per_pass,
               "seconds per pass to advertise (default: --pass-seconds)", "S");
  flags.String("tokenizer-dir", &options.tokenizer_dir,
               "upload this directory's files as every model's tokenizer", "DIR");
  flags.Int("crash-after-passes", &options.crash_after_passes,
            "SIGKILL itself after this many passes (0 = never)");
  flags.String("fail-custom-id", &options.fail_custom_id,
               "jobs whose custom_id contains this fail at run time", "TEXT");
  nightshift::Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (!parsed.ok() || options.models.empty()) {
    std::cerr << "nightshift-fake-worker: "
              << (parsed.ok() ? std::string("at least one --model is required") : parsed.message())
              << std::endl;
    return 2;
  }
  signal(SIGTERM, OnTerminate);
  signal(SIGINT, OnTerminate);
  return FakeWorker(std::move(options)).Run();
}
