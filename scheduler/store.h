// The scheduler's durable state: one SQLite file.
//
// Open() applies the numbered migrations of migrations/ (embedded in the
// binary at build time) in order, inside one transaction together with their
// rows in schema_migrations, and refuses a database whose schema is newer than
// any migration it knows. The database runs in WAL mode with
// synchronous=FULL, so a write that returned OK survives kill -9 and power
// loss; every write is one BEGIN IMMEDIATE transaction.
//
// Every state change of a job goes through Transition() (types.h); the
// migration mirrors it with a CHECK and a trigger, so neither side can drift
// silently. Results are insert-once: a second result for a job, or one that
// arrives under a lease that is no longer current, is refused and counted.
//
// Thread-safety: every method is safe to call from any thread; calls are
// serialised on one connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/clock.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

namespace sqlite {
class Db;
class Transaction;
}  // namespace sqlite

// One numbered migration: `version` from the file name's number
// ("0001_initial.sql" -> 1), `sql` its statements.
struct Migration {
  int64_t version = 0;
  std::string name;
  std::string sql;
};

// The migrations of migrations/, in version order (generated at build time).
const std::vector<Migration>& BuiltinMigrations();

struct StoreOptions {
  int busy_timeout_ms = 5000;
  int64_t progress_passes_kept = 256;                   // per batch
  int64_t progress_retention_ms = 7 * 24 * 3600'000LL;  // older samples are pruned
};

// A job's move from one state to another, returned by every write that
// changes states, so the caller can notify watchers and workers.
struct JobChange {
  int64_t job_id = 0;
  int64_t submission_id = 0;
  JobState from = JobState::kQueued;
  JobState to = JobState::kQueued;
  int64_t batch_id = 0;  // the batch it was in before the change (0 = none)
  std::string worker_id;
  std::string reason;
};

// A batch and its lease.
struct Lease {
  int64_t batch_id = 0;
  std::string worker_id;
  std::string model;
  int64_t expires_at_ms = 0;
  std::vector<Job> jobs;  // the jobs this call leased (all of them for a new batch)
};

struct JobFilter {
  int64_t submission_id = 0;  // 0 = any
  std::optional<JobState> state;
  std::string model;  // "" = any
  bool with_results = false;
};

struct JobView {
  Job job;
  std::optional<JobResult> result;  // filled when JobFilter::with_results and one exists
};

struct JobPage {
  std::vector<JobView> jobs;
  int64_t next_after_id = 0;  // pass as after_id for the next page; 0 = no more
};

struct PassSample {
  int64_t batch_id = 0;
  int64_t pass_index = 0;
  double seconds = 0;
  int64_t bytes_read = 0;
  double io_wait_seconds = 0;
  int32_t sequences = 0;
  int64_t tokens = 0;
  std::string mode;
  int64_t at_ms = 0;
};

// What became of one result of InsertResults.
struct ResultOutcome {
  Status status;     // OK, or why it was refused (as InsertResult's errors)
  JobChange change;  // the job's change when OK
};

struct StoreCounters {
  int64_t duplicate_results = 0;  // a second result for a job that has one
  int64_t late_results = 0;       // a result under a lease that is no longer current
  int64_t lease_expirations = 0;  // batches whose lease ran out
};

// What one SubmitJobs call adds. submission_id 0 starts a new submission;
// otherwise the jobs are appended to that open submission. keep_open leaves
// the submission open for more chunks (not scheduled until sealed).
struct NewJob {
  JobSpec spec;
  std::optional<TokenisedPrompt> tokens;  // absent: tokenise when the model's tokenizer arrives
  std::string reason;                     // why it waits, e.g. "waiting for a worker that serves m"
  int32_t max_attempts = 3;
};

struct SubmitChunk {
  int64_t submission_id = 0;
  std::string idempotency_key;  // "" = none
  bool keep_open = false;
  std::vector<NewJob> jobs;
};

struct SubmitOutcome {
  int64_t submission_id = 0;
  std::vector<int64_t> job_ids;  // in chunk order
  bool replayed = false;         // the idempotency key matched an earlier submission; nothing added
};

// The outcome of tokenising one waiting job.
struct Tokenisation {
  int64_t job_id = 0;
  bool ok = false;
  TokenisedPrompt tokens;  // when ok
  std::string error;       // when not: the job fails with it
};

class Store {
 public:
  // Opens or creates the database at `path` and migrates it. `clock` is not
  // owned and must outlive the store. Errors: FailedPrecondition when the
  // database's schema is newer than `migrations` knows (it was written by a
  // newer scheduler) or its history disagrees with them; DataLoss when the
  // file is not a database; Unavailable when it cannot be opened.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path, Clock* clock,
                                               StoreOptions options = {});
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path, Clock* clock,
                                               StoreOptions options,
                                               const std::vector<Migration>& migrations);
  ~Store();

  // The version of the last migration applied.
  int64_t schema_version() const { return schema_version_; }
  StoreCounters counters() const;

  // ---- submissions and jobs

  // Stores every job of the chunk, or none. Errors: InvalidArgument listing
  // every job whose custom_id is already used in the submission ("job 3:
  // custom_id 'a' is already used in submission 7"); NotFound / FailedPrecondition
  // when appending to a submission that does not exist / is sealed.
  StatusOr<SubmitOutcome> Submit(const SubmitChunk& chunk);
  StatusOr<Submission> GetSubmission(int64_t id);
  // The prompt tokens of the submission's succeeded jobs, summed from their
  // stored outputs (a row stored before cached_prompt_tokens existed counts
  // 0 of them). O(succeeded jobs): for `status`, not for pollers. NotFound
  // for an unknown id.
  StatusOr<PromptTokenUsage> SumPromptTokens(int64_t submission_id);
  StatusOr<Job> GetJob(int64_t id);
  // Jobs with id > after_id matching the filter, in id order (= input order
  // within a submission), at most `limit`.
  StatusOr<JobPage> ListJobs(const JobFilter& filter, int64_t after_id, int limit);
  // Cancels every unfinished job of the submission (seals it too; each job
  // keeps `reason`) / one job.
  // Returns the changes; leased or running ones carry their batch, whose
  // worker must be told. Finished jobs are left alone. NotFound for an
  // unknown id.
  StatusOr<std::vector<JobChange>> CancelSubmission(int64_t id,
                                                    const std::string& reason = "cancelled");
  StatusOr<std::vector<JobChange>> CancelJob(int64_t id);

  // ---- tokenisation

  // Queued jobs of `model` that wait for its tokenizer, oldest first.
  StatusOr<std::vector<Job>> UntokenisedJobs(const std::string& model, int limit);
  // Records prompt tokens (the job becomes schedulable) or fails the job with
  // the error. Jobs no longer queued are skipped. Returns the failures.
  StatusOr<std::vector<JobChange>> ApplyTokenisation(const std::vector<Tokenisation>& outcomes);

  // ---- the queue and leases

  // Up to `limit` queued tokenised jobs of sealed submissions for `model`, in
  // dispatch order (priority desc, submission, id). The first
  // `with_prompt_ids` of them carry their prompt ids (QueuedJob::prompt_ids);
  // the rest none (a long queue played out by the ETA need not hold them all).
  StatusOr<std::vector<QueuedJob>> QueuedJobs(const std::string& model, int limit,
                                              int with_prompt_ids);
  // Models of the submission's queued tokenised jobs.
  StatusOr<std::vector<std::string>> QueuedModelsOf(int64_t submission_id);
  // Queued jobs of the submission that wait for their model's tokenizer.
  StatusOr<int64_t> CountUntokenised(int64_t submission_id);
  // Fails queued jobs with a reason (e.g. they can never fit any worker).
  StatusOr<std::vector<JobChange>> FailQueued(const std::vector<int64_t>& job_ids,
                                              const std::string& reason);
  // Leases queued jobs to a new batch of `worker_id` until now + lease_ms.
  // Jobs no longer queued are skipped; FailedPrecondition when none is left.
  StatusOr<Lease> CreateBatch(const std::string& worker_id, const std::string& model,
                              const std::vector<int64_t>& job_ids, int64_t lease_ms);
  // Adds queued jobs to an active batch (a top-up at a pass boundary);
  // FailedPrecondition when the batch is not active or no job is left.
  StatusOr<Lease> TopUp(int64_t batch_id, const std::vector<int64_t>& job_ids);
  // Extends the leases of every active batch of the worker to now + lease_ms
  // (never shortens one) and records that the worker was seen.
  Status ExtendLeases(const std::string& worker_id, int64_t lease_ms);
  // Records a pass of an active batch of `worker_id` (its leased jobs become
  // running) and prunes old samples. FailedPrecondition when the batch is not
  // this worker's active batch.
  StatusOr<std::vector<JobChange>> RecordProgress(const std::string& worker_id,
                                                  const PassProgress& progress);
  StatusOr<std::vector<PassSample>> RecentProgress(int64_t batch_id, int limit);
  // Inserts a job's result and finishes the job. Errors (counted): AlreadyExists
  // when the job has a result; FailedPrecondition when the result's lease is
  // not current (batch expired, job re-leased, cancelled, other worker).
  // NotFound for an unknown job.
  StatusOr<JobChange> InsertResult(const JobResult& result);
  // Several results (those a worker finished in one pass) in one
  // transaction: one outcome each, in order; a refused one changes nothing
  // and does not stop the others. The call fails only on a database error,
  // and then none is stored.
  StatusOr<std::vector<ResultOutcome>> InsertResults(const std::vector<JobResult>& results);
  StatusOr<std::optional<JobResult>> GetResult(int64_t job_id);
  // The worker hands jobs of its active batch back. Without `error`
  // (draining, no room) they are queued again without costing an attempt;
  // with one (they could not run there: a checkpoint read failed) each costs
  // an attempt, as a lost lease does, and a job with none left fails with
  // the error as its reason. FailedPrecondition unless the batch is an
  // active one of the worker.
  StatusOr<std::vector<JobChange>> HandBack(const std::string& worker_id, int64_t batch_id,
                                            const std::vector<int64_t>& job_ids,
                                            const std::string& error = "");
  // Every active batch whose lease ran out: its jobs return to the queue with
  // attempt+1, or fail once max_attempts leases were lost.
  StatusOr<std::vector<JobChange>> ExpireLeases();
  // Ends the worker's active batches not in `keep` as if their lease expired
  // (a worker that re-attaches no longer runs them).
  StatusOr<std::vector<JobChange>> ExpireWorkerBatches(const std::string& worker_id,
                                                       const std::vector<int64_t>& keep);
  // Active batches with their leased/running jobs.
  StatusOr<std::vector<Lease>> ActiveBatches();

  // ---- workers and tokenizers

  // Records an attach (replacing the advertised models) and returns the new
  // session number, one more than the worker's previous one.
  StatusOr<int64_t> AttachWorker(const WorkerInfo& worker);
  // Marks the worker disconnected if `session` is still its current one.
  Status DetachWorker(const std::string& worker_id, int64_t session);
  // Removes a model from the worker's advertised list (it failed there).
  Status WithdrawModel(const std::string& worker_id, const std::string& model);
  // Every worker ever attached, with its models, by id.
  StatusOr<std::vector<WorkerInfo>> ListWorkers();
  Status PutTokenizer(const TokenizerFiles& tokenizer);
  // NotFound when no tokenizer with that hash is cached.
  StatusOr<TokenizerFiles> GetTokenizer(const std::string& hash);

 private:
  Store(std::unique_ptr<sqlite::Db> db, Clock* clock, StoreOptions options);
  Status Migrate(const std::vector<Migration>& migrations);
  // Ends the batches as expired and commits `tx`.
  StatusOr<std::vector<JobChange>> ExpireBatches(sqlite::Transaction& tx,
                                                 const std::vector<int64_t>& batches);
  // Ends every job of the batch (requeued, or failed when its attempts are
  // spent) and then the batch as `end`.
  StatusOr<std::vector<JobChange>> EndBatchJobs(int64_t batch_id, BatchState end,
                                                bool costs_attempt);
  StatusOr<std::vector<JobChange>> CancelWhere(const std::string& where_sql, int64_t id,
                                               const std::string& reason);
  // An active batch ends as `end` (with only_if_empty, only when no job is
  // in it any more); a batch that is not active is left as it is.
  Status EndBatch(int64_t batch_id, BatchState end, bool only_if_empty);
  StatusOr<std::vector<Job>> LeaseInto(int64_t batch_id, const std::string& worker_id,
                                       const std::vector<int64_t>& job_ids);
  StatusOr<Job> ReadJob(int64_t id);
  // Inserts one result inside the caller's transaction; a refusal goes into
  // outcome->status, a database error is returned.
  Status InsertResultLocked(const JobResult& result, ResultOutcome* outcome);
  Status SetState(int64_t job_id, JobState from, JobEvent event, int64_t batch_id,
                  const std::string& reason, int32_t attempt_delta, JobState* to);

  std::unique_ptr<sqlite::Db> db_;
  Clock* clock_;
  StoreOptions options_;
  int64_t schema_version_ = 0;
  std::mutex mu_;
  std::atomic<int64_t> duplicate_results_{0};
  std::atomic<int64_t> late_results_{0};
  std::atomic<int64_t> lease_expirations_{0};
};

}  // namespace nightshift::scheduler
