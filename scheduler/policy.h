// The dispatch policy: Schedule(snapshot) -> plan. Pure: no I/O, no clock,
// no store; the scheduler builds the snapshot, the policy decides, the
// scheduler applies the plan. Thread-safe (no shared state).
//
// Rules, in order:
//   - Queued jobs are taken by priority (higher first), then oldest
//     submission, then submission order (dispatch order), except that jobs
//     whose prompts share a prefix ride together: right after a job, the
//     queued jobs of its model and priority whose prompt ids share at least
//     min_shared_prefix_tokens with its own come next, the longest shared
//     prefix first (then in dispatch order). So the oldest job still opens
//     every group, and a job with no such companions keeps its place.
//   - A job is priced in KV bytes on each worker: the worker's exact KV bytes
//     per token for its model x the positions the job holds across passes
//     (QueuedJob::reserved_kv_tokens: prompt + max new tokens - 1; 0 for a
//     job that ends in its first pass, a classification or a generation of
//     at most one token), and in pass tokens: what it feeds in its first pass
//     (QueuedJob::pass_tokens, prompt and labels), against the model's
//     pass-token budget on that worker. A job joining an assignment feeds
//     less: the engine computes a prefix that sequences in their first pass
//     share once (worker/engine/pass_trie.h), so the longest prefix of its
//     prompt ids that it shares with a job this plan already put in the same
//     assignment is not counted again, when it is at least
//     min_shared_prefix_tokens long. The engine shares every common prefix
//     (also shorter ones, labels, and jobs of the running batch not yet run),
//     so it never computes more than this. KV likewise: a job that holds KV
//     joining an assignment is charged its positions less the longest prompt
//     prefix (min_shared_prefix_tokens or more) it shares with a job this
//     plan put there that holds KV too, since the engine keeps the positions
//     going-on sequences of one first pass share once (KVCache::Share); the
//     sum is never less than what the engine holds.
//   - A job joins a batch already chosen for its model (a top-up of a running
//     batch at a pass boundary, or a new batch opened earlier in this plan)
//     while that worker's KV budget left, the next pass's tokens left and the
//     job limit allow; otherwise it opens a new batch on an idle connected
//     worker serving its model (a new batch takes its first job whatever its
//     tokens), preferring one that has the model open, then the most tokens
//     of KV budget, then the worker id. So a queue of classifications tops a
//     running batch up at every pass with as many as a pass's tokens allow.
//   - A job that no known worker serving its model could ever hold (its KV
//     need exceeds every such worker's whole budget) is rejected with that
//     reason instead of waiting forever. A job whose model no known worker
//     serves waits (the scheduler says why).
// Budgets are local variables spent down while the plan is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/types.h"

namespace nightshift::scheduler {

// A worker as the policy sees it.
struct WorkerSlot {
  WorkerInfo info;               // budgets, models with KV bytes per token, connected
  int64_t batch_id = 0;          // its active batch; 0 = idle
  std::string batch_model;       // the active batch's model
  int32_t batch_jobs = 0;        // jobs in the active batch now
  bool wants_top_up = false;     // said so at its last pass boundary
  int64_t free_kv_bytes = 0;     // KV it reported free at that boundary
  int64_t free_pass_tokens = 0;  // and of the pass-token budget
  // The prompt prefixes its next pass starts joining jobs after (the
  // engine's kept prefixes, planner::kMinKeptPrefixTokens or more).
  std::vector<std::vector<int32_t>> kept_prefixes;
};

// Grouping jobs by a shared prefix reorders the queue (among jobs of one
// model and priority) for the tokens it saves; a shorter shared prefix is
// not worth it. 32 tokens sits above what a chat template alone makes every
// chat prompt of a model share, measured with the Qwen3 tokenizer of
// tests/data/tokenizers: Qwen2.5's default system turn and the user turn's
// opening, 24 tokens; "You are a helpful assistant." so framed, 14; a bare
// user turn, 3. So jobs group by shared instructions and few-shot examples
// (hundreds of tokens), not by their template. The scheduler's
// --min-shared-prefix-tokens.
inline constexpr int64_t kDefaultMinSharedPrefixTokens = 32;

struct Snapshot {
  std::vector<QueuedJob> queue;  // tokenised queued jobs, any order
  std::vector<WorkerSlot> workers;
  // The shortest shared prefix of prompt ids that groups jobs and is counted
  // once against the pass-token budget (at least 1 token).
  int64_t min_shared_prefix_tokens = kDefaultMinSharedPrefixTokens;
};

struct Assignment {
  std::string worker_id;
  std::string model;
  int64_t batch_id = 0;          // the active batch topped up, or 0 for a new batch
  std::vector<int64_t> job_ids;  // in the order taken (dispatch order, groups together)
  int64_t kv_bytes = 0;          // what these jobs take of the worker's KV budget
  int64_t pass_tokens = 0;       // and of the next pass's tokens (shared prefixes once)
  // What each job adds to pass_tokens, in job_ids order: its pass_tokens()
  // less the prefix it shares with a job before it in this assignment.
  std::vector<int64_t> job_pass_tokens;
  // What each job adds to kv_bytes, in KV positions (x the worker's KV bytes
  // per token): its reserved_kv_tokens() less the prompt prefix it shares
  // with a job before it in this assignment that holds KV too.
  std::vector<int64_t> job_kv_tokens;
};

struct Rejection {
  int64_t job_id = 0;
  std::string reason;
};

struct Plan {
  std::vector<Assignment> assignments;
  std::vector<Rejection> rejections;
};

Plan Schedule(const Snapshot& snapshot);

// Whether `worker` could take a job now: connected, and idle, or asking for a
// top-up with room left (KV or pass tokens, under its job limit). The
// scheduler reads no queue when no worker could.
bool TakesJobs(const WorkerSlot& worker);

// KV bytes `job` takes on a worker offering `model`.
int64_t KvBytes(const QueuedJob& job, const ModelOffer& model);

// Tokens `a` and `b` begin with alike.
int64_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// The part of `prompt` a worker's next pass starts it after: its longest
// agreement with one of the prefixes the worker keeps (WorkerSlot::
// kept_prefixes), planner::kMinKeptPrefixTokens or more and short of the
// whole prompt, as the engine uses one; else 0.
int64_t KeptAgreement(const std::vector<std::vector<int32_t>>& kept_prefixes,
                      const std::vector<int32_t>& prompt);

}  // namespace nightshift::scheduler
