// The OpenAI Batch output format: one JSON object per finished job,
//
//   {"id": "batch_req_7", "custom_id": "a",
//    "response": {"status_code": 200, "request_id": "req_7", "body": {...}},
//    "error": null}
//
// with a body shaped like OpenAI's reply to the job's url: a
// "text_completion" (choices[].text) or a "chat.completion"
// (choices[].message.content), finish_reason, usage, and logprobs when the
// job asked for them (legacy completions form, or chat's content list).
// A classification job's body adds "labels": [{label, logprob, prob}] in the
// request's label order, prob being exp(logprob) normalised over the labels,
// and the best label is the text / message content.
//
// Jobs that did not succeed are written to the same file, as vLLM's
// run_batch does: a failed job gets status_code 500 and error
// {"code": "job_failed", "message": REASON}, a cancelled one status_code 409
// and {"code": "job_cancelled", ...}; both with a null body.
//
// Pure and thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "nightshift.pb.h"

namespace nightshift::cli {

// True for a job in a final state (succeeded, failed, cancelled).
bool IsFinished(const v1::Job& job);

// The output line for a finished job (see above). A succeeded job without
// output (not asked for) gets a body with empty choices' text.
nlohmann::ordered_json BatchOutputLine(const v1::Job& job);

}  // namespace nightshift::cli
