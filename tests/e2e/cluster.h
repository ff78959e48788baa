// A nightshift cluster on loopback for the end-to-end tests: the real
// nightshift-scheduler (SQLite file in a test directory), real
// nightshift-worker processes over real gRPC, and the `nightshift` CLI run as
// a user runs it. Every process started here is killed (SIGKILL) and reaped
// when the Cluster is destroyed, so a failing test leaves nothing behind;
// every CLI call runs under timeout(1), so no test waits forever.
//
// Not thread-safe; one test owns one Cluster.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nightshift.grpc.pb.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace nightshift::e2e {

using json = nlohmann::json;
using testutil::Process;

using testutil::BinPath;
using testutil::DataPath;
using testutil::Lines;
using testutil::ReadFile;
using testutil::ShellQuote;

// One JSON value per line; a line that is not JSON becomes a string value
// holding the line (so a caller's field checks fail naming it).
std::vector<json> JsonLines(const std::string& text);
// Writes one JSON value per line to `path`; returns `path`.
std::string WriteJsonLines(const std::string& path, const std::vector<json>& lines);

using Outcome = testutil::ShellOutcome;

// Runs `command_line` with /bin/sh under `timeout -k 5 timeout_seconds`;
// stdout is captured, stderr goes to `stderr_path` and is returned too.
Outcome Shell(const std::string& command_line, const std::string& stderr_path,
              double timeout_seconds);

// Calls `done` every 50 ms until it returns true (true) or `timeout_seconds`
// pass (false).
bool WaitUntil(const std::function<bool()>& done, double timeout_seconds);

// The shape of a small random-weight checkpoint for `nightshift
// make-checkpoint` (F32, so no conversion cost on CPU).
struct ModelShape {
  std::string arch;  // llama, qwen3, ...
  int hidden = 64;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int intermediate = 128;
  int head_dim = 0;  // 0: hidden / heads
  bool tie_embeddings = false;
  std::string tokenizer_dir;       // copied into the checkpoint
  std::string chat_template_file;  // copied as chat_template.jinja when set
  int seed = 1;
  std::vector<std::string> extra_args;  // more make-checkpoint flags (a mixture of experts')
};

// Writes the checkpoint to `out_dir` (created, with its parents). "" on success, else the
// command's error output.
std::string MakeCheckpoint(const ModelShape& shape, const std::string& out_dir);

// The two models of the end-to-end tests: a Llama with Mistral-7B's
// SentencePiece tokenizer and its instruct chat template, and a Qwen3 (q/k
// norm, tied embeddings) with Qwen3's byte-level tokenizer and template.
// Hidden 64, 2 layers: a pass takes milliseconds.
inline constexpr const char* kLlama = "llama-mini";
inline constexpr const char* kQwen = "qwen-mini";
ModelShape LlamaMini();
ModelShape QwenMini();

// OpenAI Batch input lines. Generation asks for the top-2 logprobs of every
// step and is greedy (temperature 0) unless `sampling` (body fields such as
// temperature and seed) says otherwise.
json CompletionLine(const std::string& custom_id, const std::string& model,
                    const std::string& prompt, int max_tokens,
                    const json& sampling = {{"temperature", 0}});
json ChatLine(const std::string& custom_id, const std::string& model,
              const std::string& user_message, int max_tokens);
json ClassifyLine(const std::string& custom_id, const std::string& model, const std::string& prompt,
                  const std::vector<std::string>& labels);

// proto3 JSON writes int64 as a string and int32 as a number: either, as
// int64 (0 when absent or neither).
int64_t Int(const json& value);

// The value of the first sample of `name` whose labels include `labels`
// (e.g. `model="llama"`) in the Prometheus text `metrics`; -1 when there is
// none.
double MetricSample(const std::string& metrics, const std::string& name, const std::string& labels);

class Cluster {
 public:
  // Logs, the database and scratch files go to `dir` (must exist and
  // outlive the Cluster).
  explicit Cluster(std::string dir);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Starts nightshift-scheduler on `listen` (port 0 picks a free one) with
  // the database `dir/state.db`, --lease-seconds `lease_seconds` and a 0.2 s
  // heartbeat, and waits for it to listen. Returns "" on success (address()
  // is then set), else why it did not start with its log.
  // `extra` flags go after those; with --http-listen among them it also
  // waits for the "http listening on" line (http_address() is then set).
  std::string StartScheduler(double lease_seconds, const std::string& listen = "127.0.0.1:0",
                             const std::vector<std::string>& extra = {});
  // SIGKILL, then reap. No-op when no scheduler runs.
  void KillScheduler();
  // The scheduler process last started (nullptr before), e.g. to SIGSTOP it.
  Process* scheduler() const { return scheduler_.get(); }

  // Starts nightshift-worker `id` against the scheduler with the model roots
  // and `extra` flags (device cpu, one thread, a fixed read bandwidth so no
  // start-up measurement). Returns nullptr when it cannot be spawned; the
  // Cluster owns the process.
  Process* StartWorker(const std::string& id, const std::vector<std::string>& model_roots,
                       const std::vector<std::string>& extra = {});
  // As StartWorker, attached through `scheduler` ("" = address(); e.g. a
  // TcpProxy's address) and with `wrapper` before the worker's argv: a
  // command (argv[0] a path) that ends by exec'ing the rest, so the Process
  // is the worker's (/usr/bin/env NAME=VALUE, a shell entering a cgroup).
  Process* StartWorkerWith(const std::string& id, const std::vector<std::string>& model_roots,
                           const std::vector<std::string>& extra, const std::string& scheduler,
                           const std::vector<std::string>& wrapper);
  // Starts `nightshift-worker --config CONFIG_FILE` and nothing more, as
  // the Helm chart starts one: every flag comes from the file (or the
  // environment). `id` names its log and worker(id); the Cluster owns it.
  Process* StartWorkerFromConfig(const std::string& id, const std::string& config_file);
  Process* worker(const std::string& id) const;

  // True once the scheduler lists worker `id` connected with every model of
  // `models` advertised, within `timeout_seconds`.
  bool WaitForWorker(const std::string& id, const std::vector<std::string>& models,
                     double timeout_seconds);

  // Runs `nightshift ARGS --scheduler ADDRESS` (no config file or token from
  // the environment) under a timeout.
  Outcome Nightshift(const std::string& args, double timeout_seconds = 120) const;
  // `nightshift submit FILE --json`: the submission id, 0 on failure (the
  // failure is in last_error()).
  int64_t Submit(const std::string& batch_file);
  // `nightshift status ID --json`: the Submission, null on failure.
  json Status(int64_t submission) const;

  // Straight to the scheduler's JobService over gRPC, for polling (a CLI
  // call costs a process start), as proto3 JSON with the proto's field names
  // and every field, as the CLI's --json prints it:
  // ListWorkers (null on failure) ...
  json Workers() const;
  // ... GetSubmission (null on failure) ...
  json Submission(int64_t submission) const;
  // ... and every job of the submission with its output, in input order
  // (empty on failure).
  std::vector<json> ListJobs(int64_t submission) const;

  const std::string& address() const { return address_; }
  // The Batch API's HOST:PORT when the scheduler serves it, else "".
  const std::string& http_address() const { return http_address_; }
  const std::string& dir() const { return dir_; }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& last_error() const { return last_error_; }
  // Every process's log, headed by its name: for failure messages.
  std::string Logs() const;

 private:
  std::string dir_;
  std::string address_;
  std::string http_address_;
  std::string last_error_;
  std::unique_ptr<Process> scheduler_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  int scheduler_starts_ = 0;
  std::map<std::string, std::unique_ptr<Process>> workers_;
};

}  // namespace nightshift::e2e
