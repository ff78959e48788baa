#include "tests/metrics/cluster.h"

#include <stdlib.h>

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/metrics_test_util.h"
#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "tests/testing/paths.h"

namespace nightshift::metrics_test {

namespace {

namespace v1 = nightshift::v1;
using Clock = std::chrono::steady_clock;

using testutil::BinPath;

std::string ModelDir() { return testutil::DataPath(std::string("models/") + kModel); }

}  // namespace

int FreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

std::string HttpGetBody(int port, const std::string& target) {
  try {
    const metrics::testing::HttpResponse r = metrics::testing::HttpGet(port, target);
    return r.result() == boost::beast::http::status::ok ? r.body() : "";
  } catch (const boost::system::system_error&) {
    return "";
  }
}

namespace {

// Calls fn(series, value) for every sample line of a /metrics text.
template <typename Fn>
void ForEachSample(const std::string& exposition, Fn fn) {
  size_t at = 0;
  while (at < exposition.size()) {
    size_t end = exposition.find('\n', at);
    if (end == std::string::npos) end = exposition.size();
    const std::string line = exposition.substr(at, end - at);
    const size_t space = line.rfind(' ');
    if (!line.empty() && line[0] != '#' && space != std::string::npos) {
      fn(line.substr(0, space), line.substr(space + 1));
    }
    at = end + 1;
  }
}

}  // namespace

std::string SampleValue(const std::string& exposition, const std::string& series) {
  std::string found;
  ForEachSample(exposition, [&](const std::string& s, const std::string& value) {
    if (s == series) found = value;
  });
  return found;
}

double SumOfSamples(const std::string& exposition, const std::string& name) {
  double sum = 0;
  ForEachSample(exposition, [&](const std::string& series, const std::string& value) {
    if (series == name || series.rfind(name + "{", 0) == 0) sum += std::atof(value.c_str());
  });
  return sum;
}

MetricsCluster::MetricsCluster() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ns-metrics-XXXXXX").string();
  dir_ = mkdtemp(pattern.data());
}

MetricsCluster::~MetricsCluster() {
  processes_.clear();  // kills and reaps
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string MetricsCluster::StartProcess(const std::string& name,
                                         const std::vector<std::string>& argv) {
  auto p = Process::Start(argv, dir_ + "/" + name + ".log");
  if (p == nullptr) return "cannot start " + argv[0];
  processes_[name] = std::move(p);
  return "";
}

std::string MetricsCluster::StartScheduler() {
  std::vector<std::string> argv = testutil::SchedulerArgv(dir_ + "/state.db", "5", "0.5");
  // RunJobs may submit before a just-started worker has attached.
  argv.insert(argv.end(), {"--metrics-port", "0", "--allow-unknown-models"});
  std::string error = StartProcess("scheduler", argv);
  if (!error.empty()) return error;
  Process& p = *processes_["scheduler"];
  address_ = testutil::WaitForListenAddress(p, 20);
  if (address_.empty()) return "the scheduler did not start:\n" + p.Log();
  scheduler_metrics_port_ = testutil::WaitForLogPort(p, "metrics listening on ", 5);
  if (scheduler_metrics_port_ == 0) return "the scheduler printed no metrics port:\n" + p.Log();
  return "";
}

std::string MetricsCluster::StartWorker(const std::string& id) {
  const std::string root = dir_ + "/models-" + id;
  // A copy: the worker refuses a symlink that leaves its model root.
  std::error_code error_code;
  std::filesystem::create_directories(root + "/" + kModel, error_code);
  for (const char* name : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(ModelDir() + "/" + name, root + "/" + kModel + "/" + name,
                               error_code);
    if (error_code) return "cannot copy the model: " + error_code.message();
  }
  std::string error = StartProcess(
      id, {BinPath("nightshift-worker"), "--scheduler", address_, "--id", id, "--model-root", root,
           "--device", "cpu", "--threads", "1", "--read-bandwidth", "1e9", "--state-dir",
           dir_ + "/state-" + id, "--metrics-port", "0"});
  if (!error.empty()) return error;
  const int port = testutil::WaitForLogPort(*processes_[id], "metrics listening on ", 30);
  if (port == 0) return "worker " + id + " printed no metrics port:\n" + processes_[id]->Log();
  worker_metrics_ports_[id] = port;
  return "";
}

std::string MetricsCluster::StartFakeWorker(const std::string& id) {
  return StartProcess(id, {BinPath("nightshift-fake-worker"), "--scheduler", address_, "--id", id,
                           "--model", kModel, "--pass-seconds", "0.02"});
}

std::string MetricsCluster::RunJobs(int jobs, int max_new_tokens, double timeout_seconds,
                                    bool staggered) {
  auto channel = api::Connect({address_, "", false, ""});
  if (!channel.ok()) return channel.status().message();
  auto stub = v1::JobService::NewStub(*channel);
  v1::SubmitJobsRequest request;
  for (int i = 0; i < jobs; ++i) {
    v1::JobRequest* job = request.add_jobs();
    job->set_custom_id("job-" + std::to_string(i));
    job->set_model(kModel);
    job->set_url("/v1/completions");
    for (int id : {1, 403 + i, 407}) job->mutable_token_ids()->add_ids(id);
    job->set_max_new_tokens(max_new_tokens + (staggered ? i : 0));
  }
  v1::SubmitJobsResponse reply;
  {
    grpc::ClientContext context;
    Status status = api::FromGrpcStatus(stub->SubmitJobs(&context, request, &reply));
    if (!status.ok()) return "SubmitJobs: " + status.ToString();
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds);
  v1::Submission submission;
  while (Clock::now() < deadline) {
    grpc::ClientContext context;
    v1::GetSubmissionRequest get;
    get.set_submission_id(reply.submission_id());
    Status status = api::FromGrpcStatus(stub->GetSubmission(&context, get, &submission));
    if (!status.ok()) return "GetSubmission: " + status.ToString();
    if (submission.done()) {
      if (submission.counts().succeeded() == jobs) return "";
      return "not every job succeeded: " + submission.ShortDebugString();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "the submission was not done in time: " + submission.ShortDebugString();
}

int MetricsCluster::worker_metrics_port(const std::string& id) const {
  auto it = worker_metrics_ports_.find(id);
  return it == worker_metrics_ports_.end() ? 0 : it->second;
}

std::string MetricsCluster::Logs() const {
  std::string logs;
  for (const auto& [name, p] : processes_) logs += "---- " + name + " log:\n" + p->Log();
  return logs;
}

}  // namespace nightshift::metrics_test
