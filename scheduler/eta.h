// Estimated time to completion, pure arithmetic on plain data.
//
// A pass costs about one read of the checkpoint whatever rides in it, so a
// job's remaining time is its remaining passes x seconds per pass of the
// worker that runs it. Before a model's first pass on a worker, seconds per
// pass is the worker's advertised figure (planner::PassSeconds: streamed
// bytes / measured parallel read bandwidth, computed on the worker; the
// scheduler computes the same function from the advert when a worker sends
// none, see Fleet::SecondsPerPass); after, the measured pass times, smoothed. Queued jobs wait for
// the work ahead of them: QueueFinishTimes plays the queue out over the workers in dispatch order.
//
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/types.h"

namespace nightshift::scheduler {

// Weight of the newest pass in the smoothed seconds per pass.
inline constexpr double kPassSmoothing = 0.3;

// Exponentially weighted mean: `sample` alone when `previous` is not positive
// (no sample yet), else previous + kPassSmoothing x (sample - previous).
double SmoothSecondsPerPass(double previous, double sample);

// Seconds until a running job finishes: its passes not yet run x seconds per
// pass. Unknown when seconds_per_pass is not positive.
std::optional<double> RunningJobSeconds(int64_t passes_left, double seconds_per_pass);

// A worker serving the model whose queue is estimated.
struct EtaWorker {
  std::string id;
  double seconds_per_pass = 0;  // measured (smoothed) or advertised; <= 0 unknown
  int64_t kv_budget_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int32_t max_batch_jobs = 0;     // 0 = no limit
  double busy_seconds = 0;        // until its current batch finishes; 0 = idle
  int64_t pass_token_budget = 0;  // tokens one pass may feed; 0 = no limit
};

// A queued job of that model, in dispatch order.
struct EtaJob {
  int64_t kv_tokens = 0;    // reserved: 0 for a job that ends in its first pass
  int64_t passes = 0;       // passes it needs once running
  int64_t pass_tokens = 0;  // tokens it feeds in its first pass
};
EtaJob EtaJobOf(const QueuedJob& job);

// Seconds from now until each job of `queue` finishes, in the same order.
// The queue is cut into batches in order: the worker that frees up first
// takes the next jobs up to its KV budget, pass-token budget (the first
// always) and job limit, runs them together,
// and is free again after the batch's longest job. Workers with an unknown
// speed take no work; a job that fits no worker with a known speed, and every
// job after it, has an unknown (nullopt) finish time.
std::vector<std::optional<double>> QueueFinishTimes(const std::vector<EtaWorker>& workers,
                                                    const std::vector<EtaJob>& queue);

}  // namespace nightshift::scheduler
