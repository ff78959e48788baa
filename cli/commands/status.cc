// `nightshift status SUBMISSION` / `nightshift status --job ID`: one
// submission's counts, ETA, running batches and the prompt tokens of its
// succeeded jobs (how many were computed once for several jobs), or one
// job's state.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <iostream>

#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/client/progress.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "status";

void PrintJob(const v1::Job& job) {
  std::cout << "job " << job.id() << " (submission " << job.submission_id() << ", line index "
            << job.index() << ", custom_id " << job.custom_id() << ")\n"
            << "  state:   " << v1::JobState_Name(job.state()).substr(10) << "\n"
            << "  model:   " << job.model() << "  " << job.url() << "\n"
            << "  attempt: " << job.attempt() << " of " << job.max_attempts() << "\n";
  if (!job.worker_id().empty()) {
    std::cout << "  worker:  " << job.worker_id();
    if (job.batch_id() > 0) std::cout << " (batch " << job.batch_id() << ")";
    std::cout << "\n";
  }
  if (!job.reason().empty()) std::cout << "  reason:  " << job.reason() << "\n";
  if (!job.error().empty()) std::cout << "  error:   " << job.error() << "\n";
}

int RunStatus(int argc, char** argv) {
  ConnectionFlags connection;
  int64_t job_id = 0;
  bool json = false, utc = false;
  CommandLine flags(
      "nightshift status (SUBMISSION | --job ID) [--json] [--utc]",
      std::string("Shows a submission (job counts, ETA as a duration and a clock time, "
                  "running batches with the measured seconds per pass the ETA rests "
                  "on, the prompt tokens of its succeeded jobs and how many of them "
                  "were computed once for several jobs) or one job.\n") +
          kSubmissionHelp + kConnectionHelp);
  AddConnectionFlags(flags, &connection);
  flags.Int("job", &job_id, "show this job instead of a submission", "ID");
  flags.Bool("json", &json, "print the Submission or Job message as JSON");
  flags.Bool("utc", &utc, "show the ETA's clock time in UTC");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  auto target = PickSubmissionOrJob(flags, job_id);
  if (!target.ok()) return Fail(kName, target.status());
  const int64_t submission_id = target->submission_id;
  auto client = Dial(flags, connection);
  if (!client.ok()) return Fail(kName, client.status());

  if (target->job_id > 0) {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::Job job;
    grpc::Status status = client->stub->GetJob(client->Context().get(), request, &job);
    if (!status.ok()) return CallFailed(kName, "job " + std::to_string(job_id), status);
    if (json) {
      std::cout << MessageJson(job) << "\n";
    } else {
      PrintJob(job);
    }
    return kExitOk;
  }
  v1::GetSubmissionRequest request;
  request.set_submission_id(submission_id);
  request.set_with_prompt_tokens(true);
  v1::Submission submission;
  grpc::Status status = client->stub->GetSubmission(client->Context().get(), request, &submission);
  if (!status.ok()) return CallFailed(kName, "submission " + std::to_string(submission_id), status);
  if (json) {
    std::cout << MessageJson(submission) << "\n";
  } else {
    std::cout << RenderProgressLine(submission, NowMs(), utc) << "\n";
    std::cout << "state: "
              << (submission.done()     ? "done"
                  : submission.sealed() ? "in progress"
                                        : "open (more chunks to come)")
              << "\n";
    // Absent from a scheduler older than the field.
    if (submission.has_prompt_tokens()) {
      std::cout << RenderPromptTokens(submission.prompt_tokens()) << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("status", "show a submission's progress or one job's state", RunStatus);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
