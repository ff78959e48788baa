// The OpenAI Batch input format: one JSON object per line,
//
//   {"custom_id": "a", "method": "POST", "url": "/v1/completions",
//    "body": {"model": "m", "prompt": "Hello", "max_tokens": 8}}
//
// turned into the JobRequests SubmitJobs takes. The whole file is checked
// before anything is sent: every bad line is reported with its 1-based line
// number and every reason, so a caller can refuse the file whole.
//
// Accepted body fields: model, prompt (string or a list of token ids;
// /v1/completions), messages ([{role, content}]; /v1/chat/completions),
// max_tokens (max_completion_tokens for chat), temperature, top_p, top_k,
// seed, stop (string or list), logprobs (completions: an integer 0..20 =
// top_logprobs, or a boolean; chat: a boolean), top_logprobs, n (only 1),
// stream (only false), and our extension `labels` (a list of strings: a
// classification job that scores each label). Other body fields are ignored,
// or refused when `strict` is set. Blank lines are skipped.
//
// Pure and thread-safe.
#pragma once

#include <functional>
#include <istream>
#include <string>
#include <vector>

#include "nightshift.pb.h"

namespace nightshift::cli {

struct BatchInputOptions {
  std::string model_override;  // "" = each line's body.model
  int32_t priority = 0;        // given to every job
  bool strict = false;         // unknown fields are errors
};

struct LineError {
  int64_t line = 0;  // 1-based
  std::string reason;
};

struct BatchInput {
  std::vector<v1::JobRequest> jobs;  // in file order (without a sink); complete only when
                                     // errors is empty
  std::vector<int64_t> lines;        // jobs[i] came from line lines[i]
  int64_t job_count = 0;             // good lines, with or without a sink
  std::vector<LineError> errors;     // in line order; a line may appear more than once
};

// Takes each good line's job and its line number, in file order; returns
// false to stop reading.
using JobSink = std::function<bool(v1::JobRequest job, int64_t line)>;

// Parses every line of `in`. Never fails as a whole: problems are in
// `errors` (one entry per reason). Without a sink, jobs and lines hold the
// lines that parsed; with one, each good job goes to the sink instead and
// only the custom ids are kept (for the duplicate check), so a large file
// can be checked, then sent in chunks, without holding it in memory.
BatchInput ParseBatchInput(std::istream& in, const BatchInputOptions& options,
                           const JobSink& sink = nullptr);

// Checks one line's text; appends its problems (numbered `line`) to `errors`
// and returns true with `job` filled when there were none.
bool ParseBatchLine(const std::string& text, int64_t line, const BatchInputOptions& options,
                    v1::JobRequest* job, std::vector<LineError>* errors);

// "line 3: reason" lines, one per error, each ending in a newline.
std::string FormatLineErrors(const std::vector<LineError>& errors);

// The scheduler's refusal of a chunk, "job K: reason; job M: reason" (K
// counted within the chunk whose jobs came from `lines`), as
// "\nline L: reason\nline N: reason". Text that names no job is kept.
std::string ServerErrorsByLine(const std::string& message, const std::vector<int64_t>& lines);

}  // namespace nightshift::cli
