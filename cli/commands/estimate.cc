// `nightshift estimate MODEL`: how long jobs of a given shape would take on
// the workers serving MODEL, after the queue ahead of them.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <cstdio>
#include <iostream>

#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/client/progress.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "estimate";

struct EstimateFlags {
  ConnectionFlags connection;
  int64_t jobs = 1;
  int64_t prompt_tokens = 512;
  int64_t max_tokens = 16;
  bool json = false;
};

int RunEstimate(int argc, char** argv) {
  EstimateFlags f;
  CommandLine flags(
      "nightshift estimate MODEL [--jobs N] [--prompt-tokens N] [--max-tokens N] [--json]",
      std::string("Estimates how long N jobs of one shape take on the workers that "
                  "serve MODEL, after the jobs queued ahead of them.\n") +
          kConnectionHelp);
  AddConnectionFlags(flags, &f.connection);
  flags.Int("jobs", &f.jobs, "how many jobs (default 1)");
  flags.Int("prompt-tokens", &f.prompt_tokens, "prompt length of each job (default 512)");
  flags.Int("max-tokens", &f.max_tokens, "tokens each job generates (default 16)");
  flags.Bool("json", &f.json, "print the EstimateResponse as JSON");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  auto model = OnePositional(flags.positional(), "MODEL");
  if (!model.ok()) return Fail(kName, model.status());
  if (f.jobs < 1 || f.prompt_tokens < 1 || f.max_tokens < 0) {
    return Fail(kName, InvalidArgument("--jobs and --prompt-tokens must be positive, "
                                       "--max-tokens not negative"));
  }
  auto client = Dial(flags, f.connection);
  if (!client.ok()) return Fail(kName, client.status());
  v1::EstimateRequest request;
  request.set_model(*model);
  request.set_jobs(f.jobs);
  request.set_prompt_tokens(f.prompt_tokens);
  request.set_max_new_tokens(f.max_tokens);
  v1::EstimateResponse response;
  grpc::Status status = client->stub->Estimate(client->Context().get(), request, &response);
  if (!status.ok()) return CallFailed(kName, "model " + *model, status);
  if (f.json) {
    std::cout << MessageJson(response) << "\n";
    return kExitOk;
  }
  std::cout << "model " << response.model() << ": " << f.jobs << " job(s), "
            << response.queued_ahead() << " queued ahead; "
            << (response.has_seconds() ? "about " + FormatDuration(response.seconds())
                                       : std::string("no estimate (no worker serves it)"))
            << "\n";
  for (const v1::WorkerEstimate& w : response.workers()) {
    std::printf("  %-16s %s %.2f s/pass (%s), %lld jobs per batch\n", w.worker_id().c_str(),
                w.connected() ? "online " : "offline", w.seconds_per_pass(),
                w.measured() ? "measured" : "advertised",
                static_cast<long long>(w.jobs_per_batch()));
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("estimate", "estimate how long jobs of a model would take", RunEstimate);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
