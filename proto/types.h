// The contract's C++ face: the plain types the scheduler, the worker and the
// CLI exchange, one definition each. proto/nightshift.proto is the wire form
// of the same things; proto/wire.h converts between the two, once.
//
// No gRPC, protobuf or SQLite types appear here, so the scheduler's domain
// libraries (store, policy) and their sanitizer build use these without gRPC.
// What is one side's own stays on that side: job states, batches and the
// store in scheduler/, leases as the worker runs them in worker/daemon/.
//
// Plain values: copy freely; no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nightshift::api {

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

// How the next token is picked. The defaults are the API's (OpenAI's): what
// a request that leaves a field out gets.
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

// ---------------------------------------------------------------- results

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
  // Of prompt_tokens, those not computed for this job alone: computed once
  // with other jobs of its pass that begin alike, or kept from an earlier
  // pass (OpenAI's usage.prompt_tokens_details.cached_tokens).
  int64_t cached_prompt_tokens = 0;
  std::vector<TokenLogprob> logprobs;  // when asked
  std::vector<LabelScore> labels;      // classification, in JobSpec::labels order
};

// ---------------------------------------------------------------- workers

// A model a worker serves, with that worker's figures for it. Each figure is
// computed by the planner's model facts (planner/model_facts.h) on the worker.
struct ModelOffer {
  std::string name;
  int64_t kv_bytes_per_token = 0;  // KV bytes one position costs on this worker
  int64_t checkpoint_bytes = 0;    // bytes one pass reads
  double seconds_per_pass = 0;     // streamed bytes / measured read bandwidth; 0 = unknown
  int64_t max_context_tokens = 0;  // 0 = unknown
  std::string tokenizer_hash;      // "" = no tokenizer sent
  // Tokens one pass may feed (prompts and labels of joining jobs, one per
  // decoding job); 0 = no limit.
  int64_t pass_token_budget = 0;
  // Why the worker cannot read the checkpoint now (a disk error mid-pass);
  // "" = healthy. The scheduler sends an unhealthy model no batches there.
  std::string unhealthy;
};

// A model's tokenizer files as a worker sends them, cached by content hash.
struct TokenizerFiles {
  std::map<std::string, std::string> files;  // file name -> content (tokenizer.json, ...)
  std::vector<int32_t> eos_ids;
};
// Stable content hash (hex SHA-256) of the files and EOS ids.
std::string TokenizerHash(const TokenizerFiles& tokenizer);

// A worker as it introduces itself, and as the scheduler keeps it.
struct WorkerInfo {
  std::string id;
  std::string device;  // "cpu", "cuda:0", ...
  int64_t memory_budget_bytes = 0;
  int64_t kv_budget_bytes = 0;
  double read_bytes_per_second = 0;  // parallel cold reads, as disk-bench reports
  int32_t max_batch_jobs = 0;        // 0 = no limit beyond the KV budget
  std::vector<ModelOffer> models;
  std::string open_model;  // the checkpoint it has open, "" if none
  // The cgroup memory limit the memory budget was cut to; 0 = none applied.
  // Live only (the store does not keep it).
  int64_t cgroup_memory_limit_bytes = 0;
  // Kept by the scheduler's store; a worker leaves them unset:
  int64_t session = 0;  // fencing epoch, +1 on each attach
  bool connected = false;
  int64_t last_seen_at_ms = 0;
};

// What a worker says when it attaches.
struct WorkerHello {
  WorkerInfo info;                       // models carry their tokenizer hashes
  std::vector<int64_t> running_batches;  // batches it still runs (after a reconnect)
  std::string version;                   // the worker's release
};

// The offer of `model` in `worker`, or nullptr.
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
  int64_t free_pass_tokens = 0;  // of the pass-token budget, left for joining jobs (0: no budget)
  // Mixtures of experts, over the pass's sparse layers (0 for a dense model).
  int64_t experts_total = 0;
  int64_t experts_read = 0;
  // The prompt prefixes its next pass starts joining jobs after (the
  // engine's kept prefixes).
  std::vector<std::vector<int32_t>> kept_prefixes;
};

}  // namespace nightshift::api
