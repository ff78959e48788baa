// Estimated time to completion, pure arithmetic on plain data.
//
// A pass costs about one read of the checkpoint plus a little per token it
// feeds, whatever rides in it, so the ETA is a count of passes priced per
// worker. Forecast plays one model's work out the way the workers really run
// it: each worker's running batch passes on, its jobs finishing as their
// passes run out; at every pass boundary the room that freed (KV, the next
// pass's tokens, the job limit) is topped up from the queue by the
// scheduler's own policy (Schedule, policy.h), and a worker whose batch
// emptied opens a new one. Several workers share the queue, each at its own
// pace; a worker may start later (attaching, or finishing another model's
// batch first).
//
// Seconds per pass: PassTimes turns the measured passes of a model on a
// worker into a PassCost; before any, the prior is the worker's advertised
// planner::PassSeconds (Fleet::SecondsPerPass).
//
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/policy.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

// Weight of the newest pass in a batch's smoothed seconds per pass (what
// `watch` shows per batch; the ETA uses PassTimes).
inline constexpr double kPassSmoothing = 0.3;

// Exponentially weighted mean: `sample` alone when `previous` is not positive
// (no sample yet), else previous + kPassSmoothing x (sample - previous).
double SmoothSecondsPerPass(double previous, double sample);

// What one pass costs: base_seconds whatever it feeds, plus
// seconds_per_token for each token it feeds (prompts and labels of the jobs
// joining it, one per decoding job). Unknown when base_seconds is not positive.
struct PassCost {
  double base_seconds = 0;
  double seconds_per_token = 0;
  bool known() const { return base_seconds > 0; }
  double Seconds(int64_t tokens) const;
};

// The recent measured passes of one model on one worker.
class PassTimes {
 public:
  // Passes kept: enough for a robust fit, few enough to follow a change
  // (the page cache warming, another model's batch evicting it).
  static constexpr size_t kWindow = 24;

  void Add(double seconds, int64_t tokens);
  int64_t count() const { return count_; }
  // The cost of a pass, from the measured passes and `prior_seconds` (the
  // advertised seconds per pass; <= 0 unknown).
  PassCost Cost(double prior_seconds) const;
  // The median of the recent passes' seconds; 0 before the first.
  double MedianSeconds() const;

 private:
  struct Sample {
    double seconds = 0;
    int64_t tokens = 0;
  };
  std::deque<Sample> recent_;
  int64_t count_ = 0;
};

// How early a submission's generation jobs stop (at EOS or a stop string)
// before max_tokens, as its finished and running jobs show: each generated
// token is one chance to stop.
struct StopStats {
  int64_t early_stops = 0;  // finished generation jobs that stopped before max_tokens
  int64_t tokens = 0;       // tokens those and every other generation job generated
  // The chance that a token is the last: early_stops / tokens (0 without a stop).
  double Hazard() const;
};

// The passes a generation job with `passes_left` passes before its
// max_tokens is expected to still run when each token ends it with chance
// `hazard`: sum over k < passes_left of (1 - hazard)^k, rounded, at least 1
// (passes_left itself when hazard is 0, and for one-pass jobs).
int64_t ExpectedPasses(int64_t passes_left, double hazard);

// A job on a worker in the snapshot: in its running batch.
struct EtaJob {
  int64_t id = 0;
  int64_t submission_id = 0;
  // Reserved (QueuedJob::reserved_kv_tokens; taken by the forecast, less a
  // prompt prefix held once with a job before it: Assignment::job_kv_tokens).
  int64_t kv_tokens = 0;
  int64_t pass_tokens = 0;  // fed in its first pass (QueuedJob::pass_tokens)
  int64_t passes_left = 1;  // including the pass in flight when it rides it
  bool started = false;     // has ridden a pass (feeds one token per pass from then)
  bool in_pass = true;      // rides the pass in flight; false: joins at the next boundary
};

// A worker serving the model, as the forecast sees it.
struct EtaWorker {
  WorkerInfo info;            // budgets and its offer of the model (Schedule's view)
  bool takes_work = true;     // connected and not draining: it is topped up and opens batches
  PassCost cost;              // of the model on this worker; unknown: it takes no work
  double start_at = 0;        // seconds from now it can open a batch of the model
  double pass_left = 0;       // seconds left of its pass in flight (with a running batch)
  std::vector<EtaJob> batch;  // its running batch of the model; empty: idle
  // The prompt prefixes it keeps for its running batch's next pass, as it
  // reported them (LiveBatch::kept_prefixes).
  std::vector<std::vector<int32_t>> kept_prefixes;
};

struct EtaSnapshot {
  std::string model;
  std::vector<EtaWorker> workers;
  std::vector<QueuedJob> queue;  // the model's queued jobs in dispatch order
  // Per submission, the chance each generated token is a job's last
  // (StopStats::Hazard); absent: 0.
  std::map<int64_t, double> stop_hazards;
  // A top-up decided at a pass boundary reaches the worker after it started
  // its next pass, so the jobs join one boundary later (the worker daemon
  // starts the next pass as soon as it reported the last one).
  bool top_ups_join_late = true;
  // Queued jobs handed to Schedule at each boundary (the head of the queue).
  int schedule_window = 64;
  // Snapshot::min_shared_prefix_tokens of those Schedule calls: a pass is
  // priced by the tokens its jobs feed with shared prefixes counted once.
  int64_t min_shared_prefix_tokens = kDefaultMinSharedPrefixTokens;
  // A bound on the boundaries played out; the jobs left then are unknown.
  int64_t max_boundaries = 1'000'000;
};

struct EtaForecast {
  // Seconds from now until each job of the snapshot finishes (or fails:
  // Schedule rejects it); nullopt when no worker with a known cost takes it.
  std::map<int64_t, std::optional<double>> jobs;
  // The latest of each submission's jobs; nullopt when one of them is unknown.
  std::map<int64_t, std::optional<double>> submissions;
};

EtaForecast Forecast(const EtaSnapshot& snapshot);

}  // namespace nightshift::scheduler
