// Validation of a SubmitJobs request before anything is stored: every bad job
// is named by its index in the request with its reason, so a request is
// refused whole (like an OpenAI batch that fails validation) and nothing is
// half-submitted. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

struct SubmitLimits {
  int64_t max_jobs_per_request = 100'000;
  int64_t max_request_bytes = 64ll << 20;
  int32_t max_new_tokens = 1 << 20;
  int32_t default_max_new_tokens = 16;  // generation jobs that give 0 (OpenAI's default)
  int32_t max_labels = 64;
  int32_t max_stop = 4;
  int32_t max_top_logprobs = 20;
};

// The request as a whole: at least one job, at most max_jobs_per_request,
// at most max_request_bytes. InvalidArgument saying which otherwise.
Status CheckRequestSize(size_t jobs, int64_t request_bytes, const SubmitLimits& limits);

// Checks the request as a whole (CheckRequestSize) and every job:
// custom_id present and unique in the request, model named, a non-empty
// prompt that matches the url (chat messages for /v1/chat/completions, text
// or token ids for /v1/completions), max new tokens in range, sampling values
// in OpenAI's ranges, stop strings, labels (classification) not mixed with
// generation settings. Fills defaults (max new tokens) in `jobs`.
// Returns OK, or InvalidArgument naming the bad jobs (FormatJobProblems:
// "job 3: max_new_tokens -1 is out of range [1, 1048576]; job 7: duplicate
// custom_id 'a' (job 2)", the first ones and the count).
// `decode_problems`, when not empty, holds one entry per job: what was
// already wrong while decoding it from the wire (e.g. an unsupported url),
// "" for none; those are listed with the rest. `known_models`, when not
// null, is every model a worker has advertised: a job naming another one is
// bad ("model 'lama' is served by no worker ..."), so a typo is refused at
// once instead of waiting in the queue all night.
Status ValidateJobs(std::vector<JobSpec>& jobs, int64_t request_bytes, const SubmitLimits& limits,
                    const std::vector<std::string>& decode_problems = {},
                    const std::set<std::string>* known_models = nullptr);

// One problem of one job: its index in the list and the reason.
struct JobProblem {
  size_t index = 0;
  std::string reason;
};

// The per-job half of ValidateJobs (everything but the request's size), as
// a list in job order: empty when every job is fine. Fills the same defaults.
std::vector<JobProblem> FindJobProblems(std::vector<JobSpec>& jobs, const SubmitLimits& limits,
                                        const std::vector<std::string>& decode_problems = {},
                                        const std::set<std::string>* known_models = nullptr);

// How many problems a refusal's message names (FormatJobProblems), and at
// most how many bytes they take: a message rides in gRPC's trailing metadata,
// which the client caps at a few KiB, so the full list travels as data
// (CheckJobs) and the message carries only its head and the count.
inline constexpr size_t kMaxProblemsInMessage = 10;
inline constexpr size_t kMaxProblemsMessageBytes = 1500;

// "job 3: reason; job 7: reason": the first kMaxProblemsInMessage problems
// in the list's order, within kMaxProblemsMessageBytes (a longer reason is
// cut, "..." marking the cut), then, when some are left out, "; and 290 more
// problems (300 bad jobs in all)". Never longer than
// kMaxProblemsMessageBytes plus that tail.
std::string FormatJobProblems(const std::vector<JobProblem>& problems);

// How many distinct jobs `problems` names.
size_t CountBadJobs(const std::vector<JobProblem>& problems);

// The problem of a job naming `model` when only `known_models` are served:
// "" when it is one of them.
std::string UnknownModelProblem(const std::string& model,
                                const std::set<std::string>& known_models);

// The context check at tokenisation, the API's rule: prompt + max new tokens
// (or + label tokens) must fit `max_context_tokens` (0 = unknown: no check).
// InvalidArgument naming the figures otherwise; the prompt is never truncated.
Status CheckContext(const JobSpec& spec, const TokenisedPrompt& tokens, int64_t max_context_tokens);

}  // namespace nightshift::scheduler
