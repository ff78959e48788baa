// `nightshift submit FILE.jsonl`: sends an OpenAI Batch input file to the
// scheduler as one submission and prints its id.
//
// The whole file is checked first; a file with any bad line is refused with
// every bad line listed ("line 3: temperature 3 is out of range [0, 2]") and
// nothing is submitted. Large files go in chunks of one open submission that
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

namespace nightshift::cli {
namespace {

constexpr const char* kName = "submit";
constexpr size_t kMaxChunkBytes = 32 << 20;  // under the scheduler's 64 MiB request limit

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
// cancelled, so nothing of the file runs, and every later Add is refused.
class ChunkSender {
 public:
  ChunkSender(const Client& client, int64_t total_jobs, int64_t chunk_jobs)
      : client_(client), total_jobs_(total_jobs), chunk_jobs_(chunk_jobs) {}

  // Queues a job; sends the chunk when it is full. False once a call failed.
  bool Add(v1::JobRequest job, int64_t line) {
    if (request_.jobs_size() > 0 &&
        (request_.jobs_size() >= chunk_jobs_ || bytes_ + job.ByteSizeLong() > kMaxChunkBytes)) {
      if (!Send()) return false;
    }
    bytes_ += job.ByteSizeLong();
    *request_.add_jobs() = std::move(job);
    lines_.push_back(line);
    return true;
  }

  // Sends the last chunk. kExitOk with the response, or kExitFailure after
  // printing the scheduler's reasons by line.
  int Finish(v1::SubmitJobsResponse* response) {
    if (failed_ || (request_.jobs_size() > 0 && !Send())) return kExitFailure;
    *response = response_;
    return kExitOk;
  }

  // Cancels the submission when chunks of it were sent, so none of it runs.
  void Abort() {
    failed_ = true;
    if (open_submission_ == 0) return;
    v1::CancelSubmissionRequest request;
    request.set_submission_id(open_submission_);
    v1::Submission ignored;
    client_.stub->CancelSubmission(client_.Context().get(), request, &ignored);
  }

 private:
  bool Send() {
    sent_ += request_.jobs_size();
    request_.set_submission_id(open_submission_);
    request_.set_keep_open(sent_ < total_jobs_);
    const grpc::Status status =
        client_.stub->SubmitJobs(client_.Context(120).get(), request_, &response_);
    if (!status.ok()) {
      Abort();
      const std::string reasons = ServerErrorsByLine(status.error_message(), lines_);
      std::cerr << "nightshift submit: the scheduler refused the file; nothing was submitted:"
                << (reasons.rfind('\n', 0) == 0 ? "" : " ") << reasons << "\n";
      failed_ = true;
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
};

int RunSubmit(int argc, char** argv) {
  SubmitFlags f;
  FlagSet flags(
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
    std::cerr << "nightshift submit: " << *path << ": " << checked.errors.size()
              << " problem(s); nothing was submitted:\n"
              << FormatLineErrors(checked.errors);
    return kExitFailure;
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
  if (!sent.errors.empty() || sent.job_count != checked.job_count) {
    sender.Abort();
    return Fail(kName, FailedPrecondition(
                           *path + " changed while it was being submitted; nothing was submitted"));
  }
  v1::SubmitJobsResponse response;
  if (sender.Finish(&response) != kExitOk) return kExitFailure;
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
