// The OpenAI Batch input format (proto/batch_format.h reads it) as the
// JobRequests SubmitJobs takes. The whole file is checked before anything is
// sent: every bad line is reported with its 1-based line number and every
// reason, so a caller can refuse the file whole.
//
// Pure and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

#include "nightshift.pb.h"
#include "proto/batch_format.h"

namespace nightshift::cli {

using api::BatchInputOptions;
using api::FormatLineErrors;
using api::LineError;

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

// The scheduler's refusal of a chunk, "job K: reason; job M: reason" (K
// counted within the chunk whose jobs came from `lines`), as
// "\nline L: reason\nline N: reason". Text that names no job is kept.
std::string ServerErrorsByLine(const std::string& message, const std::vector<int64_t>& lines);

// The bad lines of one file as `submit` reports them: those the local parse
// refused and those the scheduler's CheckJobs found among the rest (unknown
// model, a prompt over the context), together. The scheduler lists at most
// its first problems of a chunk; the count covers every bad line.
class BadLineReport {
 public:
  // Lines the local parse refused (a line appears once per reason).
  void AddLocal(const std::vector<LineError>& errors);
  // The scheduler's check of a chunk whose jobs came from `lines` (job i
  // from line lines[i]).
  void AddChecked(const v1::CheckJobsResponse& response, const std::vector<int64_t>& lines);

  // Every bad line, listed or not.
  int64_t bad_lines() const { return static_cast<int64_t>(listed_lines_) + unlisted_; }
  bool empty() const { return bad_lines() == 0; }

  // "line 3: reason\n" for each reason of the first `max_lines` bad lines
  // in line order, then "... and 290 more bad lines (300 in all)\n" when
  // some are not shown.
  std::string Format(size_t max_lines) const;

 private:
  std::vector<LineError> listed_;
  size_t listed_lines_ = 0;  // distinct lines in listed_
  int64_t unlisted_ = 0;     // bad lines the scheduler counted but did not list
  void Recount();
};

}  // namespace nightshift::cli
