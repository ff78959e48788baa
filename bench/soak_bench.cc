// A night under kills (issue 39): N jobs of a small generated model through
// the real nightshift-scheduler and two real nightshift-workers on loopback,
// once undisturbed and once while the scheduler is killed with SIGKILL (and
// restarted on the same database and port) K times and a worker W times, at
// random moments. Then it checks what a user is promised: every job ended
// once and succeeded, no result row twice, the results file has one row per
// job in input order, each output equals the undisturbed run's, and the
// database passes PRAGMA integrity_check. Prints jobs/s with and without the
// kills, the kills made, the retries they cost and the checks' figures.
//
//   soak_bench [--jobs 100000] [--scheduler-kills 100] [--worker-kills 20]
//              [--batch-jobs 1024] [--seed 1] [--dir DIR] [--timeout-minutes 120]
//
// Workers take at most --batch-jobs jobs a batch (--max-batch-jobs): the KV
// budget of a model worth streaming holds hundreds of sequences, where this
// tiny model's would hold the whole queue. A killed worker's batch costs each
// of its unfinished jobs an attempt, and requeued jobs go first into the next
// batch, so the default --max-attempts 3 fails the jobs caught in three of
// the killed batches, as it should; a night's kills packed into minutes catch
// the same jobs often (100,000 jobs, 20 worker kills: 1,707 jobs failed so).
// The scheduler here gives every job one attempt more than there are worker
// kills, so that a job fails only through a defect.
//
// Not part of ctest (it runs for many minutes); exit 0 when every check
// holds, 1 when one does not, 2 for a bad command line.

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/cluster.h"

namespace nightshift::e2e {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int jobs = 100'000;
  int scheduler_kills = 100;
  int worker_kills = 20;
  int batch_jobs = 1024;
  unsigned seed = 1;
  std::string dir;  // "" = a new directory under /tmp
  double timeout_minutes = 120;
};

constexpr double kLeaseSeconds = 5;
const std::vector<std::string> kWorkers = {"w1", "w2"};

// What one run did and found.
struct Run {
  bool ok = false;
  std::string error;
  double seconds = 0;
  int scheduler_kills = 0;
  int worker_kills = 0;
  // custom_id -> the response body (its text, labels' log-probs, usage) less
  // its "created" time.
  std::map<std::string, std::string> outputs;
  int64_t stored = 0, succeeded = 0, failed = 0, other_states = 0;
  int64_t result_rows = 0, duplicate_result_rows = 0;
  int64_t retries = 0;  // attempts spent beyond the first, over all jobs
  int64_t expired_batches = 0;
  int64_t results_file_rows = 0;
  bool results_in_order = false;
  std::string integrity;
};

// Jobs "job-0" ...: every third a one-pass classification over two labels,
// the others greedy completions of 4 tokens.
std::string WriteJobs(const std::string& path, int count, const std::string& model) {
  std::vector<json> lines;
  lines.reserve(count);
  for (int i = 0; i < count; ++i) {
    const std::string id = "job-" + std::to_string(i);
    const std::string prompt = "Night " + std::to_string(i) + ": the shift begins";
    json body = {{"model", model}, {"prompt", prompt}};
    if (i % 3 == 2) {
      body["labels"] = {" yes", " no"};
    } else {
      body["max_tokens"] = 4;
      body["temperature"] = 0;
    }
    lines.push_back(
        {{"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}});
  }
  return WriteJsonLines(path, lines);
}

std::vector<std::string> WorkerFlags(const Options& options) {
  return {"--max-batch-jobs", std::to_string(options.batch_jobs)};
}

// One line of `sqlite3 DB SQL`'s output ("" on failure, with `error` set).
std::string Sql(const Cluster& cluster, const std::string& sql, std::string* error) {
  Outcome run = Shell("sqlite3 " + ShellQuote(cluster.file("state.db")) + " " + ShellQuote(sql),
                      cluster.file("sqlite3-stderr.txt"), 600);
  if (run.code != 0) {
    *error = "sqlite3 '" + sql + "': " + run.err;
    return "";
  }
  std::string out = run.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

int64_t SqlInt(const Cluster& cluster, const std::string& sql, std::string* error) {
  const std::string out = Sql(cluster, sql, error);
  return out.empty() ? -1 : std::strtoll(out.c_str(), nullptr, 10);
}

// Runs the jobs once, with `scheduler_kills` + `worker_kills` SIGKILLs at
// random moments spread over about `expected_seconds`.
Run RunOnce(const Options& options, const std::string& dir, const std::string& models,
            const std::string& batch, int scheduler_kills, int worker_kills,
            double expected_seconds) {
  Run run;
  std::filesystem::create_directories(dir);
  Cluster cluster(dir);
  auto fail = [&](const std::string& why) {
    run.error = why + "\n(logs in " + dir + ")";
    return run;
  };
  const std::vector<std::string> scheduler_flags = {"--max-attempts",
                                                    std::to_string(options.worker_kills + 1)};
  if (std::string e = cluster.StartScheduler(kLeaseSeconds, "127.0.0.1:0", scheduler_flags);
      !e.empty()) {
    return fail(e);
  }
  const std::string address = cluster.address();
  for (const std::string& w : kWorkers) {
    if (cluster.StartWorker(w, {models}, WorkerFlags(options)) == nullptr) {
      return fail("cannot start worker " + w);
    }
  }
  for (const std::string& w : kWorkers) {
    if (!cluster.WaitForWorker(w, {"soak-llama"}, 120)) return fail(w + " did not attach");
  }

  const auto start = Clock::now();
  const int64_t id = cluster.Submit(batch);
  if (id <= 0) return fail("submit: " + cluster.last_error());
  std::cout << "  submitted " << options.jobs << " jobs in "
            << std::chrono::duration<double>(Clock::now() - start).count() << " s" << std::endl;

  std::mt19937 random(options.seed);
  const int kills = scheduler_kills + worker_kills;
  // Kills arrive at exponential gaps whose mean spreads them over about 80%
  // of the undisturbed run; those left when the jobs end early are counted
  // as not made.
  std::exponential_distribution<double> gap(kills > 0 ? kills / (0.8 * expected_seconds) : 1);
  auto next_kill = Clock::now() + std::chrono::duration<double>(gap(random));
  const auto deadline = start + std::chrono::duration<double>(options.timeout_minutes * 60);
  auto last_report = Clock::now();
  while (true) {
    const json submission = cluster.Submission(id);
    if (submission.is_object() && submission.value("done", false)) break;
    if (Clock::now() > deadline) return fail("the jobs did not finish in time");
    const int left = scheduler_kills - run.scheduler_kills + worker_kills - run.worker_kills;
    if (left > 0 && Clock::now() >= next_kill) {
      const bool scheduler = std::uniform_int_distribution<int>(1, left)(random) <=
                             scheduler_kills - run.scheduler_kills;
      if (scheduler) {
        cluster.KillScheduler();
        ++run.scheduler_kills;
        // Down for 0-1 s: the workers run on alone and keep their results.
        std::this_thread::sleep_for(
            std::chrono::duration<double>(std::uniform_real_distribution<double>(0, 1)(random)));
        if (std::string e = cluster.StartScheduler(kLeaseSeconds, address, scheduler_flags);
            !e.empty()) {
          return fail("restart " + std::to_string(run.scheduler_kills) + ": " + e);
        }
      } else {
        const std::string& w =
            kWorkers[std::uniform_int_distribution<size_t>(0, kWorkers.size() - 1)(random)];
        cluster.worker(w)->Signal(SIGKILL);
        cluster.worker(w)->Wait(10);
        ++run.worker_kills;
        if (cluster.StartWorker(w, {models}, WorkerFlags(options)) == nullptr) {
          return fail("cannot restart " + w);
        }
      }
      next_kill = Clock::now() + std::chrono::duration<double>(gap(random));
    }
    if (Clock::now() - last_report > std::chrono::seconds(30) && submission.is_object()) {
      last_report = Clock::now();
      std::cout << "  "
                << static_cast<int>(std::chrono::duration<double>(last_report - start).count())
                << " s: " << Int(submission["counts"]["succeeded"]) << " succeeded, kills "
                << run.scheduler_kills << " + " << run.worker_kills << std::endl;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // What the user gets: the results file.
  const std::string results = cluster.file("results.jsonl");
  Outcome got = cluster.Nightshift("results " + std::to_string(id) + " -o " + results, 600);
  if (got.code != 0) return fail("nightshift results: " + got.err);
  const std::vector<json> rows = JsonLines(ReadFile(results));
  run.results_file_rows = static_cast<int64_t>(rows.size());
  run.results_in_order = rows.size() == static_cast<size_t>(options.jobs);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string custom_id = rows[i].value("custom_id", "");
    if (custom_id != "job-" + std::to_string(i)) run.results_in_order = false;
    json body = rows[i]["response"]["body"];
    if (body.is_object()) body.erase("created");  // the clock's, not the model's
    run.outputs[custom_id] = body.dump();
  }

  // What the database holds, the scheduler stopped.
  cluster.KillScheduler();
  std::string error;
  run.stored = SqlInt(cluster, "SELECT COUNT(*) FROM jobs", &error);
  run.succeeded = SqlInt(cluster, "SELECT COUNT(*) FROM jobs WHERE state = 'succeeded'", &error);
  run.failed = SqlInt(cluster, "SELECT COUNT(*) FROM jobs WHERE state = 'failed'", &error);
  run.other_states = SqlInt(
      cluster, "SELECT COUNT(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed')", &error);
  run.result_rows = SqlInt(cluster, "SELECT COUNT(*) FROM results", &error);
  run.duplicate_result_rows =
      SqlInt(cluster, "SELECT COUNT(*) - COUNT(DISTINCT job_id) FROM results", &error);
  run.retries = SqlInt(cluster, "SELECT COALESCE(SUM(attempt), 0) FROM jobs", &error);
  run.expired_batches =
      SqlInt(cluster, "SELECT COUNT(*) FROM batches WHERE state = 'expired'", &error);
  run.integrity = Sql(cluster, "PRAGMA integrity_check", &error);
  if (!error.empty()) return fail(error);
  run.ok = true;
  return run;
}

bool Check(bool holds, const std::string& what) {
  std::cout << "  " << (holds ? "ok    " : "FAILED") << "  " << what << std::endl;
  return holds;
}

// The promises of a run of `jobs` jobs; `reference` (may be null) is the
// undisturbed run whose outputs a disturbed one must equal.
bool Verify(const Run& run, int jobs, const Run* reference) {
  bool ok = true;
  ok &= Check(run.stored == jobs, "every job stored: " + std::to_string(run.stored));
  ok &= Check(run.succeeded == jobs && run.failed == 0 && run.other_states == 0,
              "every job succeeded: " + std::to_string(run.succeeded) + " of " +
                  std::to_string(jobs) + " (failed " + std::to_string(run.failed) + ", not ended " +
                  std::to_string(run.other_states) + ")");
  ok &= Check(run.result_rows == jobs && run.duplicate_result_rows == 0,
              "one result row per job: " + std::to_string(run.result_rows) + " rows, " +
                  std::to_string(run.duplicate_result_rows) + " duplicates");
  ok &= Check(run.results_in_order && run.results_file_rows == jobs,
              "the results file: " + std::to_string(run.results_file_rows) +
                  " rows, one per custom_id in input order");
  ok &= Check(run.integrity == "ok", "PRAGMA integrity_check: " + run.integrity);
  if (reference != nullptr) {
    int64_t equal = 0;
    for (const auto& [custom_id, output] : run.outputs) {
      auto it = reference->outputs.find(custom_id);
      equal += it != reference->outputs.end() && it->second == output;
    }
    ok &= Check(equal == jobs, "outputs equal to the undisturbed run's: " + std::to_string(equal) +
                                   " of " + std::to_string(jobs));
  }
  return ok;
}

int Main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << "soak_bench [--jobs N] [--scheduler-kills K] [--worker-kills W] "
                   "[--batch-jobs B] [--seed S] [--dir DIR] [--timeout-minutes M]\n"
                   "Runs N jobs (default 100000) of a small generated Llama through a real "
                   "scheduler and two real workers, undisturbed and then under K scheduler "
                   "(default 100) and W worker (default 20) SIGKILLs, and checks that every job "
                   "ended once with the undisturbed run's output.\n";
      return 0;
    }
    if (i + 1 >= argc) {
      std::cerr << "soak_bench: " << flag << " needs a value\n";
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--jobs") {
      options.jobs = std::atoi(value.c_str());
    } else if (flag == "--scheduler-kills") {
      options.scheduler_kills = std::atoi(value.c_str());
    } else if (flag == "--worker-kills") {
      options.worker_kills = std::atoi(value.c_str());
    } else if (flag == "--batch-jobs") {
      options.batch_jobs = std::atoi(value.c_str());
    } else if (flag == "--seed") {
      options.seed = static_cast<unsigned>(std::atoi(value.c_str()));
    } else if (flag == "--dir") {
      options.dir = value;
    } else if (flag == "--timeout-minutes") {
      options.timeout_minutes = std::atof(value.c_str());
    } else {
      std::cerr << "soak_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (options.jobs < 1 || options.batch_jobs < 1 || options.scheduler_kills < 0 ||
      options.worker_kills < 0) {
    std::cerr << "soak_bench: --jobs and --batch-jobs must be positive and the kills not "
                 "negative\n";
    return 2;
  }
  std::string dir = options.dir;
  if (dir.empty()) {
    char pattern[] = "/tmp/nightshift-soak-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      std::cerr << "soak_bench: cannot make a directory under /tmp\n";
      return 1;
    }
    dir = pattern;
  }
  std::filesystem::create_directories(dir);

  ModelShape shape = LlamaMini();
  const std::string models = dir + "/models";
  if (std::string e = MakeCheckpoint(shape, models + "/soak-llama"); !e.empty()) {
    std::cerr << "soak_bench: make-checkpoint: " << e << "\n";
    return 1;
  }
  const std::string batch = WriteJobs(dir + "/jobs.jsonl", options.jobs, "soak-llama");
  std::cout << "soak_bench: " << options.jobs << " jobs (a third one-pass classifications, the "
            << "rest 4-token completions) of a generated Llama (hidden " << shape.hidden << ", "
            << shape.layers << " layers), 2 workers of at most " << options.batch_jobs
            << " jobs a batch, lease " << kLeaseSeconds << " s; in " << dir << std::endl;

  std::cout << "undisturbed:" << std::endl;
  const Run quiet = RunOnce(options, dir + "/quiet", models, batch, 0, 0, 0);
  if (!quiet.ok) {
    std::cerr << "soak_bench: " << quiet.error << "\n";
    return 1;
  }
  bool ok = Verify(quiet, options.jobs, nullptr);
  std::cout << "  " << quiet.seconds << " s, " << options.jobs / quiet.seconds << " jobs/s"
            << std::endl;

  std::cout << "under kills:" << std::endl;
  const Run killed = RunOnce(options, dir + "/kills", models, batch, options.scheduler_kills,
                             options.worker_kills, quiet.seconds);
  if (!killed.ok) {
    std::cerr << "soak_bench: " << killed.error << "\n";
    return 1;
  }
  ok &= Verify(killed, options.jobs, &quiet);
  ok &= Check(killed.scheduler_kills == options.scheduler_kills &&
                  killed.worker_kills == options.worker_kills,
              "kills made: scheduler " + std::to_string(killed.scheduler_kills) + " of " +
                  std::to_string(options.scheduler_kills) + ", workers " +
                  std::to_string(killed.worker_kills) + " of " +
                  std::to_string(options.worker_kills));
  std::cout << "  " << killed.seconds << " s, " << options.jobs / killed.seconds << " jobs/s; "
            << killed.retries << " retries (attempts beyond the first), " << killed.expired_batches
            << " leases expired" << std::endl;

  std::cout << "\n| run | jobs | scheduler kills | worker kills | retries | duplicates | lost | "
               "seconds | jobs/s |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& [name, run] : {std::pair<const char*, const Run&>{"undisturbed", quiet},
                                  std::pair<const char*, const Run&>{"under kills", killed}}) {
    std::cout << "| " << name << " | " << options.jobs << " | " << run.scheduler_kills << " | "
              << run.worker_kills << " | " << run.retries << " | " << run.duplicate_result_rows
              << " | " << options.jobs - run.stored << " | " << static_cast<int>(run.seconds)
              << " | " << static_cast<int>(options.jobs / run.seconds) << " |\n";
  }
  std::cout << (ok ? "soak_bench: every check held" : "soak_bench: a check FAILED") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace nightshift::e2e

int main(int argc, char** argv) { return nightshift::e2e::Main(argc, argv); }
