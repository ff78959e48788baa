#include "scheduler/eta.h"

#include <algorithm>
#include <limits>

namespace nightshift::scheduler {

EtaJob EtaJobOf(const QueuedJob& job) {
  return {job.reserved_kv_tokens(), job.passes, job.pass_tokens()};
}

double SmoothSecondsPerPass(double previous, double sample) {
  if (previous <= 0) return sample;
  return previous + kPassSmoothing * (sample - previous);
}

std::optional<double> RunningJobSeconds(int64_t passes_left, double seconds_per_pass) {
  if (seconds_per_pass <= 0) return std::nullopt;
  return static_cast<double>(std::max<int64_t>(0, passes_left)) * seconds_per_pass;
}

std::vector<std::optional<double>> QueueFinishTimes(const std::vector<EtaWorker>& workers,
                                                    const std::vector<EtaJob>& queue) {
  std::vector<std::optional<double>> finish(queue.size());
  std::vector<double> free_at;  // per worker, seconds from now
  for (const EtaWorker& w : workers) free_at.push_back(std::max(0.0, w.busy_seconds));
  size_t next = 0;
  while (next < queue.size()) {
    // The earliest-free worker that can hold the next job opens a batch.
    int chosen = -1;
    for (size_t i = 0; i < workers.size(); ++i) {
      const EtaWorker& w = workers[i];
      if (w.seconds_per_pass <= 0 || w.kv_bytes_per_token <= 0) continue;
      if (queue[next].kv_tokens * w.kv_bytes_per_token > w.kv_budget_bytes) continue;
      if (chosen < 0 || free_at[i] < free_at[chosen]) chosen = static_cast<int>(i);
    }
    if (chosen < 0) break;  // this job and all after it: unknown
    const EtaWorker& w = workers[chosen];
    const int64_t job_limit =
        w.max_batch_jobs > 0 ? w.max_batch_jobs : std::numeric_limits<int64_t>::max();
    int64_t bytes_left = w.kv_budget_bytes;
    int64_t tokens_left =
        w.pass_token_budget > 0 ? w.pass_token_budget : std::numeric_limits<int64_t>::max();
    int64_t longest = 0;
    for (int64_t taken = 0; next < queue.size() && taken < job_limit; ++taken, ++next) {
      const int64_t bytes = queue[next].kv_tokens * w.kv_bytes_per_token;
      if (bytes > bytes_left || (taken > 0 && queue[next].pass_tokens > tokens_left)) break;
      bytes_left -= bytes;
      tokens_left -= std::min(tokens_left, queue[next].pass_tokens);
      const int64_t passes = std::max<int64_t>(1, queue[next].passes);
      finish[next] = free_at[chosen] + static_cast<double>(passes) * w.seconds_per_pass;
      longest = std::max(longest, passes);
    }
    free_at[chosen] += static_cast<double>(longest) * w.seconds_per_pass;
  }
  return finish;
}

}  // namespace nightshift::scheduler
