// The OpenAI Batch file format, read and written in one place: the CLI's
// `submit` and `results` and the scheduler's HTTP Batch API use these.
//
// Input: one JSON object per line,
//
//   {"custom_id": "a", "method": "POST", "url": "/v1/completions",
//    "body": {"model": "m", "prompt": "Hello", "max_tokens": 8}}
//
// turned into JobSpecs. Every bad line is reported with its 1-based line
// number and every reason, so a caller can refuse a file whole. Accepted body
// fields: model, prompt (string or a list of token ids; /v1/completions),
// messages ([{role, content}]; /v1/chat/completions), max_tokens
// (max_completion_tokens for chat), temperature, top_p, top_k, seed, stop
// (string or list), logprobs (completions: an integer 0..20 = top_logprobs,
// or a boolean; chat: a boolean), top_logprobs, n (only 1), stream (only
// false), and our extension `labels` (a list of strings: a classification job
// that scores each label). Other body fields are ignored, or refused when
// `strict` is set. Blank lines are skipped.
//
// Output: one JSON object per finished job,
//
//   {"id": "batch_req_7", "custom_id": "a",
//    "response": {"status_code": 200, "request_id": "req_7", "body": {...}},
//    "error": null}
//
// with a body shaped like OpenAI's reply to the job's url: a
// "text_completion" (choices[].text) or a "chat.completion"
// (choices[].message.content), finish_reason, usage, and logprobs when the
// job asked for them (legacy completions form, or chat's content list). A
// classification job's body adds "labels": [{label, logprob, prob}] in the
// request's label order, prob being exp(logprob) normalised over the labels,
// and the best label is the text / message content. A failed job gets
// status_code 500 and error {"code": "job_failed", "message": REASON}, a
// cancelled one status_code 409 and {"code": "job_cancelled", ...}, both with
// a null body; a job its batch's completion window left unrun gets a null
// response and {"code": "batch_expired", ...}, as OpenAI writes it.
//
// Pure and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/types.h"

namespace nightshift::api {

// ---------------------------------------------------------------- input

struct BatchInputOptions {
  std::string model_override;  // "" = each line's body.model
  int32_t priority = 0;        // given to every job
  bool strict = false;         // unknown fields are errors
};

struct LineError {
  int64_t line = 0;  // 1-based
  std::string reason;
};

// Checks one line's text; appends its problems (numbered `line`) to `errors`
// and returns true with `spec` filled when there were none. A spec that
// leaves max_tokens out has max_new_tokens 0 (the scheduler's default
// applies); sampling fields left out keep Sampling's defaults (the API's).
bool ParseBatchLine(const std::string& text, int64_t line, const BatchInputOptions& options,
                    JobSpec* spec, std::vector<LineError>* errors);

// Takes each good line's job and its line number, in file order; returns
// false to stop reading.
using JobSpecSink = std::function<bool(JobSpec spec, int64_t line)>;

struct BatchInputSummary {
  int64_t job_count = 0;          // good lines (those the sink took, until it said stop)
  int64_t lines = 0;              // lines read, blank ones included
  std::vector<LineError> errors;  // in line order; a line may appear more than once
};

// Parses every line of `in`, handing each good one to `sink`. Never fails as
// a whole: problems are in `errors` (one entry per reason), a custom_id used
// twice among them ("duplicate custom_id 'a' (first on line 2)"). Only the
// custom ids are kept (for the duplicate check), so a file of any size can be
// checked in a stream. `sink` may be null (check only).
BatchInputSummary ParseBatchInput(std::istream& in, const BatchInputOptions& options,
                                  const JobSpecSink& sink);

// "line 3: reason" lines, one per error, each ending in a newline.
std::string FormatLineErrors(const std::vector<LineError>& errors);

// ---------------------------------------------------------------- output

// How a finished job ended, as its output line shows it.
enum class LineOutcome {
  kSucceeded,
  kFailed,
  kCancelled,
  kExpired,  // its batch's completion window passed before it ran
};

// What one output line is made of.
struct ResultLine {
  int64_t job_id = 0;
  std::string custom_id;
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  int64_t finished_at_ms = 0;  // the body's `created`
  LineOutcome outcome = LineOutcome::kSucceeded;
  JobOutput output;   // kSucceeded
  std::string error;  // otherwise: why
};

// The output line for a finished job (see above). A succeeded job without
// output gets a body with empty choices' text.
nlohmann::ordered_json BatchOutputLine(const ResultLine& result);

}  // namespace nightshift::api
