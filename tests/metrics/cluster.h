// A scheduler and workers on loopback, each serving /metrics, for the
// metrics tests: the real nightshift-scheduler (started with --metrics-port 0),
// the real nightshift-worker or the scripted nightshift-fake-worker, and jobs
// submitted over the real gRPC API. Every process is killed (SIGKILL) and
// reaped, and the scratch directory removed, when the MetricsCluster is
// destroyed.
//
// Not thread-safe; one test owns one MetricsCluster.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/process.h"

namespace nightshift::metrics_test {

using testutil::Process;

// The model every worker here serves: llama2.c's stories260k (ids only, no
// tokenizer), so the jobs carry token ids.
inline constexpr const char* kModel = "stories260k";

// A loopback port free right now.
int FreePort();

// GET http://127.0.0.1:PORT/TARGET: the body of a 200 answer, "" otherwise
// (including when nothing listens there).
std::string HttpGetBody(int port, const std::string& target);

// The value of `series` (a name with its labels as the text format writes
// them, e.g. `nightshift_jobs{model="m",state="queued"}`) in a /metrics text;
// "" when it has no such line.
std::string SampleValue(const std::string& exposition, const std::string& series);

// The sum of every sample of metric `name` (whatever its labels) in a
// /metrics text; 0 when it has none.
double SumOfSamples(const std::string& exposition, const std::string& name);

class MetricsCluster {
 public:
  MetricsCluster();
  ~MetricsCluster();
  MetricsCluster(const MetricsCluster&) = delete;
  MetricsCluster& operator=(const MetricsCluster&) = delete;

  // Starts the scheduler and waits until it serves gRPC and metrics. "" on
  // success, else why (with its log).
  std::string StartScheduler();
  // Starts the real nightshift-worker `id` (CPU, a model root holding a copy
  // of stories260k, a fixed read bandwidth) with --metrics-port 0 and waits for
  // its metrics port. "" on success, else why.
  std::string StartWorker(const std::string& id);
  // Starts nightshift-fake-worker `id` advertising stories260k. "" or why.
  std::string StartFakeWorker(const std::string& id);

  // Submits `jobs` generation jobs (token-id prompts, `max_new_tokens` each,
  // or with `staggered` max_new_tokens + i for job i, so they finish one
  // after another) and waits until the submission is done. "" when every job
  // succeeded, else why.
  std::string RunJobs(int jobs, int max_new_tokens, double timeout_seconds, bool staggered = false);

  const std::string& address() const { return address_; }
  int scheduler_metrics_port() const { return scheduler_metrics_port_; }
  // The metrics port of real worker `id`; 0 when unknown.
  int worker_metrics_port(const std::string& id) const;
  const std::string& dir() const { return dir_; }
  // Every process's log, headed by its name: for failure messages.
  std::string Logs() const;

 private:
  std::string StartProcess(const std::string& name, const std::vector<std::string>& argv);

  std::string dir_;
  std::string address_;
  int scheduler_metrics_port_ = 0;
  std::map<std::string, int> worker_metrics_ports_;
  std::map<std::string, std::unique_ptr<Process>> processes_;  // by name
};

}  // namespace nightshift::metrics_test
