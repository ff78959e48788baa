// The live state of the workers and the batches they run, as the scheduler
// keeps it between store writes: which worker holds which batch, each
// batch's progress, and the figures the policy's snapshot and the ETA read
// (seconds per pass, when a worker is free again, the smallest context).
// The store holds the durable half (leases, job states); a restart rebuilds
// this from it.
//
// Plain data and queries; no I/O, no clock. Not thread-safe: the Scheduler
// guards its Fleet with its mutex, and WorkerLink calls are made with it held.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/eta.h"
#include "scheduler/policy.h"
#include "scheduler/store.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

// What the scheduler tells a worker.
struct WorkerCommand {
  enum class Kind { kWelcome, kAssign, kCancel, kResultsStored };
  Kind kind = Kind::kWelcome;
  // kWelcome
  int64_t session = 0;
  int64_t lease_ms = 0;
  int64_t heartbeat_ms = 0;
  std::vector<std::string> missing_tokenizers;  // hashes the worker should upload
  // kAssign (a new batch, or a top-up of a running one) and kCancel
  int64_t batch_id = 0;
  std::string model;
  int64_t lease_expires_at_ms = 0;
  bool top_up = false;
  std::vector<Job> jobs;         // kAssign: specs with token ids
  std::vector<int64_t> job_ids;  // kCancel, kResultsStored
  std::string reason;            // kCancel
};

// One attached worker's stream. Implemented by the service; fakes in tests.
class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  // Queues a command for the worker. Must not block.
  virtual void Send(WorkerCommand command) = 0;
  // Ends the stream with `why` (a newer attach of the same worker id fenced it).
  virtual void Close(const Status& why) = 0;
};

// A running batch, as watchers and ListWorkers see it.
struct BatchStatus {
  int64_t batch_id = 0;
  std::string worker_id;
  std::string model;
  std::string mode;
  int64_t passes_done = 0;
  double seconds_per_pass = 0;  // smoothed; 0 before the first pass
  double last_pass_seconds = 0;
  int32_t sequences = 0;
  int64_t jobs = 0;  // live jobs in the batch (of the submission, for a submission's view)
  double eta_seconds_per_pass = 0;  // a decode pass of it, as the ETA prices it; 0: not measured
  int64_t eta_passes_measured = 0;  // the measured passes of its worker that figure rests on
};

// A batch under lease and the progress its worker reported.
struct LiveBatch {
  struct JobProgress {
    int64_t submission_id = 0;
    int64_t passes_needed = 1;
    int64_t generated = 0;       // tokens generated so far, as the worker reports
    int64_t joined_at_pass = 0;  // the batch's passes_done when the job was leased
    bool reported = false;       // a pass report named it (it rode a pass)
    int64_t kv_tokens = 0;       // KV positions it reserves (QueuedJob::reserved_kv_tokens)
    // Tokens it feeds in its first pass (QueuedJob::pass_tokens), less the
    // prefix it shares with a job leased beside it (Assignment::job_pass_tokens).
    int64_t pass_tokens = 0;
  };
  int64_t id = 0;
  std::string worker_id;
  std::string model;
  std::map<int64_t, JobProgress> jobs;  // by job id: the jobs still in it
  int64_t passes_done = 0;
  double seconds_per_pass = 0;  // smoothed over its passes; 0 before the first
  double last_pass_seconds = 0;
  int32_t sequences = 0;
  std::string mode;
  int64_t free_kv_bytes = 0;
  int64_t free_pass_tokens = 0;  // of the model's pass-token budget, at the last boundary
  // The prompt prefixes its worker keeps for the next pass (PassProgress).
  std::vector<std::vector<int32_t>> kept_prefixes;
  bool wants_top_up = false;
  int64_t pass_started_ms = 0;  // when its pass in flight began (its lease, or the last report)

  // Passes `job` still needs: what it needs less the tokens it generated (one
  // a pass). Passes since its lease do not count: a top-up joins at the
  // worker's next boundary, a pass or more after it was sent.
  int64_t PassesLeft(const JobProgress& job) const;
  // Whether `job` waits for the next boundary: leased as a top-up since the
  // last report (the worker is in a pass without it).
  bool JoinsNextBoundary(const JobProgress& job) const;
  // The batch as clients see it, counting `jobs` of its jobs.
  BatchStatus View(int64_t jobs) const;
};

// The progress record of `job` leased into a batch that had run
// `joined_at_pass` passes.
LiveBatch::JobProgress ProgressOf(const Job& job, int64_t joined_at_pass);

// A worker the scheduler knows, attached or not.
struct LiveWorker {
  WorkerInfo info;  // info.connected: it has a live stream
  WorkerLink* link = nullptr;
  bool draining = false;
  int64_t batch_id = 0;                         // its active batch; 0 = idle
  std::map<std::string, PassTimes> pass_times;  // by model: its measured passes
  int64_t leases_extended_at_ms = 0;            // when its leases were last extended
  // Its batch that ended last (all jobs ended), whose last pass report comes
  // after the results of that pass.
  int64_t ended_batch_id = 0;
  std::string ended_batch_model;
};

class Fleet {
 public:
  // Worker `id`, created (unattached, no link) when new.
  LiveWorker& Worker(const std::string& id);
  // nullptr when unknown.
  LiveWorker* FindWorker(const std::string& id);
  const LiveWorker* FindWorker(const std::string& id) const;
  const std::map<std::string, std::unique_ptr<LiveWorker>>& workers() const { return workers_; }

  // Batch `id`, created for `worker_id` and `model` when new.
  LiveBatch& Batch(int64_t id, const std::string& worker_id, const std::string& model);
  // nullptr when unknown.
  LiveBatch* FindBatch(int64_t id);
  const std::map<int64_t, std::unique_ptr<LiveBatch>>& batches() const { return batches_; }

  // Cancelled jobs of one batch, for its worker to stop.
  struct Cancelled {
    std::string worker_id;
    std::vector<int64_t> job_ids;
  };
  // Drops the jobs that `changes` took out of their batch (to any state but
  // leased or running), then every batch left empty (its worker is idle
  // again). Returns the cancelled jobs by batch id.
  std::map<int64_t, Cancelled> Forget(const std::vector<JobChange>& changes);

  // The workers as the policy sees them: a draining worker is not connected,
  // and an unhealthy model (ModelOffer::unhealthy) is not offered.
  std::vector<WorkerSlot> Slots() const;
  // Workers that offer `model`, connected ones first (their tokenizer is the
  // one that runs the jobs).
  std::vector<const LiveWorker*> ServersOf(const std::string& model) const;
  // The smallest context any worker offers for `model`; 0 = unknown.
  int64_t MaxContext(const std::string& model) const;

  // Seconds per pass of `model` on `worker` before any pass is measured: the
  // worker's advertised figure, else the planner's PassSeconds of what it
  // advertised; 0 = unknown.
  double PriorSecondsPerPass(const LiveWorker& worker, const std::string& model) const;
  // What a pass of `model` costs on `worker`: PassTimes::Cost of its measured
  // passes on the prior.
  PassCost Cost(const LiveWorker& worker, const std::string& model) const;
  // A decode pass of `model` on `worker` (one token per job, `jobs` jobs):
  // measured once it ran one, else the prior; 0 = unknown.
  double SecondsPerPass(const LiveWorker& worker, const std::string& model, int64_t jobs = 1) const;
  // Whether `worker` ran a pass of `model`.
  bool Measured(const LiveWorker& worker, const std::string& model) const;
  // Seconds until `worker`'s active batch finishes its longest job; 0 = idle.
  double BusySeconds(const LiveWorker& worker) const;
  // `batch` as clients see it, counting `jobs` of its jobs, with the
  // measured seconds per pass its ETA rests on.
  BatchStatus View(const LiveBatch& batch, int64_t jobs) const;

 private:
  std::map<std::string, std::unique_ptr<LiveWorker>> workers_;
  std::map<int64_t, std::unique_ptr<LiveBatch>> batches_;
};

}  // namespace nightshift::scheduler
