// Who watches which submission, and what they are sent: the submission's
// status with its ETA on every change and pass. A known ETA is recomputed at
// most once a second (it plays the whole queue out) and counted down in
// between; an unknown one, and the last one, every time.
//
// Not thread-safe: the Scheduler calls it with its mutex held, and
// SubmissionWatcher::OnUpdate runs under it (it must not block or call back
// into the Scheduler).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "scheduler/fleet.h"
#include "scheduler/store.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

struct SubmissionStatus {
  Submission submission;
  std::optional<double> eta_seconds;  // until every job is finished; unknown when absent
  std::vector<BatchStatus> batches;   // batches running its jobs
  int64_t waiting_for_tokenizer = 0;  // queued jobs whose model has no tokenizer yet
  // Only when asked for (Scheduler::GetSubmission's with_prompt_tokens).
  std::optional<PromptTokenUsage> prompt_tokens;
};

struct SubmissionUpdate {
  SubmissionStatus status;
  std::vector<JobChange> changes;  // since the previous update (empty in the first)
};

class SubmissionWatcher {
 public:
  virtual ~SubmissionWatcher() = default;
  // Called first with the current status, then on every change and pass, the
  // last time with status.submission.done() true. Must not block.
  virtual void OnUpdate(const SubmissionUpdate& update) = 0;
};

class Watchers {
 public:
  // Registers `watcher` (not owned; valid until Remove) for `submission_id`,
  // whose ETA `eta` was computed at `now_ms`. Returns the watch id.
  int64_t Add(int64_t submission_id, SubmissionWatcher* watcher, std::optional<double> eta,
              int64_t now_ms);
  void Remove(int64_t watch_id);
  // Whether anyone watches `submission_id`.
  bool Watched(int64_t submission_id) const;

  // Sends `status` (its eta_seconds ignored) and `changes` to every watcher
  // of status.submission, with each watcher's ETA: recomputed by `eta` when
  // due, else counted down from its last figure.
  void Notify(const SubmissionStatus& status, const std::vector<JobChange>& changes, int64_t now_ms,
              const std::function<std::optional<double>()>& eta);

 private:
  struct Watch {
    int64_t submission_id = 0;
    SubmissionWatcher* watcher = nullptr;
    std::optional<double> eta;
    int64_t eta_at_ms = -1;  // when eta was computed; -1 = never
  };
  std::map<int64_t, Watch> watches_;
  int64_t next_id_ = 1;
};

}  // namespace nightshift::scheduler
