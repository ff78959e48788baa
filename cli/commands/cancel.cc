// `nightshift cancel SUBMISSION` / `nightshift cancel --job ID`: cancels the
// jobs not yet finished (running ones are told to stop); finished ones keep
// their results.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <iostream>

#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/client/progress.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "cancel";

int RunCancel(int argc, char** argv) {
  ConnectionFlags connection;
  int64_t job_id = 0;
  bool json = false;
  CommandLine flags("nightshift cancel (SUBMISSION | --job ID) [--json]",
                    std::string("Cancels a submission's unfinished jobs, or one job. Finished jobs "
                                "keep their results.\n") +
                        kSubmissionHelp + kConnectionHelp);
  AddConnectionFlags(flags, &connection);
  flags.Int("job", &job_id, "cancel this job only", "ID");
  flags.Bool("json", &json, "print the resulting Submission or Job as JSON");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  auto target = PickSubmissionOrJob(flags, job_id);
  if (!target.ok()) return Fail(kName, target.status());
  const int64_t submission_id = target->submission_id;
  auto client = Dial(flags, connection);
  if (!client.ok()) return Fail(kName, client.status());

  if (target->job_id > 0) {
    v1::CancelJobRequest request;
    request.set_job_id(job_id);
    v1::Job job;
    grpc::Status status = client->stub->CancelJob(client->Context().get(), request, &job);
    if (!status.ok()) return CallFailed(kName, "job " + std::to_string(job_id), status);
    std::cout << (json ? MessageJson(job)
                       : "job " + std::to_string(job_id) + ": " +
                             v1::JobState_Name(job.state()).substr(10))
              << "\n";
    return kExitOk;
  }
  v1::CancelSubmissionRequest request;
  request.set_submission_id(submission_id);
  v1::Submission submission;
  grpc::Status status =
      client->stub->CancelSubmission(client->Context().get(), request, &submission);
  if (!status.ok()) return CallFailed(kName, "submission " + std::to_string(submission_id), status);
  std::cout << (json ? MessageJson(submission) : RenderOutcome(submission)) << "\n";
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("cancel", "cancel a submission's unfinished jobs, or one job", RunCancel);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
