// The scheduler's domain core: what the gRPC handlers call. It validates and
// tokenises submissions, keeps the live state of attached workers and their
// batches, runs the policy (Schedule) whenever something changes, applies its
// plan through the store, sends assignments and cancels to workers through
// WorkerLink, and pushes submission updates (with an ETA) to watchers.
//
// Plain C++ on plain structs: no gRPC or protobuf types. The worker link and
// the watchers are narrow interfaces with in-memory fakes in tests; the clock
// and the store are injected. The Scheduler itself is the coordinator; its
// parts each live in a class of their own:
//   Fleet           the live workers and batches (fleet.h)
//   TokenizerCache  prompt encoders by tokenizer hash (tokenizer_cache.h)
//   Watchers        who watches which submission, ETA refreshes (watchers.h)
//   live_eta.h      the ETAs of the live state
//   EventMetrics    its events as Prometheus metrics (event_metrics.h)
//
// Thread-safety: every public method may be called from any thread. Calls
// that change state are serialised on one mutex, which guards the fleet and
// the watchers; WorkerLink::Send/Close and SubmissionWatcher::OnUpdate are
// called with it held and must not block or call back into the Scheduler.
// The tokenizer cache has a lock of its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/clock.h"
#include "scheduler/eta_tracker.h"
#include "scheduler/event_metrics.h"
#include "scheduler/fleet.h"
#include "scheduler/live_eta.h"
#include "scheduler/policy.h"
#include "scheduler/prompt_encoder.h"
#include "scheduler/store.h"
#include "scheduler/tokenizer_cache.h"
#include "scheduler/types.h"
#include "scheduler/validate.h"
#include "scheduler/watchers.h"

namespace nightshift::scheduler {

class SchedulerMetrics;

// ---------------------------------------------------------------- to workers

// ---------------------------------------------------------------- to clients

struct SubmitRequest {
  std::vector<JobSpec> jobs;
  int64_t submission_id = 0;  // 0 = new; else append to this open submission
  bool keep_open = false;
  std::string idempotency_key;
  int64_t request_bytes = 0;                 // size on the wire, for the oversized-request check
  std::vector<std::string> decode_problems;  // per job, see ValidateJobs
};

struct SubmitReply {
  int64_t submission_id = 0;
  std::vector<int64_t> job_ids;
  bool replayed = false;
  int64_t waiting_for_tokenizer = 0;  // jobs held until a worker serving their model attaches
};

struct WorkerStatus {
  WorkerInfo info;
  std::optional<BatchStatus> batch;
  std::map<std::string, double> measured_seconds_per_pass;  // by model: median of recent passes
  bool draining = false;
};

struct ModelEstimate {
  std::string worker_id;
  bool connected = false;
  ModelOffer offer;
  double seconds_per_pass = 0;  // measured if any, else advertised
  bool measured = false;
  int64_t jobs_per_batch = 0;  // how many such jobs its KV budget holds
};

struct Estimate {
  std::string model;
  std::vector<ModelEstimate> workers;
  std::optional<double>
      seconds;               // for the asked jobs on the connected workers, queue ahead included
  int64_t queued_ahead = 0;  // queued jobs of the model ahead of them
};

struct SchedulerOptions {
  int64_t lease_ms = 60'000;
  int64_t heartbeat_ms = 10'000;
  int32_t max_attempts = 3;
  int queue_window = 4096;   // queued jobs per model one scheduling round looks at
  int eta_window = 100'000;  // queued jobs per model an ETA plays out
  // The shortest prefix of prompt ids queued jobs must share to be grouped
  // into one batch, counted once against the pass-token budget
  // (Snapshot::min_shared_prefix_tokens).
  int64_t min_shared_prefix_tokens = kDefaultMinSharedPrefixTokens;
  std::string tokenizer_cache_dir;  // where tokenizer bundles are written
  SubmitLimits limits;
  // A job naming a model no known worker (connected or not) advertises is
  // refused at submit unless this is set (queues filled before their
  // workers start).
  bool allow_unknown_models = false;
  // Filled as jobs are submitted, leased and finished, leases lost and
  // results refused; nullptr = no metrics. Not owned; must outlive the Scheduler.
  SchedulerMetrics* metrics = nullptr;
};

// The live figures the metrics endpoint shows, computed on demand.
struct LiveGauges {
  int64_t workers_attached = 0;
  // Seconds until the remaining jobs of each model (running and queued)
  // finish; only models with remaining work whose ETA is known.
  std::map<std::string, double> eta_seconds;
};

class Scheduler {
 public:
  // `store` and `clock` are not owned and must outlive the Scheduler.
  Scheduler(Store* store, Clock* clock, SchedulerOptions options);
  ~Scheduler();

  // Loads the state a restart must keep: every worker is disconnected until
  // it attaches again; active batches keep their leases until then.
  Status Start();

  // ---- clients

  // Validates, tokenises with the model's cached tokenizer where one is known
  // (a prompt over the context is a validation error), stores (durable when
  // this returns OK) and schedules. A request with any bad job is refused
  // whole: InvalidArgument naming the first bad jobs of every kind together
  // and their count (FormatJobProblems; CheckJobs gives the whole list).
  // ResourceExhausted ("the scheduler's disk is full: ...") when the store
  // cannot grow; nothing of the request is stored then.
  StatusOr<SubmitReply> Submit(SubmitRequest request);
  // Checks jobs exactly as Submit would (validation, known models, and the
  // tokenisation and context of those whose model's tokenizer is known)
  // without storing anything, filling the same defaults. Every problem, in
  // job order; empty when Submit would take them (the request's size aside).
  // `decode_problems` as for ValidateJobs.
  std::vector<JobProblem> CheckJobs(std::vector<JobSpec>& jobs,
                                    const std::vector<std::string>& decode_problems = {});
  // CheckJobs of a whole request (the CheckJobs RPC): InvalidArgument when
  // the request is empty or too large as a whole, else every problem.
  StatusOr<std::vector<JobProblem>> CheckRequest(SubmitRequest request);
  // With `with_prompt_tokens`, also the prompt tokens of its succeeded jobs
  // (SubmissionStatus::prompt_tokens): a pass over their results, outside
  // the scheduler's lock.
  StatusOr<SubmissionStatus> GetSubmission(int64_t id, bool with_prompt_tokens = false);
  StatusOr<JobView> GetJob(int64_t id);
  StatusOr<JobPage> ListJobs(const JobFilter& filter, int64_t after_id, int limit);
  // Cancels unfinished jobs (each keeps `reason`); workers running them are
  // told. NotFound for an unknown id.
  StatusOr<SubmissionStatus> CancelSubmission(int64_t id, const std::string& reason = "cancelled");
  StatusOr<JobView> CancelJob(int64_t id);
  // Registers a watcher (not owned; it must stay valid until Unwatch returns)
  // and calls it at once with the current status. Returns a watch id.
  StatusOr<int64_t> Watch(int64_t submission_id, SubmissionWatcher* watcher);
  void Unwatch(int64_t watch_id);
  StatusOr<std::vector<WorkerStatus>> ListWorkers();
  // Every model a known worker (connected or not) advertises: those a
  // submission may name unless allow_unknown_models is set.
  std::set<std::string> KnownModels();
  // The figures of `model` on every known worker serving it, and the time
  // `jobs` jobs of that shape would take on the connected ones after the
  // queue ahead. NotFound when no known worker serves the model.
  StatusOr<Estimate> EstimateModel(const std::string& model, int64_t jobs, int64_t prompt_tokens,
                                   int64_t max_new_tokens);

  // ---- workers (every call after Attach names the session it returned;
  // a stale session is FailedPrecondition and changes nothing)

  // Records the worker, fences an older stream of the same id (its link is
  // closed), ends batches it no longer runs, sends the welcome through `link`
  // (not owned; valid until Detach), then schedules. InvalidArgument for a
  // malformed hello.
  StatusOr<int64_t> Attach(const WorkerHello& hello, WorkerLink* link);
  // The stream ended. Its batches keep their leases (it may reconnect).
  void Detach(const std::string& worker_id, int64_t session);
  // Caches a tokenizer the worker advertised (InvalidArgument when its hash
  // matches none of the worker's models) and validates the jobs waiting for it.
  Status UploadTokenizer(const std::string& worker_id, int64_t session,
                         const TokenizerFiles& tokenizer);
  Status Heartbeat(const std::string& worker_id, int64_t session);
  Status Progress(const std::string& worker_id, int64_t session, const PassProgress& progress);
  // Store::InsertResult's errors (duplicate, late) are returned and counted.
  Status Result(const std::string& worker_id, int64_t session, JobResult result);
  // Results a worker finished together (one pass), committed in one
  // transaction: one Status per result, in order (refusals as Result's).
  // Fails as a whole only for a stale session or a database error.
  StatusOr<std::vector<Status>> Results(const std::string& worker_id, int64_t session,
                                        std::vector<JobResult> results);
  // The worker returns jobs it will not run; `draining` stops new work for it.
  // With `error` (they could not run there: a checkpoint read failed
  // mid-pass) each job's attempt counts and one with none left fails with
  // the error (Store::HandBack); the ones queued again are counted as
  // retries.
  Status HandBack(const std::string& worker_id, int64_t session, int64_t batch_id,
                  const std::vector<int64_t>& job_ids, bool draining,
                  const std::string& error = "");
  // The worker cannot read `model`'s checkpoint now (`unhealthy`: why) or
  // can again (""): the offer is marked so, ListWorkers shows it, and no
  // batch of an unhealthy model goes to that worker. NotFound when the
  // worker does not offer the model.
  Status ModelHealth(const std::string& worker_id, int64_t session, const std::string& model,
                     const std::string& unhealthy);
  // The model failed on the worker (e.g. a corrupt checkpoint): no more
  // batches of it go there.
  Status Withdraw(const std::string& worker_id, int64_t session, const std::string& model,
                  const std::string& reason);

  // Expires leases and schedules. The service calls it periodically.
  void Tick();

  StoreCounters counters() const { return store_->counters(); }
  // Workers attached now, and each model's ETA (played out as for a
  // submission's ETA). Reads the store's queue; never fails (a model whose
  // queue cannot be read has no ETA).
  LiveGauges Gauges();

 private:
  // Each job's tokens (where its model's tokenizer is known; nullopt while
  // it waits for one) and the jobs that cannot run (tokenisation, context),
  // for the jobs not in `skip`.
  struct Encoded {
    std::vector<std::optional<TokenisedPrompt>> tokens;
    std::vector<JobProblem> problems;
  };
  Encoded EncodeJobs(const std::vector<JobSpec>& jobs, const std::vector<bool>& skip);
  // Every problem of every job, in job order: validation and known models
  // first, then tokenisation and context for the jobs validation passed (so
  // one refusal names every kind of bad job at once), and their tokens.
  Encoded CheckAndEncode(std::vector<JobSpec>& jobs,
                         const std::vector<std::string>& decode_problems);
  Status CheckSession(const std::string& worker_id, int64_t session);
  // Notes that `worker_id` was heard from and extends its leases.
  Status HeardFrom(const std::string& worker_id);
  // The encoder of `model`'s tokenizer, from the first worker serving it
  // (connected ones first) whose tokenizer was uploaded; NotFound (with the
  // waiting reason) when there is none yet.
  StatusOr<std::shared_ptr<const PromptEncoder>> EncoderFor(const std::string& model);
  Status ValidateWaiting(const std::string& model);
  void ScheduleLocked(bool all_models);
  void ApplyAssignment(const Assignment& assignment);
  // Drops jobs that left their batch from the fleet, and tells workers about
  // their jobs that were cancelled.
  void Forget(const std::vector<JobChange>& changes);
  void Notify(const std::vector<JobChange>& changes);
  void NotifySubmission(int64_t submission_id, std::vector<JobChange> changes);
  StatusOr<SubmissionStatus> StatusLocked(int64_t id);
  EtaContext EtaContextLocked();
  std::optional<double> EtaLocked(const SubmissionStatus& status);
  // Keeps the ETA shown as `submission_id` passes a milestone, and observes
  // their errors when it ends.
  void TrackEta(int64_t submission_id);

  Store* store_;
  Clock* clock_;
  SchedulerOptions options_;
  TokenizerCache tokenizers_;
  EventMetrics events_;

  std::mutex mu_;
  Fleet fleet_;
  Watchers watchers_;
  EtaTracker eta_tracker_;
  ForecastCache forecasts_;
};

}  // namespace nightshift::scheduler
