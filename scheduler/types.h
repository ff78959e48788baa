// The scheduler's own domain vocabulary: job states, queued jobs, stored
// jobs, submissions and results, shared by the store, the policy, the ETA and
// the service. The types it exchanges with workers and clients (specs,
// outputs, offers, pass progress) are the contract's, in proto/types.h. No
// gRPC, protobuf or SQLite types appear here; the service converts wire
// messages to and from these.
//
// Job states are one enum with one transition function (Transition below),
// mirrored in migrations/0001_initial.sql by a CHECK constraint on the state
// names and a trigger that refuses any other change of state; every change of
// a job's state in the store goes through Transition. Batch states are an
// enum beside them, mirrored by the batches table's CHECK constraint.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "proto/types.h"

namespace nightshift::scheduler {

// ---------------------------------------------------------------- job states

enum class JobState { kQueued, kLeased, kRunning, kSucceeded, kFailed, kCancelled };

// What happens to a job. The caller picks kRequeue or kFail after an expired
// lease by comparing attempt with max_attempts; Transition only knows states.
enum class JobEvent {
  kLease,    // put into a batch leased to a worker
  kStart,    // the worker reported a pass of its batch
  kSucceed,  // a result arrived under the current lease
  kFail,     // failed: run-time error, attempts spent, can never fit, invalid prompt
  kCancel,   // a client cancelled it
  kRequeue,  // its lease expired (attempts left) or the worker handed it back
};

inline constexpr JobState kAllJobStates[] = {JobState::kQueued,  JobState::kLeased,
                                             JobState::kRunning, JobState::kSucceeded,
                                             JobState::kFailed,  JobState::kCancelled};
inline constexpr JobEvent kAllJobEvents[] = {JobEvent::kLease,   JobEvent::kStart,
                                             JobEvent::kSucceed, JobEvent::kFail,
                                             JobEvent::kCancel,  JobEvent::kRequeue};

// The one transition function. Returns the state after `event`, or
// FailedPrecondition naming both when the event is not allowed in `from`
// (every event on a terminal state, kStart on a queued job, ...). kStart on a
// running job returns kRunning (progress arrives every pass). Pure.
StatusOr<JobState> Transition(JobState from, JobEvent event);

// "queued", "leased", ... (the spelling stored in the database and shown to users).
const char* JobStateName(JobState state);
const char* JobEventName(JobEvent event);
// InvalidArgument for an unknown name.
StatusOr<JobState> ParseJobState(std::string_view name);
// succeeded, failed and cancelled.
bool IsTerminal(JobState state);

// ---------------------------------------------------------------- batch states

// A batch is active while its lease holds, then ends once: finished (every
// job left with a result or a cancel), expired (its lease was lost) or
// released (the worker handed every job back). Mirrored by the CHECK
// constraint on batches.state in migrations/0001_initial.sql.
enum class BatchState { kActive, kFinished, kExpired, kReleased };

inline constexpr BatchState kAllBatchStates[] = {BatchState::kActive, BatchState::kFinished,
                                                 BatchState::kExpired, BatchState::kReleased};

// "active", "finished", ... (the spelling stored in the database).
const char* BatchStateName(BatchState state);

// ---------------------------------------------------------------- the contract

// The contract's types (proto/types.h), under the names the scheduler uses.
using api::ChatMessage;
using api::Endpoint;
using api::EndpointUrl;
using api::FindModel;
using api::JobOutput;
using api::JobSpec;
using api::LabelScore;
using api::ModelOffer;
using api::ParseEndpointUrl;
using api::PassProgress;
using api::PromptKind;
using api::Sampling;
using api::TokenisedPrompt;
using api::TokenizerFiles;
using api::TokenizerHash;
using api::TokenLogprob;
using api::TopLogprob;
using api::WorkerHello;
using api::WorkerInfo;

// ---------------------------------------------------------------- job sizing

// KV positions a job reserves on a worker: planner::KvPositions of its
// tokenised prompt, max_new_tokens and labels (the figure the engine charges).
int64_t KvTokens(const JobSpec& spec, const TokenisedPrompt& tokens);

// Passes a job needs once running: 1 for classification, max_new_tokens for generation.
int64_t PassesNeeded(const JobSpec& spec);

// ---------------------------------------------------------------- records

// A job as the queue sees it: tokenised, queued, in dispatch order.
struct QueuedJob {
  int64_t id = 0;
  int64_t submission_id = 0;
  std::string model;
  int32_t priority = 0;
  int64_t kv_tokens = 0;  // KvTokens: positions its sequence holds
  int64_t passes = 0;     // PassesNeeded
  // Its tokenised prompt (TokenisedPrompt::prompt): what the engine feeds
  // first, before the job's own labels. Jobs whose ids begin alike share
  // that prefix in a pass (policy.h). Empty when not loaded: shares nothing.
  std::vector<int32_t> prompt_ids;

  // The KV positions it holds across passes (planner::ReservedKvPositions):
  // 0 for a job that ends in its first pass (passes == 1: labels, or at most
  // one new token).
  int64_t reserved_kv_tokens() const { return passes > 1 ? kv_tokens : 0; }
  // Tokens it feeds in its first pass (planner::FirstPassTokens): for a
  // one-pass job all its positions; for a generation of n > 1 tokens, whose
  // positions are prompt + n - 1 and passes n, the prompt.
  int64_t pass_tokens() const { return kv_tokens - std::max<int64_t>(passes - 1, 0); }
};

struct Job {
  int64_t id = 0;
  int64_t submission_id = 0;
  int64_t index = 0;  // position in its submission (input order)
  JobSpec spec;
  JobState state = JobState::kQueued;
  int32_t attempt = 0;  // leases lost so far (expired); max_attempts of them fail the job
  int32_t max_attempts = 1;
  int64_t batch_id = 0;   // the current batch while leased or running, else 0
  std::string worker_id;  // the worker of the current (or last) batch, "" if never leased
  std::string reason;     // why it waits or failed; "" otherwise
  bool tokenised = false;
  TokenisedPrompt tokens;  // valid when tokenised
  int64_t kv_tokens = 0;   // valid when tokenised
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  int64_t first_leased_at_ms = 0;  // when it was first leased; 0: never
};

struct StateCounts {
  int64_t queued = 0, leased = 0, running = 0, succeeded = 0, failed = 0, cancelled = 0;
  int64_t total() const { return queued + leased + running + succeeded + failed + cancelled; }
  int64_t unfinished() const { return queued + leased + running; }
  int64_t& at(JobState state);
};

struct Submission {
  int64_t id = 0;
  int64_t created_at_ms = 0;
  bool sealed = true;  // an open submission takes more chunks and is not scheduled yet
  std::string idempotency_key;
  StateCounts counts;
  // All jobs finished (counts.unfinished() == 0) and sealed.
  bool done() const { return sealed && counts.unfinished() == 0; }
};

// The prompt tokens of a submission's succeeded jobs, from their outputs.
struct PromptTokenUsage {
  int64_t jobs = 0;                  // succeeded jobs counted
  int64_t prompt_tokens = 0;         // JobOutput::prompt_tokens summed
  int64_t cached_prompt_tokens = 0;  // JobOutput::cached_prompt_tokens summed
};

// A worker's report for one job: its output or why it failed.
struct JobResult {
  int64_t job_id = 0;
  int64_t batch_id = 0;
  std::string worker_id;
  bool ok = false;
  JobOutput output;   // when ok
  std::string error;  // when !ok
  int64_t created_at_ms = 0;
};

}  // namespace nightshift::scheduler
