// ETA benchmark: how far the ETA that `nightshift status --json` shows is
// from what really remained, on a real scheduler and real workers streaming a
// generated checkpoint (`--streaming always`, `--max-batch-jobs 8`).
//
// One submission of 32 greedy completions (max_tokens 8, 16 or 24) and 16
// two-label classifications; its ETA is sampled every second with
// GetSubmission (what `nightshift status` calls) until it is done, while
// `nightshift status SUBMISSION --json` runs every second beside it (each
// run without `eta_seconds` while jobs remain is counted). For every sample
// taken from 5% to 90% of the run's wall time, the error is |ETA - actually
// left| / actually left; the figure is the median of those, per run, then the
// median over runs.
// Done with one worker, then two workers sharing the queue.
//
//   eta_bench [--runs N] [--workers 1,2] [--dir DIR] [--hidden H] [--layers L] [--verbose]
//
// Needs build/bin/{nightshift,nightshift-scheduler,nightshift-worker} (or
// $NIGHTSHIFT_BIN_DIR). Prints figures measured in this run; no thresholds.

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/command_line.h"
#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "tests/testing/process.h"

namespace {

using namespace nightshift;
using testutil::BinPath;
using testutil::Process;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kModel = "eta-bench";

double Seconds(SteadyClock::time_point since) {
  return std::chrono::duration<double>(SteadyClock::now() - since).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// Runs a command to its end; its standard output, "" when it failed.
std::string Output(const std::vector<std::string>& argv, const std::string& log) {
  auto p = Process::Start(argv, log);
  if (p == nullptr) return "";
  std::string out;
  for (std::string line = p->WaitForLine("", 30); !line.empty(); line = p->WaitForLine("", 30)) {
    out += line + "\n";
  }
  return p->Wait(30) == 0 ? out : "";
}

struct Sample {
  double at = 0;
  bool has_eta = false;
  double eta = 0;
  bool done = false;
};

struct RunFigures {
  double wall = 0;
  double median_abs_error = NAN;
  double median_signed_error = NAN;
  int judged = 0;
  int missing = 0;                       // samples without an ETA while jobs remained
  int cli_samples = 0, cli_missing = 0;  // of `nightshift status --json`, while jobs remained
  double first_eta = NAN;
  std::string seconds_per_pass;  // advertised -> measured, per worker
};

class Bench {
 public:
  Bench(std::string dir, int hidden, int layers, bool verbose)
      : dir_(std::move(dir)),
        models_(dir_ + "/models-" + std::to_string(hidden) + "x" + std::to_string(layers)),
        hidden_(hidden),
        layers_(layers),
        verbose_(verbose) {}

  const std::string& models() const { return models_; }

  bool MakeCheckpoint() {
    const std::string model = models_ + "/" + kModel;
    if (std::filesystem::exists(model + "/config.json")) return true;
    const std::string tokenizer = testutil::SourcePath("tests/data/tokenizers/mistral7b");
    const std::string out = Output({BinPath("nightshift"),
                                    "make-checkpoint",
                                    "--arch",
                                    "llama",
                                    "--hidden",
                                    std::to_string(hidden_),
                                    "--layers",
                                    std::to_string(layers_),
                                    "--heads",
                                    std::to_string(hidden_ / 128),
                                    "--kv-heads",
                                    std::to_string(std::max(1, hidden_ / 512)),
                                    "--intermediate",
                                    std::to_string(hidden_ * 8 / 3),
                                    "--dtype",
                                    "f16",
                                    "--tokenizer",
                                    tokenizer,
                                    "--seed",
                                    "1",
                                    "--out",
                                    model},
                                   dir_ + "/make-checkpoint.log");
    if (!std::filesystem::exists(model + "/config.json")) {
      std::fprintf(stderr, "eta_bench: make-checkpoint failed; see %s/make-checkpoint.log\n",
                   dir_.c_str());
      return false;
    }
    return true;
  }

  // One run with `workers` workers; false when something failed to start.
  bool Run(int workers, int run, RunFigures* figures) {
    const std::string run_dir =
        dir_ + "/run-" + std::to_string(workers) + "-" + std::to_string(run);
    std::filesystem::remove_all(run_dir);
    std::filesystem::create_directories(run_dir);
    auto scheduler = Process::Start(testutil::SchedulerArgv(run_dir + "/state.db", "60", "1"),
                                    run_dir + "/scheduler.log");
    if (scheduler == nullptr) return Fail("cannot start the scheduler");
    const std::string address = testutil::WaitForListenAddress(*scheduler, 30);
    if (address.empty()) return Fail("the scheduler did not start; see " + run_dir);
    std::vector<std::unique_ptr<Process>> worker_processes;
    for (int w = 0; w < workers; ++w) {
      const std::string id = "w" + std::to_string(w + 1);
      worker_processes.push_back(Process::Start(
          {BinPath("nightshift-worker"), "--scheduler", address, "--id", id, "--model-root",
           models_, "--device", "cpu", "--threads", "1", "--streaming", "always",
           "--max-batch-jobs", "8", "--state-dir", dir_ + "/worker-state"},
          run_dir + "/" + id + ".log"));
      if (worker_processes.back() == nullptr) return Fail("cannot start a worker");
    }
    auto channel = api::Connect({address, "", false, ""});
    if (!channel.ok()) return Fail(channel.status().message());
    auto stub = v1::JobService::NewStub(*channel);
    // Every worker attached (and its tokenizer uploaded: a second after).
    const auto attach_deadline = SteadyClock::now() + std::chrono::seconds(120);
    v1::ListWorkersResponse listed;
    while (true) {
      grpc::ClientContext context;
      listed.Clear();
      if (stub->ListWorkers(&context, {}, &listed).ok()) {
        int connected = 0;
        for (const auto& w : listed.workers()) connected += w.connected() ? 1 : 0;
        if (connected == workers) break;
      }
      if (SteadyClock::now() > attach_deadline) return Fail("the workers did not attach");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));

    v1::SubmitJobsRequest request;
    const int lengths[] = {8, 16, 24};
    for (int i = 0; i < 48; ++i) {
      v1::JobRequest* job = request.add_jobs();
      job->set_custom_id("job-" + std::to_string(i));
      job->set_model(kModel);
      job->set_url("/v1/completions");
      job->set_text("Once upon a time, story " + std::to_string(i) + " began in a");
      job->mutable_sampling()->set_temperature(0);
      if (i % 3 == 2) {
        job->add_labels(" yes");
        job->add_labels(" no");
      } else {
        job->set_max_new_tokens(lengths[(i / 3) % 3]);
      }
    }
    v1::SubmitJobsResponse reply;
    const auto start = SteadyClock::now();
    {
      grpc::ClientContext context;
      grpc::Status status = stub->SubmitJobs(&context, request, &reply);
      if (!status.ok()) return Fail("SubmitJobs: " + status.error_message());
    }
    const std::string id = std::to_string(reply.submission_id());
    // `nightshift status --json`, run every second (or back to back when a
    // run takes longer) beside the sampling: each run must carry eta_seconds
    // while jobs remain.
    std::atomic<bool> stop{false};
    std::atomic<int> cli_samples{0}, cli_missing{0};
    std::thread cli([&] {
      for (auto next = SteadyClock::now(); !stop; next += std::chrono::seconds(1)) {
        std::this_thread::sleep_until(next);  // at most once a second: it costs CPU too
        const std::string json =
            Output({BinPath("nightshift"), "status", id, "--json", "--scheduler", address},
                   run_dir + "/status.log");
        const auto parsed = nlohmann::json::parse(json, nullptr, false);
        if (!parsed.is_object() || parsed.value("done", false)) continue;
        ++cli_samples;
        if (!parsed.contains("eta_seconds")) ++cli_missing;
      }
    });
    // The samples: GetSubmission (what `status` calls) every second.
    std::vector<Sample> samples;
    double finish = 0;
    double next_sample = 0;
    while (Seconds(start) < 900) {
      grpc::ClientContext context;
      v1::GetSubmissionRequest get;
      get.set_submission_id(reply.submission_id());
      v1::Submission submission;
      const double at = Seconds(start);
      if (!stub->GetSubmission(&context, get, &submission).ok()) continue;
      if (submission.done()) {
        finish = at;
        break;
      }
      if (at >= next_sample) {
        samples.push_back({at, submission.has_eta_seconds(), submission.eta_seconds(), false});
        next_sample += 1.0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop = true;
    cli.join();
    figures->cli_samples = cli_samples;
    figures->cli_missing = cli_missing;
    if (finish == 0) return Fail("the submission did not finish in 900 s");
    figures->wall = finish;
    std::vector<double> abs_errors, signed_errors;
    for (const Sample& s : samples) {
      if (s.done || s.at >= finish) continue;
      if (!s.has_eta) {
        ++figures->missing;
        continue;
      }
      if (std::isnan(figures->first_eta)) figures->first_eta = s.eta;
      const double left = finish - s.at;
      if (verbose_) std::printf("  %6.1f s: ETA %6.1f s, left %6.1f s\n", s.at, s.eta, left);
      if (s.at < 0.05 * finish || s.at > 0.9 * finish) continue;
      abs_errors.push_back(std::abs(s.eta - left) / left);
      signed_errors.push_back((s.eta - left) / left);
    }
    figures->judged = static_cast<int>(abs_errors.size());
    figures->median_abs_error = Median(abs_errors);
    figures->median_signed_error = Median(signed_errors);
    {
      grpc::ClientContext context;
      v1::ListWorkersResponse after;
      if (stub->ListWorkers(&context, {}, &after).ok()) {
        for (const auto& w : after.workers()) {
          for (const auto& m : w.models()) {
            char text[128];
            std::snprintf(text, sizeof(text), "%s %.3f->%.3f s/pass  ", w.id().c_str(),
                          m.seconds_per_pass(), m.measured_seconds_per_pass());
            figures->seconds_per_pass += text;
          }
        }
      }
    }
    return true;
  }

 private:
  bool Fail(const std::string& why) {
    std::fprintf(stderr, "eta_bench: %s\n", why.c_str());
    return false;
  }

  std::string dir_;
  std::string models_;  // the model root: the checkpoint of this shape
  int hidden_;
  int layers_;
  bool verbose_;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t runs = 3, hidden = 1024, layers = 12;
  bool verbose = false;
  std::string workers_list = "1,2", dir;
  nightshift::CommandLine flags(
      "eta_bench [--runs N] [--workers 1,2] [--dir DIR] [--hidden H] [--layers L]",
      "Median absolute ETA error of `nightshift status --json`, sampled every second from 5% to "
      "90% of a run, on a real scheduler and workers streaming a generated checkpoint.");
  flags.Int("runs", &runs, "runs per worker count (default 3)", "N");
  flags.String("workers", &workers_list, "worker counts to run, comma-separated (default 1,2)",
               "LIST");
  flags.String("dir", &dir, "scratch directory; the checkpoint is kept there (default: a temp dir)",
               "DIR");
  flags.Int("hidden", &hidden, "hidden size of the generated llama checkpoint (default 1024)", "H");
  flags.Int("layers", &layers, "its layers (default 12)", "L");
  flags.Bool("verbose", &verbose, "print every sample");
  nightshift::Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "eta_bench: %s\n", parsed.message().c_str());
    return 2;
  }
  if (runs < 1 || hidden < 128 || hidden % 128 != 0 || layers < 1) {
    std::fprintf(stderr, "eta_bench: --runs >= 1, --hidden a multiple of 128, --layers >= 1\n");
    return 2;
  }
  if (dir.empty()) dir = (std::filesystem::temp_directory_path() / "nightshift-eta-bench").string();
  std::filesystem::create_directories(dir);
  Bench bench(dir, static_cast<int>(hidden), static_cast<int>(layers), verbose);
  if (!bench.MakeCheckpoint()) return 1;
  std::printf("eta_bench on %s; checkpoint %s/%s (llama, hidden %lld, %lld layers, F16)\n",
              CpuModel().c_str(), bench.models().c_str(), kModel, static_cast<long long>(hidden),
              static_cast<long long>(layers));
  std::vector<int> counts;
  for (size_t at = 0; at < workers_list.size();) {
    const size_t comma = std::min(workers_list.find(',', at), workers_list.size());
    counts.push_back(std::atoi(workers_list.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  for (int workers : counts) {
    if (workers < 1) {
      std::fprintf(stderr, "eta_bench: --workers takes counts of at least 1\n");
      return 2;
    }
    std::vector<double> errors;
    for (int run = 0; run < runs; ++run) {
      RunFigures f;
      if (!bench.Run(workers, run, &f)) return 1;
      std::printf(
          "%d worker(s) run %d: %.1f s, first ETA %.1f s, median |error| %.1f%% (signed %+.1f%%) "
          "over %d samples, %d without an ETA; status --json: %d of %d without eta_seconds; %s\n",
          workers, run + 1, f.wall, f.first_eta, 100 * f.median_abs_error,
          100 * f.median_signed_error, f.judged, f.missing, f.cli_missing, f.cli_samples,
          f.seconds_per_pass.c_str());
      std::fflush(stdout);
      errors.push_back(f.median_abs_error);
    }
    std::printf("%d worker(s): median over %lld runs of the median |ETA error| (5-90%%): %.1f%%\n",
                workers, static_cast<long long>(runs), 100 * Median(errors));
  }
  return 0;
}
