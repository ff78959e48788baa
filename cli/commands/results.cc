// `nightshift results SUBMISSION -o out.jsonl`: writes a finished
// submission's results as an OpenAI Batch output file, one line per job in
// input order, failed and cancelled jobs in the same file with their error
// (as vLLM's run_batch does). See cli/client/batch_output.h for the shape.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "cli/client/batch_output.h"
#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/client/progress.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "results";

struct ResultsFlags {
  ConnectionFlags connection;
  std::string output;
  bool partial = false;
};

struct Tally {
  int64_t succeeded = 0, failed = 0, cancelled = 0, unfinished = 0;
};

// Streams every job and writes the finished ones to `out`.
grpc::Status WriteResults(const Client& client, int64_t id, std::ostream& out, Tally* tally) {
  v1::StreamResultsRequest request;
  request.set_submission_id(id);
  auto context = client.Context(0);
  auto reader = client.stub->StreamResults(context.get(), request);
  v1::Job job;
  while (reader->Read(&job)) {
    if (!IsFinished(job)) {
      ++tally->unfinished;
      continue;
    }
    out << BatchOutputLine(job).dump() << "\n";
    tally->succeeded += job.state() == v1::JOB_STATE_SUCCEEDED;
    tally->failed += job.state() == v1::JOB_STATE_FAILED;
    tally->cancelled += job.state() == v1::JOB_STATE_CANCELLED;
  }
  return reader->Finish();
}

// CommandLine knows only long flags; `-o FILE` is accepted as `--output FILE`.
std::vector<char*> WithShortOutput(int argc, char** argv) {
  static char kOutput[] = "--output";
  std::vector<char*> args(argv, argv + argc);
  for (char*& arg : args) {
    if (std::strcmp(arg, "-o") == 0) arg = kOutput;
  }
  return args;
}

int RunResults(int argc, char** argv) {
  ResultsFlags f;
  CommandLine flags("nightshift results SUBMISSION [-o FILE] [--partial]",
                    std::string("Writes a submission's results as an OpenAI Batch output file "
                                "(JSONL, input order): {id, custom_id, response: {status_code, "
                                "request_id, body}, error}. Failed jobs are in the same file with "
                                "status_code 500 and error {code: job_failed, message}; cancelled "
                                "ones with 409 and job_cancelled. Refuses an unfinished submission "
                                "unless --partial.\n") +
                        kSubmissionHelp + kConnectionHelp);
  AddConnectionFlags(flags, &f.connection);
  flags.String("output", &f.output, "the output file, also -o (default: standard output)", "FILE");
  flags.Bool("partial", &f.partial, "write the jobs finished so far of an unfinished submission");
  std::vector<char*> args = WithShortOutput(argc, argv);
  if (int rc = ParseOrExit(flags, argc, args.data()); rc >= 0) return rc;
  auto text = OnePositional(flags.positional(), "SUBMISSION");
  if (!text.ok()) return Fail(kName, text.status());
  auto id = ParseSubmissionId(*text);
  if (!id.ok()) return Fail(kName, id.status());
  auto client = Dial(flags, f.connection);
  if (!client.ok()) return Fail(kName, client.status());

  v1::GetSubmissionRequest get;
  get.set_submission_id(*id);
  v1::Submission submission;
  grpc::Status status = client->stub->GetSubmission(client->Context().get(), get, &submission);
  if (!status.ok()) return CallFailed(kName, "submission " + *text, status);
  if (!submission.done() && !f.partial) {
    return Fail(kName, FailedPrecondition("submission " + *text + " is not finished (" +
                                          std::to_string(FinishedJobs(submission.counts())) + "/" +
                                          std::to_string(submission.counts().total()) +
                                          " jobs done); wait with `nightshift watch " + *text +
                                          "` or pass --partial"));
  }
  std::ofstream file;
  const bool to_file = !f.output.empty() && f.output != "-";
  if (to_file) {
    file.open(f.output + ".partial", std::ios::binary | std::ios::trunc);
    if (!file) return Fail(kName, NotFound(f.output + ".partial: cannot open for writing"));
  }
  Tally tally;
  status = WriteResults(*client, *id, to_file ? file : std::cout, &tally);
  if (!status.ok()) return CallFailed(kName, "submission " + *text, status);
  if (to_file) {
    // Written beside the target and renamed, so FILE is never half-written.
    file.close();
    if (!file || std::rename((f.output + ".partial").c_str(), f.output.c_str()) != 0) {
      return Fail(kName, DataLoss(f.output + ": write failed"));
    }
  }
  std::cerr << "wrote " << tally.succeeded + tally.failed + tally.cancelled << " results ("
            << tally.succeeded << " succeeded, " << tally.failed << " failed, " << tally.cancelled
            << " cancelled"
            << (tally.unfinished > 0
                    ? ", " + std::to_string(tally.unfinished) + " not finished, left out"
                    : "")
            << ")" << (to_file ? " to " + f.output : "") << "\n";
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("results", "write a submission's results as an OpenAI Batch output file",
                    RunResults);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
