// The worker's runner: takes the scheduler's batch leases, top-ups and
// cancels, runs the batch a pass at a time on the open checkpoint, and
// reports each pass, each pass's finished jobs (as one message) and what it
// hands back. The checkpoint stays open across batches of the same model.
//
// The scheduler side is a SchedulerLink (the gRPC Session in production, a
// recording fake in tests) and engines come from an EngineFactory, so the
// whole lease-to-results path is tested without gRPC or libtorch.
//
// Errors: a checkpoint that fails to open, or a pass that fails, fails every
// job of the batch with the reason, withdraws the model (the scheduler sends
// no more of it here) and closes the engine; the worker goes on. A later
// assignment of a withdrawn model (sent before the scheduler saw the
// withdrawal) is handed back, not failed.
//
// A pass that fails reading the checkpoint (DataLoss or Unavailable from the
// engine: an I/O error, a short read; IsCheckpointReadError) is the disk's
// fault, not the jobs': the model is reported unhealthy (SendModelHealth),
// the batch's unfinished jobs go back with the error (SendCouldNotRun: each
// costs an attempt, so a disk that keeps failing ends in failed jobs with
// the reason) and the engine is closed. After `unhealthy_seconds` the model
// is reported healthy again and its next batch reopens the checkpoint.
// Other models run meanwhile; an assignment of the unhealthy model is
// handed back.
//
// Thread-safety: Assign, Cancel, RunningBatches and OpenModel may be called
// from any thread (the session's reader); Run/RunOnce/Drain from one runner
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "worker/daemon/batch_runner.h"
#include "worker/daemon/model_catalog.h"
#include "worker/daemon/types.h"
#include "worker/daemon/worker_metrics.h"

namespace nightshift::worker {

// What the runner tells the scheduler. Implementations must not block for
// long (they queue) and must be thread-safe: the runner thread calls them,
// and after a drain Assign's caller calls SendHandBack.
class SchedulerLink {
 public:
  virtual ~SchedulerLink() = default;
  // Progress of one pass. While disconnected only the newest is kept (it
  // carries every job's tokens so far) and sent on the reconnect.
  virtual void SendPass(const api::PassProgress& pass) = 0;
  // Jobs finished together; kept until delivered (across reconnects).
  virtual void SendResults(std::vector<JobOutcome> results) = 0;
  // Jobs this worker will not run; `draining`: it is shutting down.
  virtual void SendHandBack(int64_t batch_id, std::vector<int64_t> job_ids, bool draining) = 0;
  // The model failed here; no more of it should be sent.
  virtual void SendWithdraw(const std::string& model, const std::string& reason) = 0;
  // Jobs that could not run here because a read of the checkpoint failed:
  // each costs an attempt (queued again, or failed with `error` when none
  // is left).
  virtual void SendCouldNotRun(int64_t batch_id, std::vector<int64_t> job_ids,
                               const std::string& error) = 0;
  // `model`'s checkpoint cannot be read now (`unhealthy`: why; send it no
  // batches) or can again ("").
  virtual void SendModelHealth(const std::string& model, const std::string& unhealthy) = 0;
};

// Whether a pass's error is a failed read of the checkpoint (DataLoss or
// Unavailable: an I/O error, a short read), which makes the model unhealthy
// for a while instead of failing the jobs.
bool IsCheckpointReadError(const Status& status);

// Opens the engine for a model with the given KV budget.
using EngineFactory = std::function<StatusOr<std::unique_ptr<BatchEngine>>(
    const ModelEntry& model, uint64_t kv_budget_bytes)>;

struct WorkerOptions {
  // Each pass lasts at least this long (a test knob: fault tests kill a
  // worker mid-batch deterministically).
  double min_pass_seconds = 0;
  // How long a model whose checkpoint read failed mid-pass stays unhealthy
  // (offered to no batch) before it is offered again.
  double unhealthy_seconds = 60;
};

class Worker {
 public:
  // `catalog`, `link` and `metrics` (may be null) must outlive the Worker.
  // `link` may be set later with SetLink, before the first Run or RunOnce.
  Worker(const Catalog* catalog, EngineFactory factory, SchedulerLink* link, WorkerMetrics* metrics,
         WorkerOptions options);
  ~Worker();
  void SetLink(SchedulerLink* link) { link_ = link; }

  // Queue commands for the runner thread. After Drain an assignment is
  // handed back at once (draining), from the calling thread.
  void Assign(BatchAssignment assignment);
  void Cancel(CancelRequest cancel);

  // The batch running now (empty or one id), for a reconnect's hello.
  std::vector<int64_t> RunningBatches() const;
  // The model whose checkpoint is open, "" when none.
  std::string OpenModel() const;
  // Models withdrawn after a failure (not advertised again on reconnect).
  std::set<std::string> WithdrawnModels() const;
  // Unhealthy models (a checkpoint read failed) and why, for a reconnect's
  // hello.
  std::map<std::string, std::string> UnhealthyModels() const;

  // Handles queued commands and runs passes until `stop` is set, then
  // drains (see Drain). Wakes at least every 100 ms to look at `stop`. A
  // pass that ends with `stop` set announces the drain (an empty hand-back
  // with draining) before its report and results, and its report asks for
  // no top-up, so the scheduler leases this worker nothing more.
  void Run(const std::atomic<bool>& stop);
  // One step: handles every queued command, then runs one pass when a
  // batch has jobs. False when there was nothing to do.
  bool RunOnce();
  // Hands back every job not finished (the running batch's and any queued
  // assignment's) with draining set; announces the drain with an empty
  // hand-back when there is nothing to hand back and it was not announced.
  // Assignments arriving later are handed back by Assign.
  void Drain();

 private:
  using Command = std::variant<BatchAssignment, CancelRequest>;

  void Handle(BatchAssignment assignment);
  void Handle(const CancelRequest& cancel);
  Status EnsureOpen(const std::string& model);
  void FailModel(const std::string& model, const std::string& reason,
                 std::vector<JobOutcome> failed);
  // A pass failed reading the checkpoint: unhealthy model, jobs back, engine closed.
  void ReadFailed(const std::string& model, const std::string& reason);
  // Reports healthy again the models whose unhealthy time is over.
  void RecoverModels();
  // Closes the engine and forgets the batches (after a failure).
  void CloseModel();
  void RunPass();
  void ReportPass(const PassOutcome& pass, bool want_top_up);
  void HandBackDraining(int64_t batch_id, std::vector<int64_t> job_ids);
  void ReportKvInUse();
  std::deque<Command> TakeCommands();

  const Catalog* catalog_;
  EngineFactory factory_;
  SchedulerLink* link_;
  WorkerMetrics* metrics_;
  WorkerOptions options_;

  // Runner-thread state.
  const ModelEntry* model_ = nullptr;  // of the open engine
  std::unique_ptr<BatchEngine> engine_;
  std::unique_ptr<BatchRunner> batch_;
  // The batch that last ran empty, kept so that a top-up of it arriving
  // after its last pass joins it (its pass indices go on).
  std::unique_ptr<BatchRunner> finished_batch_;
  std::string batch_model_;
  const std::atomic<bool>* stop_ = nullptr;  // Run's
  bool drain_announced_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> commands_;
  int64_t running_batch_ = 0;  // mirrors batch_ for other threads
  std::string open_model_;     // mirrors model_
  std::set<std::string> withdrawn_;
  struct Unhealthy {
    std::string reason;
    std::chrono::steady_clock::time_point until;
  };
  std::map<std::string, Unhealthy> unhealthy_;
  bool drained_ = false;  // Drain ran: assignments are handed back at once
};

}  // namespace nightshift::worker
