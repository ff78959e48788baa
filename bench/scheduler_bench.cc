// Scheduler benchmark: jobs/s accepted over gRPC, SubmitJobs latency with
// 100k jobs queued, and jobs/s dispatched and finished through the core.
//
// Runs a real Scheduler with its SQLite store (WAL, synchronous=FULL) in a
// temporary directory and the real gRPC service on loopback, in this process.
// Prints figures measured in this run; no thresholds.
//
//   scheduler_bench [--queued N] [--chunk N] [--latency-calls N] [--latency-jobs N]
//                   [--dispatch-seconds S] [--dir DIR]

#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "common/command_line.h"
#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "scheduler/scheduler.h"
#include "scheduler/service.h"
#include "scheduler/store.h"

namespace {

using namespace nightshift;
using namespace nightshift::scheduler;
using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point since) {
  return std::chrono::duration<double>(SteadyClock::now() - since).count();
}

// A worker link that only remembers the assignments.
class RecordingLink : public WorkerLink {
 public:
  void Send(WorkerCommand command) override {
    std::lock_guard<std::mutex> lock(mu);
    if (command.kind == WorkerCommand::Kind::kAssign) assigned.push_back(std::move(command));
  }
  void Close(const Status&) override {}
  std::vector<WorkerCommand> Take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(assigned, {});
  }
  std::mutex mu;
  std::vector<WorkerCommand> assigned;
};

WorkerHello Hello(const std::string& id, int64_t kv_budget) {
  WorkerHello hello;
  hello.info.id = id;
  hello.info.device = "bench";
  hello.info.kv_budget_bytes = kv_budget;
  hello.info.read_bytes_per_second = 2e9;
  ModelOffer offer;
  offer.name = "bench-model";
  offer.kv_bytes_per_token = 100;
  offer.checkpoint_bytes = 1'000'000'000;
  offer.seconds_per_pass = 1.0;
  offer.max_context_tokens = 4096;
  hello.info.models.push_back(offer);
  return hello;
}

v1::SubmitJobsRequest Request(int jobs, int64_t* counter) {
  v1::SubmitJobsRequest request;
  for (int i = 0; i < jobs; ++i) {
    auto* job = request.add_jobs();
    job->set_custom_id("job-" + std::to_string((*counter)++));
    job->set_model("bench-model");
    job->set_url("/v1/completions");
    for (int t = 0; t < 32; ++t) job->mutable_token_ids()->add_ids(100 + t);
    job->set_max_new_tokens(16);
  }
  return request;
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const size_t index =
      std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
  return values[index];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t queued = 100'000, chunk = 1000, latency_calls = 300, latency_jobs = 10;
  double dispatch_seconds = 5;
  std::string dir;
  CommandLine flags("scheduler_bench [options]", "Scheduler throughput and SubmitJobs latency.");
  flags.Int("queued", &queued, "jobs queued before the latency is measured");
  flags.Int("chunk", &chunk, "jobs per SubmitJobs call while filling the queue");
  flags.Int("latency-calls", &latency_calls, "SubmitJobs calls timed at the full queue");
  flags.Int("latency-jobs", &latency_jobs, "jobs per timed call");
  flags.Double("dispatch-seconds", &dispatch_seconds, "how long the dispatch loop runs");
  flags.String("dir", &dir, "directory for the database (default: a new temporary one)");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "scheduler_bench: %s\n", parsed.message().c_str());
    return 2;
  }
  bool own_dir = dir.empty();
  if (own_dir) {
    std::string pattern = (std::filesystem::temp_directory_path() / "ns-bench-XXXXXX").string();
    dir = mkdtemp(pattern.data());
  }

  auto store = Store::Open(dir + "/bench.db", SystemClock());
  if (!store.ok()) {
    std::fprintf(stderr, "scheduler_bench: %s\n", store.status().ToString().c_str());
    return 1;
  }
  SchedulerOptions options;
  options.lease_ms = 600'000;
  options.tokenizer_cache_dir = dir + "/tokenizers";
  Scheduler scheduler(store->get(), SystemClock(), options);
  (void)scheduler.Start();
  Service service(&scheduler, {});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.job_service());
  builder.RegisterService(service.worker_service());
  builder.SetMaxReceiveMessageSize(128 << 20);
  auto server = builder.BuildAndStart();
  auto channel = api::Connect({"127.0.0.1:" + std::to_string(port), "", false, ""});
  auto stub = v1::JobService::NewStub(*channel);

  // A busy worker: it serves the model (so jobs are tokenised and queued at
  // submit) but takes no more work while the queue fills.
  RecordingLink busy_link;
  auto busy = scheduler.Attach(Hello("busy", 100 * 48 * 4), &busy_link);
  int64_t counter = 0;
  auto submit = [&](int jobs) {
    v1::SubmitJobsRequest request = Request(jobs, &counter);
    grpc::ClientContext ctx;
    v1::SubmitJobsResponse response;
    grpc::Status status = stub->SubmitJobs(&ctx, request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "scheduler_bench: SubmitJobs: %s\n", status.error_message().c_str());
      std::exit(1);
    }
  };
  submit(4);

  std::printf("scheduler benchmark (SQLite WAL, synchronous=FULL, gRPC on loopback, %s)\n",
              dir.c_str());
  const auto fill_start = SteadyClock::now();
  for (int64_t done = 0; done < queued; done += chunk)
    submit(static_cast<int>(std::min(chunk, queued - done)));
  const double fill = Seconds(fill_start);
  std::printf("  accepted   %7lld jobs in %6.2f s: %8.0f jobs/s (%lld jobs per SubmitJobs)\n",
              static_cast<long long>(queued), fill, static_cast<double>(queued) / fill,
              static_cast<long long>(chunk));

  std::vector<double> latencies;
  for (int64_t i = 0; i < latency_calls; ++i) {
    const auto start = SteadyClock::now();
    submit(static_cast<int>(latency_jobs));
    latencies.push_back(Seconds(start) * 1000);
  }
  std::printf(
      "  SubmitJobs of %lld jobs with %lld queued, %lld calls: p50 %.2f ms, p90 %.2f ms, "
      "p99 %.2f ms, max %.2f ms\n",
      static_cast<long long>(latency_jobs), static_cast<long long>(queued),
      static_cast<long long>(latency_calls), Percentile(latencies, 0.5), Percentile(latencies, 0.9),
      Percentile(latencies, 0.99), *std::max_element(latencies.begin(), latencies.end()));

  // Dispatch: four idle workers take batches of up to 64 jobs; every job is
  // reported finished at once, so the loop measures leasing + result commits.
  std::vector<std::unique_ptr<RecordingLink>> links;
  std::vector<int64_t> sessions;
  for (int w = 0; w < 4; ++w) {
    links.push_back(std::make_unique<RecordingLink>());
    auto session =
        scheduler.Attach(Hello("w" + std::to_string(w), 100 * 48 * 64), links.back().get());
    sessions.push_back(session.ok() ? *session : 0);
  }
  // Results go back per job (one commit each) or per batch (one commit for
  // all, as a worker reports the jobs one pass finished).
  auto dispatch = [&](bool batched, double seconds) {
    int64_t finished = 0;
    const auto start = SteadyClock::now();
    while (Seconds(start) < seconds) {
      bool any = false;
      for (size_t w = 0; w < links.size(); ++w) {
        for (WorkerCommand& assign : links[w]->Take()) {
          std::vector<JobResult> results;
          for (const Job& job : assign.jobs) {
            JobResult result;
            result.job_id = job.id;
            result.batch_id = assign.batch_id;
            result.ok = true;
            result.output.text = "x";
            results.push_back(std::move(result));
          }
          const std::string worker = "w" + std::to_string(w);
          for (size_t i = 0; i < results.size(); i += batched ? results.size() : 1) {
            const size_t n = batched ? results.size() : 1;
            std::vector<JobResult> part(results.begin() + i, results.begin() + i + n);
            auto statuses = scheduler.Results(worker, sessions[w], std::move(part));
            for (const Status& status : statuses.ok() ? *statuses : std::vector<Status>()) {
              finished += status.ok() ? 1 : 0;
            }
          }
          any = true;
        }
      }
      if (!any) break;  // the queue ran dry
    }
    const double elapsed = Seconds(start);
    std::printf(
        "  dispatched and finished %6lld jobs in %5.2f s: %7.0f jobs/s (4 workers, batches "
        "of up to 64, %s)\n",
        static_cast<long long>(finished), elapsed, static_cast<double>(finished) / elapsed,
        batched ? "each batch's results in one commit" : "one commit per result");
  };
  dispatch(false, dispatch_seconds / 2);
  dispatch(true, dispatch_seconds / 2);
  (void)busy;
  server->Shutdown();
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
