// What the ETA learns while submissions run, and how good it was:
//   - how early each submission's generation jobs stop (StopStats), from the
//     results as they arrive;
//   - the ETA the scheduler showed when 10, 25, 50, 75 and 90% of a
//     submission's jobs were done, and, when it ends, each one's signed
//     relative error against what really remained: (shown - actual) / actual.
//
// Pure bookkeeping (times are arguments). Not thread-safe: the Scheduler
// calls it with its mutex held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/eta.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

// The progress points at which the ETA shown is kept, in percent of the jobs
// done; their spellings are the `progress` label's values
// (common/metric_names.h).
inline constexpr int kEtaMilestones[] = {10, 25, 50, 75, 90};

struct EtaError {
  std::string progress;  // "10", "25", ...
  double ratio = 0;      // (shown - actual) / actual
};

class EtaTracker {
 public:
  // A result of a job of `submission` that needed `passes_needed` passes
  // (generation: max_tokens) arrived.
  void JobFinished(int64_t submission, int64_t passes_needed, const JobResult& result);
  const std::map<int64_t, StopStats>& stops() const { return stops_; }

  // `submission` has `done` of `total` jobs finished at `now_ms`; for every
  // milestone reached and not yet kept, `eta` (seconds, the ETA shown now)
  // is asked once and kept (an unknown ETA is kept as nothing to judge).
  void Progress(int64_t submission, int64_t done, int64_t total, int64_t now_ms,
                const std::function<std::optional<double>()>& eta);
  // `submission` ended at `now_ms`: the errors of the ETAs kept for it (a
  // milestone reached at its end, with nothing left to estimate, has none).
  // Forgets the submission.
  std::vector<EtaError> Ended(int64_t submission, int64_t now_ms);

 private:
  struct Shown {
    std::optional<double> eta;
    int64_t at_ms = 0;
  };
  std::map<int64_t, StopStats> stops_;
  std::map<int64_t, std::map<int, Shown>> shown_;  // submission -> milestone -> ETA
};

}  // namespace nightshift::scheduler
