// `nightshift list`: jobs, filtered by submission, state and model, oldest
// first, as a table or (--json) one JSON document {"jobs": [Job, ...]}
// (with an empty list when nothing matches). The table's header is printed
// with the first page, so an error prints none.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>

#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "list";

struct ListFlags {
  ConnectionFlags connection;
  int64_t submission = 0;
  std::string state;
  std::string model;
  int64_t limit = 100;
  bool json = false;
};

// "queued" / "QUEUED" -> JOB_STATE_QUEUED; "" -> unspecified (any).
StatusOr<v1::JobState> ParseState(std::string text) {
  if (text.empty()) return v1::JOB_STATE_UNSPECIFIED;
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  v1::JobState state;
  if (!v1::JobState_Parse("JOB_STATE_" + text, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
    return InvalidArgument("--state '" + text +
                           "': one of queued, leased, running, succeeded, failed, cancelled");
  }
  return state;
}

void PrintRow(const v1::Job& job) {
  std::string reason = !job.error().empty() ? job.error() : job.reason();
  std::printf("%-8lld %-6lld %-20s %-12s %-10s %-10s %s\n", static_cast<long long>(job.id()),
              static_cast<long long>(job.submission_id()), job.custom_id().c_str(),
              job.model().c_str(), v1::JobState_Name(job.state()).substr(10).c_str(),
              job.worker_id().c_str(), reason.c_str());
}

int RunList(int argc, char** argv) {
  ListFlags f;
  CommandLine flags(
      "nightshift list [--submission ID] [--state S] [--model M] [--limit N] [--json]",
      std::string("Lists jobs, oldest first.\n") + kConnectionHelp);
  AddConnectionFlags(flags, &f.connection);
  std::string submission;
  flags.String("submission", &submission, "only this submission's jobs (7 or batch_7)", "ID");
  flags.String("state", &f.state, "only jobs in this state (queued, leased, running, ...)", "S");
  flags.String("model", &f.model, "only this model's jobs", "NAME");
  flags.Int("limit", &f.limit, "at most this many jobs (default 100; 0 = all)");
  flags.Bool("json", &f.json,
             "print one JSON document {\"jobs\": [Job, ...]} (an empty list when none match)");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (!flags.positional().empty()) {
    return Fail(kName, InvalidArgument("unexpected argument '" + flags.positional()[0] + "'"));
  }
  if (!submission.empty()) {
    auto id = ParseSubmissionId(submission);
    if (!id.ok()) return Fail(kName, id.status());
    f.submission = *id;
  }
  auto state = ParseState(f.state);
  if (!state.ok()) return Fail(kName, state.status());
  if (f.limit < 0) return Fail(kName, InvalidArgument("--limit must not be negative"));
  auto client = Dial(flags, f.connection);
  if (!client.ok()) return Fail(kName, client.status());

  v1::ListJobsRequest request;
  request.set_submission_id(f.submission);
  request.set_state(*state);
  request.set_model(f.model);
  request.set_with_output(f.json);
  int64_t shown = 0;
  bool started = false;  // the header or the document's opening is out
  do {
    request.set_page_size(
        static_cast<int32_t>(f.limit == 0 ? 1000 : std::min<int64_t>(1000, f.limit - shown)));
    v1::ListJobsResponse response;
    grpc::Status status = client->stub->ListJobs(client->Context().get(), request, &response);
    if (!status.ok()) {
      if (started && f.json) std::cout << "]}" << std::endl;  // what was printed stays valid
      return CallFailed(kName, "listing jobs", status);
    }
    if (!started) {
      if (f.json) {
        std::cout << "{\"jobs\": [";
      } else {
        std::printf("%-8s %-6s %-20s %-12s %-10s %-10s %s\n", "JOB", "SUB", "CUSTOM_ID", "MODEL",
                    "STATE", "WORKER", "REASON");
      }
      started = true;
    }
    for (const v1::Job& job : response.jobs()) {
      if (f.json) {
        std::cout << (shown == 0 ? "\n" : ",\n") << MessageJson(job);
      } else {
        PrintRow(job);
      }
      ++shown;
    }
    std::fflush(stdout);
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty() && (f.limit == 0 || shown < f.limit));
  if (f.json) std::cout << (shown == 0 ? "]}" : "\n]}") << "\n";
  std::cout << std::flush;
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("list", "list jobs by submission, state or model", RunList);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
