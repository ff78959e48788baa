// Rendering a submission's progress for `nightshift watch`: a one-line bar
// redrawn in place on a terminal, or one plain line per event otherwise.
// Jobs done/total, each running batch's current pass and seconds per pass
// (once its worker's passes are measured, the figure the ETA rests on, marked
// "measured"), and the ETA as a duration and a clock time.
//
// Pure (the current time is an argument) and thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "nightshift.pb.h"

namespace nightshift::cli {

// "42s", "3m05s", "2h07m", "3d04h"; "?" for a negative or non-finite value.
std::string FormatDuration(double seconds);

// "HH:MM" of `epoch_ms` in UTC or the local time zone; prefixed with
// "YYYY-MM-DD " when it is not on the same day as `now_ms`.
std::string FormatClock(int64_t epoch_ms, int64_t now_ms, bool utc);

// Jobs in a final state (succeeded + failed + cancelled).
int64_t FinishedJobs(const v1::JobCounts& counts);

// The terminal line, at most `width` columns (bytes; the text is ASCII):
//   "[#######.......]  12/40 done  1 failed  ETA 5m20s (14:05)  w1: pass 7 2.10s/pass"
std::string RenderProgressBar(const v1::Submission& submission, int width, int64_t now_ms,
                              bool utc);

// The plain line (no width limit, no control characters):
//   "submission 3: 12/40 done (11 succeeded, 1 failed, 0 cancelled), 2 running,
//    26 queued; ETA 5m20s (14:05); batch 4 on w1: pass 7, 2.10 s/pass"
std::string RenderProgressLine(const v1::Submission& submission, int64_t now_ms, bool utc);

// "272,900": the count with a comma between groups of three digits.
std::string FormatCount(int64_t n);

// The prefix savings of a submission's succeeded jobs (`nightshift status`):
//   "prompt tokens: 272,900, 262,000 of them computed once for several jobs (96%)"
// "prompt tokens: none yet (no job has succeeded)" before any job succeeded.
// The percentage is rounded down (100% only when every prompt token was).
std::string RenderPromptTokens(const v1::PromptTokenUsage& usage);

// The final summary: "submission 3 done: 39 succeeded, 1 failed, 0 cancelled".
std::string RenderOutcome(const v1::Submission& submission);

// The exit code a finished submission stands for: 0 when every job
// succeeded, 1 otherwise (some failed or were cancelled).
int OutcomeExitCode(const v1::Submission& submission);

}  // namespace nightshift::cli
