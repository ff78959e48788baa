// `nightshift submit FILE.jsonl`: sends an OpenAI Batch input file to the
// scheduler as one submission and prints its id.
//
// The whole file is checked first; a file with any bad line is refused with
// its bad lines named ("line 3: temperature 3 is out of range [0, 2]", the
// first 50 and the count), those the scheduler would refuse (CheckJobs: an
// unknown model, a prompt over the context) together with those the local
// parse found, and nothing is submitted. Large files go in chunks of one open submission that
// the last chunk seals; if the scheduler refuses a chunk, the submission is
// cancelled, so nothing of the file runs.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/client/batch_input.h"
#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/command.h"
#include "proto/grpc_status.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "submit";
constexpr size_t kMaxChunkBytes = 32 << 20;  // under the scheduler's 64 MiB request limit
// A refusal names this many bad lines (every reason of each) and counts the rest.
constexpr size_t kMaxBadLinesShown = 50;

struct SubmitFlags {
  ConnectionFlags connection;
  std::string model;
  int64_t priority = 0;
  int64_t chunk_jobs = 5000;
  bool strict = false;
  bool json = false;
};

// Sends jobs in chunks of one submission: the last chunk (by the count of
// the checking pass) seals it. When a call fails, the open submission is
// cancelled, so nothing of the file runs, and every later Add is refused;
// refusal() says why.
class ChunkSender {
 public:
  ChunkSender(const Client& client, int64_t total_jobs, int64_t chunk_jobs)
      : client_(client), total_jobs_(total_jobs), chunk_jobs_(chunk_jobs) {}

  // Queues a job; sends the chunk when it is full. False once a call failed.
  bool Add(v1::JobRequest job, int64_t line) {
    if (failed_) return false;
    if (request_.jobs_size() > 0 &&
        (request_.jobs_size() >= chunk_jobs_ || bytes_ + job.ByteSizeLong() > kMaxChunkBytes)) {
      if (!Send()) return false;
    }
    bytes_ += job.ByteSizeLong();
    *request_.add_jobs() = std::move(job);
    lines_.push_back(line);
    return true;
  }

  // Sends the last chunk. False when a call failed (now or before).
  bool Finish(v1::SubmitJobsResponse* response) {
    if (failed_ || (request_.jobs_size() > 0 && !Send())) return false;
    *response = response_;
    return true;
  }

  // Cancels the submission when chunks of it were sent, so none of it runs.
  void Abort() {
    failed_ = true;
    if (open_submission_ == 0) return;
    v1::CancelSubmissionRequest request;
    request.set_submission_id(open_submission_);
    v1::Submission ignored;
    cancel_ = client_.stub->CancelSubmission(client_.Context().get(), request, &ignored);
  }

  bool failed() const { return failed_; }
  // The scheduler's answer to the call that failed, and the lines of that
  // call's jobs.
  const grpc::Status& refusal() const { return refusal_; }
  const std::vector<int64_t>& refused_lines() const { return lines_; }
  // "" or what became of the chunks sent before the failure when they could
  // not be cancelled.
  std::string CancelProblem() const {
    if (open_submission_ == 0 || cancel_.ok()) return "";
    return "(its first chunks, open submission " + std::to_string(open_submission_) +
           ", could not be cancelled: " + cancel_.error_message() +
           "; it was never sealed, so none of it runs)";
  }

 private:
  bool Send() {
    sent_ += request_.jobs_size();
    request_.set_submission_id(open_submission_);
    request_.set_keep_open(sent_ < total_jobs_);
    const grpc::Status status =
        client_.stub->SubmitJobs(client_.Context(120).get(), request_, &response_);
    if (!status.ok()) {
      refusal_ = status;
      Abort();
      return false;
    }
    open_submission_ = response_.submission_id();
    request_.clear_jobs();
    lines_.clear();
    bytes_ = 0;
    return true;
  }

  const Client& client_;
  const int64_t total_jobs_;
  const int64_t chunk_jobs_;
  v1::SubmitJobsRequest request_;
  std::vector<int64_t> lines_;  // the line of each job in request_
  size_t bytes_ = 0;
  int64_t sent_ = 0;
  v1::SubmitJobsResponse response_;
  int64_t open_submission_ = 0;  // after a chunk was accepted
  bool failed_ = false;
  grpc::Status refusal_;
  grpc::Status cancel_;
};

// Sends the good lines of `in` (read from its start) to the scheduler's
// CheckJobs in chunks, storing nothing, and adds what it finds to `report`:
// the lines the local parse passed but the scheduler would refuse (a model no
// worker serves, a prompt over the context). The failed call's status, if one
// fails (e.g. an older scheduler without CheckJobs).
Status CheckWithScheduler(const Client& client, std::istream& in, const BatchInputOptions& options,
                          int64_t chunk_jobs, BadLineReport* report) {
  in.clear();
  in.seekg(0);
  v1::SubmitJobsRequest request;
  std::vector<int64_t> lines;
  size_t bytes = 0;
  Status failed;
  const auto flush = [&]() -> bool {
    if (request.jobs_size() == 0) return true;
    v1::CheckJobsResponse response;
    const grpc::Status status =
        client.stub->CheckJobs(client.Context(120).get(), request, &response);
    if (!status.ok()) {
      failed = api::FromGrpcStatus(status);
      return false;
    }
    report->AddChecked(response, lines);
    request.clear_jobs();
    lines.clear();
    bytes = 0;
    return true;
  };
  ParseBatchInput(in, options, [&](v1::JobRequest job, int64_t line) {
    if (request.jobs_size() >= chunk_jobs || bytes + job.ByteSizeLong() > kMaxChunkBytes) {
      if (!flush()) return false;
    }
    bytes += job.ByteSizeLong();
    *request.add_jobs() = std::move(job);
    lines.push_back(line);
    return true;
  });
  if (failed.ok()) flush();
  return failed;
}

// Prints every bad line found (the first kMaxBadLinesShown and the count)
// and returns kExitFailure.
int RefuseBadLines(const std::string& path, const BadLineReport& report, const Status& unchecked,
                   const std::string& note = "") {
  std::cerr << "nightshift submit: " << path << ": " << report.bad_lines() << " bad line"
            << (report.bad_lines() == 1 ? "" : "s") << "; nothing was submitted:\n"
            << report.Format(kMaxBadLinesShown);
  if (!unchecked.ok()) {
    std::cerr << "(the scheduler did not check the other lines: " << unchecked.message() << ")\n";
  }
  if (!note.empty()) std::cerr << note << "\n";
  return kExitFailure;
}

int RunSubmit(int argc, char** argv) {
  SubmitFlags f;
  CommandLine flags(
      "nightshift submit FILE.jsonl [--model NAME] [--priority N] [--strict] [--json]",
      std::string("Submits an OpenAI Batch input file (\"-\" reads standard input) as one "
                  "submission and prints its id. Lines: {custom_id, method: POST, url: "
                  "/v1/completions | /v1/chat/completions, body: {model, prompt | "
                  "messages, max_tokens, temperature, top_p, top_k, seed, stop, logprobs, "
                  "top_logprobs, labels}}. A file with any bad line is refused whole, "
                  "every bad line listed by number; nothing is submitted.\n") +
          kConnectionHelp);
  AddConnectionFlags(flags, &f.connection);
  flags.String("model", &f.model, "use this model for every line (overrides body.model)", "NAME");
  flags.Int("priority", &f.priority, "priority of every job; higher runs first (default 0)");
  flags.Bool("strict", &f.strict, "refuse unknown fields instead of ignoring them");
  flags.Int("chunk-jobs", &f.chunk_jobs, "jobs per SubmitJobs call (default 5000)");
  flags.Bool("json", &f.json, "print {submission_id, jobs, waiting_for_tokenizer} as JSON");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  auto path = OnePositional(flags.positional(), "FILE.jsonl");
  if (!path.ok()) return Fail(kName, path.status());
  if (f.priority < INT32_MIN || f.priority > INT32_MAX || f.chunk_jobs < 1) {
    return Fail(kName, InvalidArgument("--priority or --chunk-jobs is out of range"));
  }

  // Two passes over the file: check every line, then send. Standard input
  // is read once into memory.
  std::ifstream file;
  std::istringstream piped;
  if (*path == "-") {
    piped.str(std::string(std::istreambuf_iterator<char>(std::cin), {}));
  } else {
    file.open(*path, std::ios::binary);
    if (!file) return Fail(kName, NotFound(*path + ": cannot open"));
  }
  std::istream& in = *path == "-" ? static_cast<std::istream&>(piped) : file;
  const BatchInputOptions options{f.model, static_cast<int32_t>(f.priority), f.strict};
  const BatchInput checked =
      ParseBatchInput(in, options, [](v1::JobRequest, int64_t) { return true; });
  if (!checked.errors.empty()) {
    // Ask the scheduler about the other lines too, so one refusal names
    // every kind of bad line (an unknown model, a prompt over the context).
    BadLineReport report;
    report.AddLocal(checked.errors);
    auto client = Dial(flags, f.connection);
    Status unchecked = client.status();
    if (client.ok()) unchecked = CheckWithScheduler(*client, in, options, f.chunk_jobs, &report);
    return RefuseBadLines(*path, report, unchecked);
  }
  if (checked.job_count == 0) return Fail(kName, InvalidArgument(*path + ": no jobs in the file"));

  auto client = Dial(flags, f.connection);
  if (!client.ok()) return Fail(kName, client.status());
  in.clear();
  in.seekg(0);
  ChunkSender sender(*client, checked.job_count, f.chunk_jobs);
  const BatchInput sent = ParseBatchInput(in, options, [&sender](v1::JobRequest job, int64_t line) {
    return sender.Add(std::move(job), line);
  });
  // Reading stops early when the scheduler refused a chunk: that is no change of the file.
  if (!sender.failed() && (!sent.errors.empty() || sent.job_count != checked.job_count)) {
    sender.Abort();
    return Fail(kName, FailedPrecondition(
                           *path + " changed while it was being submitted; nothing was submitted"));
  }
  v1::SubmitJobsResponse response;
  if (!sender.Finish(&response)) {
    const grpc::Status& refusal = sender.refusal();
    if (refusal.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // Its message names only the first bad jobs of one chunk: ask for them all.
      BadLineReport report;
      const Status unchecked = CheckWithScheduler(*client, in, options, f.chunk_jobs, &report);
      if (!report.empty()) return RefuseBadLines(*path, report, unchecked, sender.CancelProblem());
      const std::string reasons =
          ServerErrorsByLine(refusal.error_message(), sender.refused_lines());
      std::cerr << "nightshift submit: the scheduler refused the file; nothing was submitted:"
                << (reasons.rfind('\n', 0) == 0 ? "" : " ") << reasons << "\n";
    } else {
      // The disk is full, the scheduler is gone, ...: the reason as it came.
      std::cerr << "nightshift submit: " << *path
                << ": nothing was submitted: " << refusal.error_message() << "\n";
    }
    const std::string cancel = sender.CancelProblem();
    if (!cancel.empty()) std::cerr << cancel << "\n";
    return kExitFailure;
  }
  if (f.json) {
    std::cout << nlohmann::json{{"submission_id", response.submission_id()},
                                {"jobs", checked.job_count},
                                {"waiting_for_tokenizer", response.waiting_for_tokenizer()}}
                     .dump()
              << "\n";
  } else {
    std::cout << response.submission_id() << "\n";
    std::cerr << "submitted " << checked.job_count << " jobs as submission "
              << response.submission_id() << "\n";
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("submit", "send an OpenAI Batch JSONL file to the scheduler", RunSubmit);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
