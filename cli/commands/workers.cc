// `nightshift workers`: the workers the scheduler knows, their models and
// what each is running now.
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <cstdio>
#include <iostream>

#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "workers";

std::string State(const v1::WorkerInfo& w) {
  if (!w.connected()) return "offline";
  if (w.draining()) return "draining";
  return w.busy() ? "busy" : "idle";
}

std::string Models(const v1::WorkerInfo& w) {
  std::string names;
  for (const v1::ModelInfo& m : w.models()) {
    // A model whose checkpoint the worker cannot read now gets no batches.
    names += (names.empty() ? "" : ",") + m.name() + (m.unhealthy().empty() ? "" : "(unhealthy)");
  }
  return names;
}

std::string Batch(const v1::WorkerInfo& w) {
  if (!w.has_batch() || w.batch().batch_id() == 0) return "-";
  char text[96];
  std::snprintf(text, sizeof(text), "batch %lld %s pass %lld %.2fs/pass",
                static_cast<long long>(w.batch().batch_id()), w.batch().model().c_str(),
                static_cast<long long>(w.batch().passes_done()), w.batch().seconds_per_pass());
  return text;
}

int RunWorkers(int argc, char** argv) {
  ConnectionFlags connection;
  bool json = false;
  CommandLine flags("nightshift workers [--json]",
                    std::string("Lists the workers: state, device, KV budget, models (marked "
                                "(unhealthy) while a worker cannot read one's checkpoint), running "
                                "batch.\n") +
                        kConnectionHelp);
  AddConnectionFlags(flags, &connection);
  flags.Bool("json", &json, "print the ListWorkersResponse as JSON");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (!flags.positional().empty()) {
    return Fail(kName, InvalidArgument("unexpected argument '" + flags.positional()[0] + "'"));
  }
  auto client = Dial(flags, connection);
  if (!client.ok()) return Fail(kName, client.status());
  v1::ListWorkersResponse response;
  grpc::Status status =
      client->stub->ListWorkers(client->Context().get(), v1::ListWorkersRequest(), &response);
  if (!status.ok()) return CallFailed(kName, "listing workers", status);
  if (json) {
    std::cout << MessageJson(response) << "\n";
    return kExitOk;
  }
  std::printf("%-16s %-9s %-8s %10s  %-24s %s\n", "WORKER", "STATE", "DEVICE", "KV_GIB", "MODELS",
              "RUNNING");
  for (const v1::WorkerInfo& w : response.workers()) {
    std::printf("%-16s %-9s %-8s %10.2f  %-24s %s\n", w.id().c_str(), State(w).c_str(),
                w.device().c_str(), w.kv_budget_bytes() / double(1 << 30), Models(w).c_str(),
                Batch(w).c_str());
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("workers", "list the workers, their models and running batches", RunWorkers);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
