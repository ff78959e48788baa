#include "tests/e2e/cluster.h"

#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "proto/client.h"

namespace nightshift::e2e {

namespace {

// A message as the CLI's --json prints it; null when it cannot be printed.
json ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) return json();
  return json::parse(text, nullptr, false);
}

// A context for one polling call: 10 s at most.
std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return context;
}

std::string Join(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& w : words) line += (line.empty() ? "" : " ") + ShellQuote(w);
  return line;
}

}  // namespace

std::vector<json> JsonLines(const std::string& text) {
  std::vector<json> values;
  for (const std::string& line : Lines(text)) {
    json value = json::parse(line, nullptr, false);
    values.push_back(value.is_discarded() ? json(line) : value);
  }
  return values;
}

std::string WriteJsonLines(const std::string& path, const std::vector<json>& lines) {
  std::ofstream out(path);
  for (const json& line : lines) out << line.dump() << "\n";
  return path;
}

Outcome Shell(const std::string& command_line, const std::string& stderr_path,
              double timeout_seconds) {
  return testutil::RunShell("timeout -k 5 " + std::to_string(timeout_seconds) + " " + command_line,
                            stderr_path);
}

bool WaitUntil(const std::function<bool()>& done, double timeout_seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

std::string MakeCheckpoint(const ModelShape& shape, const std::string& out_dir) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(out_dir).parent_path(), error);
  if (error) return "creating the parent of " + out_dir + ": " + error.message();
  std::vector<std::string> argv = {BinPath("nightshift"),
                                   "make-checkpoint",
                                   "--arch",
                                   shape.arch,
                                   "--hidden",
                                   std::to_string(shape.hidden),
                                   "--layers",
                                   std::to_string(shape.layers),
                                   "--heads",
                                   std::to_string(shape.heads),
                                   "--kv-heads",
                                   std::to_string(shape.kv_heads),
                                   "--intermediate",
                                   std::to_string(shape.intermediate),
                                   "--dtype",
                                   "f32",
                                   "--tokenizer",
                                   shape.tokenizer_dir,
                                   "--seed",
                                   std::to_string(shape.seed),
                                   "--out",
                                   out_dir};
  if (shape.tie_embeddings) argv.push_back("--tie-embeddings");
  argv.insert(argv.end(), shape.extra_args.begin(), shape.extra_args.end());
  if (shape.head_dim > 0) {
    argv.push_back("--head-dim");
    argv.push_back(std::to_string(shape.head_dim));
  }
  Outcome run = Shell(Join(argv) + " >/dev/null", out_dir + ".make-checkpoint.log", 120);
  if (run.code != 0) return "make-checkpoint exit " + std::to_string(run.code) + ": " + run.err;
  if (!shape.chat_template_file.empty()) {
    std::filesystem::copy_file(shape.chat_template_file, out_dir + "/chat_template.jinja", error);
    if (error) return "copying the chat template: " + error.message();
  }
  return "";
}

ModelShape LlamaMini() {
  ModelShape shape;
  shape.arch = "llama";
  shape.tokenizer_dir = DataPath("tokenizers/mistral7b");
  shape.chat_template_file = DataPath("chat-templates/mistral7b_instruct/template.jinja");
  shape.seed = 11;
  return shape;
}

ModelShape QwenMini() {
  ModelShape shape;
  shape.arch = "qwen3";
  shape.tie_embeddings = true;
  shape.tokenizer_dir = DataPath("tokenizers/qwen3");  // its tokenizer_config has the template
  shape.seed = 12;
  return shape;
}

namespace {

json Request(const std::string& custom_id, const std::string& url, json body) {
  return {{"custom_id", custom_id}, {"method", "POST"}, {"url", url}, {"body", std::move(body)}};
}

}  // namespace

json CompletionLine(const std::string& custom_id, const std::string& model,
                    const std::string& prompt, int max_tokens, const json& sampling) {
  json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"logprobs", 2}};
  body.update(sampling);
  return Request(custom_id, "/v1/completions", std::move(body));
}

json ChatLine(const std::string& custom_id, const std::string& model,
              const std::string& user_message, int max_tokens) {
  return Request(custom_id, "/v1/chat/completions",
                 {{"model", model},
                  {"messages", {{{"role", "user"}, {"content", user_message}}}},
                  {"max_tokens", max_tokens},
                  {"temperature", 0},
                  {"logprobs", true},
                  {"top_logprobs", 2}});
}

json ClassifyLine(const std::string& custom_id, const std::string& model, const std::string& prompt,
                  const std::vector<std::string>& labels) {
  return Request(custom_id, "/v1/completions",
                 {{"model", model}, {"prompt", prompt}, {"labels", labels}});
}

int64_t Int(const json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string()) return std::strtoll(value.get<std::string>().c_str(), nullptr, 10);
  return 0;
}

double MetricSample(const std::string& metrics, const std::string& name,
                    const std::string& labels) {
  for (size_t at = metrics.find("\n" + name + "{"); at != std::string::npos;
       at = metrics.find("\n" + name + "{", at + 1)) {
    const size_t end = metrics.find('}', at);
    if (metrics.substr(at, end - at).find(labels) == std::string::npos) continue;
    return std::stod(metrics.substr(end + 2));
  }
  return -1;
}

Cluster::Cluster(std::string dir) : dir_(std::move(dir)) {}

Cluster::~Cluster() = default;  // each Process kills and reaps its child

std::string Cluster::StartScheduler(double lease_seconds, const std::string& listen,
                                    const std::vector<std::string>& extra) {
  const std::string log = file("scheduler-" + std::to_string(++scheduler_starts_) + ".log");
  std::vector<std::string> argv =
      testutil::SchedulerArgv(file("state.db"), std::to_string(lease_seconds), "0.2", listen);
  argv.insert(argv.end(), extra.begin(), extra.end());
  scheduler_ = Process::Start(argv, log);
  if (scheduler_ == nullptr) return "cannot spawn " + BinPath("nightshift-scheduler");
  address_ = testutil::WaitForListenAddress(*scheduler_, 30);
  if (address_.empty()) return "the scheduler did not start:\n" + scheduler_->Log();
  http_address_.clear();
  if (std::find(extra.begin(), extra.end(), "--http-listen") != extra.end()) {
    const std::string needle = "http listening on ";
    const std::string line = scheduler_->WaitForLine(needle, 10);
    if (line.empty()) return "the scheduler printed no HTTP address:\n" + scheduler_->Log();
    const size_t at = line.find(needle) + needle.size();
    http_address_ = line.substr(at, line.find(' ', at) - at);
  }
  auto channel = api::Connect({address_, "", false, ""});
  if (!channel.ok()) return "connecting to the scheduler: " + channel.status().ToString();
  jobs_ = v1::JobService::NewStub(*channel);
  return "";
}

void Cluster::KillScheduler() {
  if (scheduler_ == nullptr) return;
  scheduler_->Signal(SIGKILL);
  scheduler_->Wait(10);
}

Process* Cluster::StartWorker(const std::string& id, const std::vector<std::string>& model_roots,
                              const std::vector<std::string>& extra) {
  return StartWorkerWith(id, model_roots, extra, "", {});
}

Process* Cluster::StartWorkerWith(const std::string& id,
                                  const std::vector<std::string>& model_roots,
                                  const std::vector<std::string>& extra,
                                  const std::string& scheduler,
                                  const std::vector<std::string>& wrapper) {
  std::vector<std::string> argv = wrapper;
  std::vector<std::string> worker = {BinPath("nightshift-worker"),
                                     "--scheduler",
                                     scheduler.empty() ? address_ : scheduler,
                                     "--id",
                                     id,
                                     "--device",
                                     "cpu",
                                     "--threads",
                                     "1",
                                     "--read-bandwidth",
                                     "1000000000",
                                     "--state-dir",
                                     file(id + "-state")};
  for (const std::string& root : model_roots) {
    worker.push_back("--model-root");
    worker.push_back(root);
  }
  worker.insert(worker.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), worker.begin(), worker.end());
  std::unique_ptr<Process> p = Process::Start(argv, file(id + ".log"));
  Process* raw = p.get();
  if (p != nullptr) workers_[id] = std::move(p);
  return raw;
}

Process* Cluster::StartWorkerFromConfig(const std::string& id, const std::string& config_file) {
  std::unique_ptr<Process> p =
      Process::Start({BinPath("nightshift-worker"), "--config", config_file}, file(id + ".log"));
  Process* raw = p.get();
  if (p != nullptr) workers_[id] = std::move(p);
  return raw;
}

Process* Cluster::worker(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

bool Cluster::WaitForWorker(const std::string& id, const std::vector<std::string>& models,
                            double timeout_seconds) {
  return WaitUntil(
      [&] {
        for (const json& w : Workers().value("workers", json::array())) {
          if (w.value("id", "") != id || !w.value("connected", false)) continue;
          size_t advertised = 0;
          for (const json& m : w.value("models", json::array())) {
            for (const std::string& name : models) advertised += m.value("name", "") == name;
          }
          return advertised == models.size();
        }
        return false;
      },
      timeout_seconds);
}

Outcome Cluster::Nightshift(const std::string& args, double timeout_seconds) const {
  return Shell("env NIGHTSHIFT_CONFIG=/nonexistent NIGHTSHIFT_TOKEN= " +
                   ShellQuote(BinPath("nightshift")) + " " + args + " --scheduler " + address_,
               file("cli-stderr.txt"), timeout_seconds);
}

int64_t Cluster::Submit(const std::string& batch_file) {
  Outcome run = Nightshift("submit " + ShellQuote(batch_file) + " --json");
  json reply = json::parse(run.out, nullptr, false);
  if (run.code != 0 || !reply.is_object()) {
    last_error_ = "submit exit " + std::to_string(run.code) + ": " + run.err + run.out;
    return 0;
  }
  return reply.value("submission_id", int64_t{0});
}

json Cluster::Status(int64_t submission) const {
  Outcome run = Nightshift("status " + std::to_string(submission) + " --json", 30);
  json reply = json::parse(run.out, nullptr, false);
  return run.code == 0 && reply.is_object() ? reply : json();
}

json Cluster::Workers() const {
  v1::ListWorkersResponse response;
  if (jobs_ == nullptr || !jobs_->ListWorkers(Context().get(), {}, &response).ok()) return json();
  return ToJson(response);
}

json Cluster::Submission(int64_t submission) const {
  v1::GetSubmissionRequest request;
  request.set_submission_id(submission);
  v1::Submission response;
  if (jobs_ == nullptr || !jobs_->GetSubmission(Context().get(), request, &response).ok()) {
    return json();
  }
  return ToJson(response);
}

std::vector<json> Cluster::ListJobs(int64_t submission) const {
  v1::ListJobsRequest request;
  request.set_submission_id(submission);
  request.set_page_size(1000);
  request.set_with_output(true);
  std::vector<json> jobs;
  do {
    v1::ListJobsResponse response;
    if (jobs_ == nullptr || !jobs_->ListJobs(Context().get(), request, &response).ok()) return {};
    for (const v1::Job& job : response.jobs()) jobs.push_back(ToJson(job));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return jobs;
}

std::string Cluster::Logs() const {
  std::string logs;
  for (int i = 1; i <= scheduler_starts_; ++i) {
    const std::string name = "scheduler-" + std::to_string(i) + ".log";
    logs += "---- " + name + ":\n" + ReadFile(file(name));
  }
  for (const auto& [id, p] : workers_) logs += "---- worker " + id + ":\n" + p->Log();
  return logs;
}

}  // namespace nightshift::e2e
