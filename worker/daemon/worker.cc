#include "worker/daemon/worker.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "worker/daemon/log.h"

namespace nightshift::worker {
namespace {

std::vector<int64_t> JobIds(const std::vector<JobAssignment>& jobs) {
  std::vector<int64_t> ids;
  for (const JobAssignment& job : jobs) ids.push_back(job.job_id);
  return ids;
}

std::vector<JobOutcome> FailJobs(int64_t batch_id, const std::vector<JobAssignment>& jobs,
                                 const std::string& error) {
  std::vector<JobOutcome> failed;
  for (const JobAssignment& job : jobs) {
    JobOutcome outcome;
    outcome.batch_id = batch_id;
    outcome.job_id = job.job_id;
    outcome.error = error;
    failed.push_back(std::move(outcome));
  }
  return failed;
}

}  // namespace

bool IsCheckpointReadError(const Status& status) {
  return status.code() == StatusCode::kDataLoss || status.code() == StatusCode::kUnavailable;
}

Worker::Worker(const Catalog* catalog, EngineFactory factory, SchedulerLink* link,
               WorkerMetrics* metrics, WorkerOptions options)
    : catalog_(catalog),
      factory_(std::move(factory)),
      link_(link),
      metrics_(metrics),
      options_(options) {}

Worker::~Worker() = default;

void Worker::Assign(BatchAssignment assignment) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!drained_) {
      commands_.push_back(std::move(assignment));
      cv_.notify_all();
      return;
    }
  }
  LogLine("drained: handing back " + std::to_string(assignment.jobs.size()) + " jobs of batch " +
          std::to_string(assignment.batch_id) + " assigned meanwhile");
  link_->SendHandBack(assignment.batch_id, JobIds(assignment.jobs), /*draining=*/true);
}

void Worker::Cancel(CancelRequest cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  commands_.push_back(std::move(cancel));
  cv_.notify_all();
}

std::vector<int64_t> Worker::RunningBatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_batch_ == 0) return {};
  return {running_batch_};
}

std::string Worker::OpenModel() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_model_;
}

std::set<std::string> Worker::WithdrawnModels() const {
  std::lock_guard<std::mutex> lock(mu_);
  return withdrawn_;
}

std::map<std::string, std::string> Worker::UnhealthyModels() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::string> models;
  for (const auto& [model, u] : unhealthy_) models[model] = u.reason;
  return models;
}

std::deque<Worker::Command> Worker::TakeCommands() {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<Command> commands;
  commands.swap(commands_);
  return commands;
}

void Worker::Run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  while (!stop) {
    if (RunOnce()) continue;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop || !commands_.empty(); });
  }
  Drain();
  stop_ = nullptr;  // the caller's flag may not outlive Run
}

bool Worker::RunOnce() {
  RecoverModels();
  std::deque<Command> commands = TakeCommands();
  for (Command& command : commands) {
    if (auto* assign = std::get_if<BatchAssignment>(&command)) {
      Handle(std::move(*assign));
    } else {
      Handle(std::get<CancelRequest>(command));
    }
  }
  const bool ran = batch_ != nullptr && !batch_->empty();
  if (ran) RunPass();
  ReportKvInUse();
  return ran || !commands.empty();
}

void Worker::Drain() {
  std::deque<Command> commands;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands.swap(commands_);
    drained_ = true;  // from now on Assign hands back
  }
  for (Command& command : commands) {
    if (auto* assign = std::get_if<BatchAssignment>(&command)) {
      HandBackDraining(assign->batch_id, JobIds(assign->jobs));
    }
  }
  const int64_t batch_id = batch_ != nullptr ? batch_->batch_id() : 0;
  std::vector<int64_t> unfinished;
  if (batch_ != nullptr) unfinished = batch_->TakeUnfinished();
  LogLine("draining: handing back " + std::to_string(unfinished.size()) + " jobs of batch " +
          std::to_string(batch_id));
  if (!unfinished.empty() || !drain_announced_) HandBackDraining(batch_id, std::move(unfinished));
  batch_.reset();
  finished_batch_.reset();
  ReportKvInUse();
  std::lock_guard<std::mutex> lock(mu_);
  running_batch_ = 0;
}

void Worker::HandBackDraining(int64_t batch_id, std::vector<int64_t> job_ids) {
  link_->SendHandBack(batch_id, std::move(job_ids), /*draining=*/true);
  drain_announced_ = true;
}

void Worker::ReportKvInUse() {
  if (metrics_ != nullptr)
    metrics_->SetKvInUse(engine_ != nullptr ? engine_->kv_bytes_in_use() : 0);
}

void Worker::Handle(BatchAssignment assignment) {
  const int64_t batch_id = assignment.batch_id;
  const char* refused = nullptr;
  if (WithdrawnModels().count(assignment.model) != 0) refused = "was withdrawn here";
  if (UnhealthyModels().count(assignment.model) != 0) refused = "is unhealthy here";
  if (refused != nullptr) {
    // Sent before the scheduler saw the withdrawal or the model's health: it
    // never ran here.
    LogLine("handing back " + std::to_string(assignment.jobs.size()) + " jobs of batch " +
            std::to_string(batch_id) + ": model " + assignment.model + " " + refused);
    link_->SendHandBack(batch_id, JobIds(assignment.jobs), /*draining=*/false);
    return;
  }
  if (batch_ == nullptr || batch_->batch_id() != batch_id) {
    if (batch_ != nullptr && !batch_->empty()) {
      LogLine("batch " + std::to_string(batch_->batch_id()) + " superseded by batch " +
              std::to_string(batch_id) + "; dropping its " + std::to_string(batch_->size()) +
              " jobs");
      (void)batch_->TakeUnfinished();
    }
    batch_.reset();
    if (finished_batch_ != nullptr && finished_batch_->batch_id() == batch_id) {
      batch_ = std::move(finished_batch_);  // a late top-up: same model, engine and pass count
    } else {
      finished_batch_.reset();
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_batch_ = 0;
      }
      Status open = EnsureOpen(assignment.model);
      if (!open.ok()) {
        FailModel(assignment.model, open.ToString(),
                  FailJobs(batch_id, assignment.jobs, open.ToString()));
        return;
      }
      batch_ =
          std::make_unique<BatchRunner>(batch_id, engine_.get(), model_->tokenizer.get(),
                                        catalog_->kv_budget_bytes, model_->offer.pass_token_budget);
      batch_model_ = assignment.model;
    }
    std::lock_guard<std::mutex> lock(mu_);
    running_batch_ = batch_id;
  }
  BatchRunner::AddResult added = batch_->Add(assignment.jobs);
  LogLine(std::string(assignment.top_up ? "top-up of batch " : "batch ") +
          std::to_string(batch_id) + " started: model " + assignment.model + ", " +
          std::to_string(assignment.jobs.size()) + " jobs, mode " +
          (model_->resident ? "resident" : "streaming"));
  if (!added.failed.empty()) link_->SendResults(std::move(added.failed));
  if (!added.handed_back.empty()) {
    LogLine("handing back " + std::to_string(added.handed_back.size()) +
            " jobs: no room in the KV budget or the next pass");
    link_->SendHandBack(batch_id, std::move(added.handed_back), /*draining=*/false);
  }
}

void Worker::Handle(const CancelRequest& cancel) {
  if (batch_ == nullptr || batch_->batch_id() != cancel.batch_id) return;
  batch_->Cancel(cancel.job_ids);
  LogLine("cancelled " + std::to_string(cancel.job_ids.size()) + " jobs of batch " +
          std::to_string(cancel.batch_id) + (cancel.reason.empty() ? "" : ": " + cancel.reason));
}

Status Worker::EnsureOpen(const std::string& model) {
  if (model_ != nullptr && model_->offer.name == model && engine_ != nullptr) return Status::Ok();
  const ModelEntry* entry = catalog_->Find(model);
  if (entry == nullptr) return NotFound("model " + model + " is not served by this worker");
  engine_.reset();
  model_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_model_.clear();
  }
  // Checked again at open: the directory may have changed since the scan.
  NS_RETURN_IF_ERROR(RecheckModelPaths(*entry));
  StatusOr<std::unique_ptr<BatchEngine>> engine = factory_(*entry, catalog_->kv_budget_bytes);
  if (!engine.ok()) return engine.status().Prefixed("cannot open model " + model);
  engine_ = std::move(*engine);
  model_ = entry;
  LogLine("opened model " + model + " (" + (entry->resident ? "resident" : "streaming") + ")");
  std::lock_guard<std::mutex> lock(mu_);
  open_model_ = model;
  return Status::Ok();
}

void Worker::FailModel(const std::string& model, const std::string& reason,
                       std::vector<JobOutcome> failed) {
  LogLine("model " + model + " failed, withdrawing it: " + reason);
  // The withdrawal first: the results leave the worker idle for the
  // scheduler, which would lease it the model again if it did not know.
  if (catalog_->Find(model) != nullptr) {
    link_->SendWithdraw(model, reason);
    std::lock_guard<std::mutex> lock(mu_);
    withdrawn_.insert(model);
  }
  if (!failed.empty()) link_->SendResults(std::move(failed));
  CloseModel();
}

void Worker::CloseModel() {
  batch_.reset();
  finished_batch_.reset();
  engine_.reset();
  model_ = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  running_batch_ = 0;
  open_model_.clear();
}

void Worker::ReadFailed(const std::string& model, const std::string& reason) {
  const int64_t batch_id = batch_->batch_id();
  std::vector<int64_t> unfinished = batch_->TakeUnfinished();
  std::ostringstream line;
  line << "model " << model << " is unhealthy for " << options_.unhealthy_seconds
       << " s: a read of its checkpoint failed mid-pass (" << reason << "); handing back "
       << unfinished.size() << " jobs of batch " << batch_id << " with the error";
  LogLine(line.str());
  {
    std::lock_guard<std::mutex> lock(mu_);
    unhealthy_[model] = {reason,
                         std::chrono::steady_clock::now() +
                             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(options_.unhealthy_seconds))};
  }
  if (metrics_ != nullptr) {
    metrics_->OnCheckpointReadError(model);
    metrics_->SetModelUnhealthy(model, true);
  }
  // The health first: the hand-back leaves the worker idle for the
  // scheduler, which would lease it the model again if it did not know.
  link_->SendModelHealth(model, reason);
  link_->SendCouldNotRun(batch_id, std::move(unfinished), reason);
  CloseModel();  // the engine's reads broke; the next batch reopens it
}

void Worker::RecoverModels() {
  std::vector<std::string> recovered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = unhealthy_.begin(); it != unhealthy_.end();) {
      if (it->second.until > now) {
        ++it;
        continue;
      }
      recovered.push_back(it->first);
      it = unhealthy_.erase(it);
    }
  }
  for (const std::string& model : recovered) {
    std::ostringstream line;
    line << "model " << model << " is offered again after " << options_.unhealthy_seconds
         << " s unhealthy; its next batch reopens the checkpoint";
    LogLine(line.str());
    if (metrics_ != nullptr) metrics_->SetModelUnhealthy(model, false);
    link_->SendModelHealth(model, "");
  }
}

void Worker::RunPass() {
  const auto start = std::chrono::steady_clock::now();
  StatusOr<PassOutcome> pass = batch_->RunPass();
  if (!pass.ok()) {
    const std::string reason = pass.status().ToString();
    if (IsCheckpointReadError(pass.status())) {
      ReadFailed(batch_model_, reason);
    } else {
      FailModel(batch_model_, reason, batch_->FailAll(reason));
    }
    return;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (elapsed < options_.min_pass_seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.min_pass_seconds - elapsed));
    pass->stats.seconds = std::max(pass->stats.seconds, options_.min_pass_seconds);
  }
  const bool stopping = stop_ != nullptr && *stop_;
  if (stopping && !drain_announced_) HandBackDraining(batch_->batch_id(), {});
  ReportPass(*pass, /*want_top_up=*/!stopping);
  if (batch_->empty()) {
    LogLine("batch " + std::to_string(batch_->batch_id()) + " done after " +
            std::to_string(batch_->passes()) + " passes");
    finished_batch_ = std::move(batch_);
    std::lock_guard<std::mutex> lock(mu_);
    running_batch_ = 0;
  }
}

void Worker::ReportPass(const PassOutcome& pass, bool want_top_up) {
  const engine::PassStats& s = pass.stats;
  api::PassProgress p;
  p.batch_id = batch_->batch_id();
  p.pass_index = batch_->passes() - 1;
  p.seconds = s.seconds;
  p.bytes_read = static_cast<int64_t>(s.bytes_read);
  p.io_wait_seconds = s.io_seconds;
  p.sequences = static_cast<int32_t>(s.sequences);
  p.tokens = s.tokens;
  p.mode = ModeName(s.residency);
  p.generated = pass.generated;
  p.free_kv_bytes = static_cast<int64_t>(batch_->free_kv_bytes());
  p.free_pass_tokens = batch_->free_pass_tokens();
  p.experts_total = s.experts_total;
  p.experts_read = s.experts_read;
  p.kept_prefixes = engine_->kept_prefixes();
  // Scoring jobs need only rows of the pass; generation also needs KV.
  p.want_top_up = want_top_up && (p.free_kv_bytes > 0 || p.free_pass_tokens > 0);
  // The results first: the scheduler then counts the room they free when it
  // tops the batch up at this report, instead of a pass later.
  if (!pass.finished.empty()) link_->SendResults(pass.finished);
  link_->SendPass(p);
  if (metrics_ != nullptr) {
    metrics_->OnPass(batch_model_, s, pass.prompt_tokens, pass.generated_tokens,
                     engine_->kv_bytes_in_use());
  }
  std::ostringstream line;
  line << "batch " << p.batch_id << " pass " << p.pass_index << ": " << p.seconds << " s, "
       << p.bytes_read << " bytes read, io wait " << p.io_wait_seconds << " s, " << p.sequences
       << " sequences, " << p.tokens << " tokens";
  if (s.shared_tokens + s.kept_prefix_tokens > 0) {
    line << " (" << s.fed_tokens << " fed, " << s.shared_tokens << " in shared prefixes, "
         << s.kept_prefix_tokens << " from kept prefixes)";
  }
  line << ", mode " << p.mode;
  if (s.experts_total > 0) {
    line << ", experts read " << s.experts_read << " of " << s.experts_total << " ("
         << s.experts_routed << " routed, " << s.experts_pinned << " pinned)";
  }
  if (s.pinned_bytes + s.host_pinned_bytes > 0) {
    line << " (" << s.pinned_bytes + s.host_pinned_bytes << " bytes pinned)";
  }
  line << ", " << pass.finished.size() << " finished";
  LogLine(line.str());
}

}  // namespace nightshift::worker
