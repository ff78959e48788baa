// The OpenAI Batch output format (proto/batch_format.h writes it) for the
// jobs StreamResults sends: one line per finished job. Jobs that did not
// succeed are written to the same file, as vLLM's run_batch does (the HTTP
// Batch API splits them into an error file, as OpenAI does): a failed job
// gets status_code 500 and error {"code": "job_failed", "message": REASON}, a
// cancelled one status_code 409 and {"code": "job_cancelled", ...}; both with
// a null body.
//
// Pure and thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "nightshift.pb.h"

namespace nightshift::cli {

// True for a job in a final state (succeeded, failed, cancelled).
bool IsFinished(const v1::Job& job);

// The output line for a finished job (see proto/batch_format.h). A succeeded
// job without output (not asked for) gets a body with empty choices' text.
nlohmann::ordered_json BatchOutputLine(const v1::Job& job);

}  // namespace nightshift::cli
