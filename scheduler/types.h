// The scheduler's domain vocabulary: plain structs shared by the store, the
// policy, the ETA and the service. No gRPC, protobuf or SQLite types appear
// here; the service converts wire messages to and from these.
//
// Job states are one enum with one transition function (Transition below),
// mirrored in migrations/0001_initial.sql by a CHECK constraint on the state
// names and a trigger that refuses any other change of state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

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

// ---------------------------------------------------------------- job specs

// The OpenAI endpoint a job imitates; results are shaped after it.
enum class Endpoint { kCompletions, kChatCompletions };
const char* EndpointUrl(Endpoint endpoint);  // "/v1/completions", "/v1/chat/completions"
// InvalidArgument naming the url for anything else.
StatusOr<Endpoint> ParseEndpointUrl(std::string_view url);

enum class PromptKind { kText, kChat, kTokenIds };

struct ChatMessage {
  std::string role;
  std::string content;
};

struct Sampling {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;
  int32_t top_k = 0;  // 0 = off
  bool has_seed = false;
  uint64_t seed = 0;
};

// What a client asks for: one line of an OpenAI Batch file, decoded.
struct JobSpec {
  std::string custom_id;  // unique within its submission
  std::string model;      // a checkpoint directory name under a worker's model root
  Endpoint endpoint = Endpoint::kCompletions;
  PromptKind prompt_kind = PromptKind::kText;
  std::string prompt_text;                // kText
  std::vector<ChatMessage> messages;      // kChat
  std::vector<int32_t> prompt_token_ids;  // kTokenIds
  int32_t max_new_tokens = 16;            // generation; ignored for classification
  Sampling sampling;
  std::vector<std::string> stop;
  std::vector<std::string> labels;  // non-empty: classification (score each label)
  bool logprobs = false;
  int32_t top_logprobs = 0;
  int32_t priority = 0;  // higher runs first
};

// A job's prompt as token ids, exact for the model that runs it.
struct TokenisedPrompt {
  std::vector<int32_t> prompt;
  std::vector<std::vector<int32_t>> labels;  // one id list per JobSpec::labels entry
};

// Tokens a job occupies in the KV cache: prompt + max new tokens for
// generation, prompt + every label's tokens for classification (all labels
// ride in the one sequence).
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
  int64_t kv_tokens = 0;
  int64_t passes = 0;
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

struct LabelScore {
  std::string label;
  double logprob = 0;
};

struct TopLogprob {
  int32_t token = 0;
  std::string text;
  double logprob = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  double logprob = 0;
  std::vector<TopLogprob> top;
};

// What a worker produced for one job.
struct JobOutput {
  std::string text;
  std::vector<int32_t> token_ids;
  std::string finish_reason;  // "stop", "length" (generation); "label" (classification)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::vector<TokenLogprob> logprobs;  // when asked
  std::vector<LabelScore> labels;      // classification, in JobSpec::labels order
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

// ---------------------------------------------------------------- workers

// A model a worker serves, with the planner's exact figures for that worker.
struct ModelOffer {
  std::string name;
  int64_t kv_bytes_per_token = 0;  // planner's exact KV bytes per token on this worker
  int64_t checkpoint_bytes = 0;    // bytes one pass reads
  double seconds_per_pass = 0;     // planner's estimate; 0 = unknown
  int64_t max_context_tokens = 0;  // 0 = unknown
  std::string tokenizer_hash;      // "" = no tokenizer sent
};

// A model's tokenizer files as a worker sends them, cached by content hash.
struct TokenizerFiles {
  std::map<std::string, std::string> files;  // file name -> content (tokenizer.json, ...)
  std::vector<int32_t> eos_ids;
};
// Stable content hash (hex) of the files and EOS ids.
std::string TokenizerHash(const TokenizerFiles& tokenizer);

struct WorkerInfo {
  std::string id;
  std::string device;  // "cpu", "cuda:0", ...
  int64_t memory_budget_bytes = 0;
  int64_t kv_budget_bytes = 0;
  double read_bytes_per_second = 0;  // parallel cold reads, as disk-bench reports
  int32_t max_batch_jobs = 0;        // 0 = no limit beyond the KV budget
  std::vector<ModelOffer> models;
  std::string open_model;  // the checkpoint it has open, "" if none
  // Filled by the store:
  int64_t session = 0;  // fencing epoch, +1 on each attach
  bool connected = false;
  int64_t last_seen_at_ms = 0;
};

const ModelOffer* FindModel(const WorkerInfo& worker, std::string_view model);

// One pass of one batch, as a worker reports it.
struct PassProgress {
  int64_t batch_id = 0;
  int64_t pass_index = 0;  // 0-based within the batch
  double seconds = 0;
  int64_t bytes_read = 0;
  double io_wait_seconds = 0;
  int32_t sequences = 0;
  int64_t tokens = 0;                    // tokens computed in this pass
  std::string mode;                      // "streaming" / "resident"
  std::map<int64_t, int64_t> generated;  // job id -> tokens generated so far
  int64_t free_kv_bytes = 0;             // KV the worker could give to more jobs of this model
  bool want_top_up = false;
};

}  // namespace nightshift::scheduler
