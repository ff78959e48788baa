#include "scheduler/scheduler.h"

#include <algorithm>

#include "common/utf8.h"
#include "planner/estimate.h"
#include "scheduler/eta.h"
#include "scheduler/metrics.h"

namespace nightshift::scheduler {

namespace {

constexpr int kTokeniseChunk = 500;
constexpr int64_t kEtaRefreshMs = 1000;

std::string WaitingReason(const std::string& model) {
  return "waiting for a worker that serves " + model;
}

}  // namespace

struct Scheduler::BatchRuntime {
  struct JobProgress {
    int64_t submission_id = 0;
    int64_t passes_needed = 1;
    int64_t generated = 0;       // tokens generated so far, as the worker reports
    int64_t joined_at_pass = 0;  // the batch's passes_done when the job joined
  };
  int64_t id = 0;
  std::string worker_id;
  std::string model;
  std::map<int64_t, JobProgress> jobs;
  int64_t passes_done = 0;
  double seconds_per_pass = 0;
  double last_pass_seconds = 0;
  int32_t sequences = 0;
  std::string mode;
  int64_t free_kv_bytes = 0;
  bool wants_top_up = false;

  int64_t PassesLeft(const JobProgress& job) const {
    const int64_t done = std::max(job.generated, passes_done - job.joined_at_pass);
    return std::max<int64_t>(0, job.passes_needed - done);
  }
};

struct Scheduler::WorkerRuntime {
  WorkerInfo info;  // info.connected: it has a live stream
  WorkerLink* link = nullptr;
  bool draining = false;
  int64_t batch_id = 0;  // its active batch; 0 = idle
  std::map<std::string, double> measured_seconds_per_pass;
};

struct Scheduler::WatchState {
  int64_t submission_id = 0;
  SubmissionWatcher* watcher = nullptr;
  std::optional<double> eta;
  int64_t eta_at_ms = -1;  // when eta was computed; -1 = never
};

Scheduler::Scheduler(Store* store, Clock* clock, SchedulerOptions options)
    : store_(store), clock_(clock), options_(std::move(options)) {}

Scheduler::~Scheduler() = default;

Status Scheduler::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  NS_ASSIGN_OR_RETURN(std::vector<WorkerInfo> workers, store_->ListWorkers());
  for (WorkerInfo& info : workers) {
    if (info.connected) NS_RETURN_IF_ERROR(store_->DetachWorker(info.id, info.session));
    auto runtime = std::make_unique<WorkerRuntime>();
    info.connected = false;
    runtime->info = std::move(info);
    workers_[runtime->info.id] = std::move(runtime);
  }
  NS_ASSIGN_OR_RETURN(std::vector<Lease> leases, store_->ActiveBatches());
  for (const Lease& lease : leases) {
    auto batch = std::make_unique<BatchRuntime>();
    batch->id = lease.batch_id;
    batch->worker_id = lease.worker_id;
    batch->model = lease.model;
    for (const Job& job : lease.jobs) {
      batch->jobs[job.id] = {job.submission_id, PassesNeeded(job.spec), 0, 0};
    }
    auto worker = workers_.find(lease.worker_id);
    if (worker != workers_.end()) worker->second->batch_id = lease.batch_id;
    batches_[lease.batch_id] = std::move(batch);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- tokenisers

StatusOr<std::shared_ptr<const PromptEncoder>> Scheduler::EncoderFor(const std::string& model) {
  // Connected workers first: their tokenizer is the one that runs the jobs.
  std::vector<const WorkerRuntime*> servers;
  for (const auto& [id, w] : workers_) {
    if (FindModel(w->info, model) != nullptr) servers.push_back(w.get());
  }
  std::stable_sort(servers.begin(), servers.end(), [](const auto* a, const auto* b) {
    return a->info.connected && !b->info.connected;
  });
  for (const WorkerRuntime* w : servers) {
    const std::string& hash = FindModel(w->info, model)->tokenizer_hash;  // "" = no tokenizer
    auto cached = encoders_.find(hash);
    if (cached != encoders_.end()) return cached->second;
    TokenizerFiles files;
    if (!hash.empty()) {
      auto stored = store_->GetTokenizer(hash);
      if (stored.status().code() == StatusCode::kNotFound) continue;  // not uploaded yet
      if (!stored.ok()) return stored.status();
      files = std::move(stored).value();
    }
    auto encoder = PromptEncoder::Create(files, options_.tokenizer_cache_dir);
    if (!encoder.ok()) return encoder.status().Prefixed("the tokenizer of " + model);
    encoders_[hash] = *encoder;
    return encoder;
  }
  return NotFound(WaitingReason(model));
}

int64_t Scheduler::MaxContext(const std::string& model) {
  int64_t context = 0;
  for (const auto& [id, w] : workers_) {
    const ModelOffer* offer = FindModel(w->info, model);
    if (offer == nullptr || offer->max_context_tokens <= 0) continue;
    if (context == 0 || offer->max_context_tokens < context) context = offer->max_context_tokens;
  }
  return context;
}

// Tokenises queued jobs of `model` that waited for its tokenizer; the ones
// that turn out invalid fail with the reason.
Status Scheduler::ValidateWaiting(const std::string& model) {
  auto encoder = EncoderFor(model);
  if (!encoder.ok())
    return encoder.status().code() == StatusCode::kNotFound ? Status::Ok() : encoder.status();
  const int64_t context = MaxContext(model);
  std::set<int64_t> touched;
  std::vector<JobChange> failures;
  while (true) {
    NS_ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->UntokenisedJobs(model, kTokeniseChunk));
    if (jobs.empty()) break;
    std::vector<Tokenisation> outcomes;
    for (const Job& job : jobs) {
      touched.insert(job.submission_id);
      Tokenisation outcome{job.id, false, {}, ""};
      auto tokens = (*encoder)->Encode(job.spec);
      Status status = tokens.ok() ? CheckContext(job.spec, *tokens, context) : tokens.status();
      if (status.ok()) {
        outcome.ok = true;
        outcome.tokens = std::move(tokens).value();
      } else {
        outcome.error = status.message();
      }
      outcomes.push_back(std::move(outcome));
    }
    NS_ASSIGN_OR_RETURN(std::vector<JobChange> failed, store_->ApplyTokenisation(outcomes));
    failures.insert(failures.end(), failed.begin(), failed.end());
  }
  RecordFinished(failures);
  for (int64_t submission : touched) {
    std::vector<JobChange> mine;
    for (const JobChange& c : failures) {
      if (c.submission_id == submission) mine.push_back(c);
    }
    NotifySubmission(submission, std::move(mine));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- clients

StatusOr<SubmitReply> Scheduler::Submit(SubmitRequest request) {
  NS_RETURN_IF_ERROR(
      ValidateJobs(request.jobs, request.request_bytes, options_.limits, request.decode_problems));
  // Tokenisers and contexts are looked up under the lock; encoding runs outside it.
  std::map<std::string, std::shared_ptr<const PromptEncoder>> encoders;
  std::map<std::string, Status> encoder_errors;
  std::map<std::string, int64_t> contexts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const JobSpec& spec : request.jobs) {
      if (encoders.count(spec.model) != 0 || encoder_errors.count(spec.model) != 0) continue;
      auto encoder = EncoderFor(spec.model);
      if (encoder.ok()) {
        encoders[spec.model] = *encoder;
      } else {
        encoder_errors[spec.model] = encoder.status();
      }
      contexts[spec.model] = MaxContext(spec.model);
    }
  }
  SubmitChunk chunk;
  chunk.submission_id = request.submission_id;
  chunk.keep_open = request.keep_open;
  chunk.idempotency_key = request.idempotency_key;
  std::string errors;
  SubmitReply reply;
  for (size_t i = 0; i < request.jobs.size(); ++i) {
    JobSpec& spec = request.jobs[i];
    NewJob job{spec, std::nullopt, "", options_.max_attempts};
    Status status;
    auto encoder = encoders.find(spec.model);
    if (encoder != encoders.end()) {
      auto tokens = encoder->second->Encode(spec);
      status = tokens.ok() ? CheckContext(spec, *tokens, contexts[spec.model]) : tokens.status();
      if (status.ok()) job.tokens = std::move(tokens).value();
    } else if (encoder_errors[spec.model].code() == StatusCode::kNotFound) {
      job.reason = WaitingReason(spec.model);
      ++reply.waiting_for_tokenizer;
    } else {
      status = encoder_errors[spec.model];
    }
    if (!status.ok()) {
      if (!errors.empty()) errors += "; ";
      errors += "job " + std::to_string(i) + ": " + status.message();
    }
    chunk.jobs.push_back(std::move(job));
  }
  if (!errors.empty()) return InvalidArgument(errors);
  NS_ASSIGN_OR_RETURN(SubmitOutcome outcome, store_->Submit(chunk));
  reply.submission_id = outcome.submission_id;
  reply.job_ids = std::move(outcome.job_ids);
  reply.replayed = outcome.replayed;
  if (reply.replayed) reply.waiting_for_tokenizer = 0;
  if (options_.metrics != nullptr && !reply.replayed) {
    std::map<std::string, int64_t> by_model;
    for (const NewJob& job : chunk.jobs) ++by_model[job.spec.model];
    for (const auto& [model, jobs] : by_model) options_.metrics->JobsSubmitted(model, jobs);
  }
  std::lock_guard<std::mutex> lock(mu_);
  NotifySubmission(reply.submission_id, {});
  ScheduleLocked(false);
  return reply;
}

StatusOr<SubmissionStatus> Scheduler::StatusLocked(int64_t id) {
  SubmissionStatus status;
  NS_ASSIGN_OR_RETURN(status.submission, store_->GetSubmission(id));
  NS_ASSIGN_OR_RETURN(status.waiting_for_tokenizer, store_->CountUntokenised(id));
  for (const auto& [batch_id, batch] : batches_) {
    int64_t mine = 0;
    for (const auto& [job_id, job] : batch->jobs) mine += job.submission_id == id ? 1 : 0;
    if (mine == 0) continue;
    status.batches.push_back({batch_id, batch->worker_id, batch->model, batch->mode,
                              batch->passes_done, batch->seconds_per_pass, batch->last_pass_seconds,
                              batch->sequences, mine});
  }
  return status;
}

StatusOr<SubmissionStatus> Scheduler::GetSubmission(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_ASSIGN_OR_RETURN(SubmissionStatus status, StatusLocked(id));
  status.eta_seconds = EtaLocked(id, status);
  return status;
}

StatusOr<JobView> Scheduler::GetJob(int64_t id) {
  JobView view;
  NS_ASSIGN_OR_RETURN(view.job, store_->GetJob(id));
  NS_ASSIGN_OR_RETURN(view.result, store_->GetResult(id));
  return view;
}

StatusOr<JobPage> Scheduler::ListJobs(const JobFilter& filter, int64_t after_id, int limit) {
  return store_->ListJobs(filter, after_id, limit);
}

StatusOr<SubmissionStatus> Scheduler::CancelSubmission(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> changes, store_->CancelSubmission(id));
  Forget(changes);
  Notify(changes);
  ScheduleLocked(false);
  NS_ASSIGN_OR_RETURN(SubmissionStatus status, StatusLocked(id));
  status.eta_seconds = EtaLocked(id, status);
  return status;
}

StatusOr<JobView> Scheduler::CancelJob(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    NS_ASSIGN_OR_RETURN(std::vector<JobChange> changes, store_->CancelJob(id));
    Forget(changes);
    Notify(changes);
    ScheduleLocked(false);
  }
  return GetJob(id);
}

StatusOr<int64_t> Scheduler::Watch(int64_t submission_id, SubmissionWatcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_ASSIGN_OR_RETURN(SubmissionStatus status, StatusLocked(submission_id));
  status.eta_seconds = EtaLocked(submission_id, status);
  const int64_t id = next_watch_++;
  auto watch = std::make_unique<WatchState>();
  watch->submission_id = submission_id;
  watch->watcher = watcher;
  watch->eta = status.eta_seconds;
  watch->eta_at_ms = clock_->NowMs();
  watches_[id] = std::move(watch);
  watcher->OnUpdate({std::move(status), {}});
  return id;
}

void Scheduler::Unwatch(int64_t watch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  watches_.erase(watch_id);
}

StatusOr<std::vector<WorkerStatus>> Scheduler::ListWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerStatus> out;
  for (const auto& [id, w] : workers_) {
    WorkerStatus status;
    status.info = w->info;
    status.measured_seconds_per_pass = w->measured_seconds_per_pass;
    status.draining = w->draining;
    auto batch = batches_.find(w->batch_id);
    if (batch != batches_.end()) {
      const BatchRuntime& b = *batch->second;
      status.batch = BatchStatus{b.id,
                                 b.worker_id,
                                 b.model,
                                 b.mode,
                                 b.passes_done,
                                 b.seconds_per_pass,
                                 b.last_pass_seconds,
                                 b.sequences,
                                 static_cast<int64_t>(b.jobs.size())};
    }
    out.push_back(std::move(status));
  }
  return out;
}

StatusOr<Estimate> Scheduler::EstimateModel(const std::string& model, int64_t jobs,
                                            int64_t prompt_tokens, int64_t max_new_tokens) {
  if (jobs < 1 || prompt_tokens < 1 || max_new_tokens < 1) {
    return InvalidArgument("jobs, prompt tokens and max new tokens must be at least 1");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Estimate estimate;
  estimate.model = model;
  const int64_t kv_tokens = prompt_tokens + max_new_tokens;
  std::vector<EtaWorker> eta_workers;
  for (const auto& [id, w] : workers_) {
    const ModelOffer* offer = FindModel(w->info, model);
    if (offer == nullptr) continue;
    ModelEstimate e;
    e.worker_id = id;
    e.connected = w->info.connected;
    e.offer = *offer;
    e.seconds_per_pass = SecondsPerPass(*w, model);
    e.measured = w->measured_seconds_per_pass.count(model) != 0;
    e.jobs_per_batch = w->info.kv_budget_bytes / (offer->kv_bytes_per_token * kv_tokens);
    if (w->info.max_batch_jobs > 0) {
      e.jobs_per_batch = std::min<int64_t>(e.jobs_per_batch, w->info.max_batch_jobs);
    }
    estimate.workers.push_back(e);
    if (w->info.connected && !w->draining) {
      eta_workers.push_back({id, e.seconds_per_pass, w->info.kv_budget_bytes,
                             offer->kv_bytes_per_token, w->info.max_batch_jobs, BusySeconds(*w)});
    }
  }
  if (estimate.workers.empty()) return NotFound("no known worker serves " + model);
  NS_ASSIGN_OR_RETURN(std::vector<QueuedJob> queue, store_->QueuedJobs(model, options_.eta_window));
  estimate.queued_ahead = static_cast<int64_t>(queue.size());
  std::vector<EtaJob> eta_queue;
  for (const QueuedJob& q : queue) eta_queue.push_back({q.kv_tokens, q.passes});
  for (int64_t i = 0; i < jobs; ++i) eta_queue.push_back({kv_tokens, max_new_tokens});
  const auto finish = QueueFinishTimes(eta_workers, eta_queue);
  std::optional<double> worst = 0.0;
  for (size_t i = queue.size(); i < finish.size(); ++i) {
    if (!finish[i]) {
      worst.reset();
      break;
    }
    worst = std::max(*worst, *finish[i]);
  }
  estimate.seconds = worst;
  return estimate;
}

// ---------------------------------------------------------------- workers

Status Scheduler::CheckSession(const std::string& worker_id, int64_t session) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second->info.session != session || !it->second->info.connected) {
    return FailedPrecondition("worker " + worker_id + " session " + std::to_string(session) +
                              " is not current (a newer attach fenced it, or it detached)");
  }
  return Status::Ok();
}

StatusOr<int64_t> Scheduler::Attach(const WorkerHello& hello, WorkerLink* link) {
  const WorkerInfo& info = hello.info;
  if (info.id.empty()) return InvalidArgument("worker id is empty");
  if (info.kv_budget_bytes < 0) return InvalidArgument("KV budget is negative");
  std::set<std::string> names;
  for (const ModelOffer& m : info.models) {
    if (m.name.empty()) return InvalidArgument("a model has no name");
    if (!names.insert(m.name).second) return InvalidArgument("model " + m.name + " listed twice");
    if (m.kv_bytes_per_token <= 0) {
      return InvalidArgument("model " + m.name + ": KV bytes per token must be positive");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& runtime = workers_[info.id];
  if (runtime == nullptr) runtime = std::make_unique<WorkerRuntime>();
  if (runtime->link != nullptr) {
    runtime->link->Close(FailedPrecondition("superseded by a newer attach of worker " + info.id));
    runtime->link = nullptr;
    runtime->info.connected = false;
  }
  NS_ASSIGN_OR_RETURN(int64_t session, store_->AttachWorker(info));
  runtime->info = info;
  runtime->info.session = session;
  runtime->info.last_seen_at_ms = clock_->NowMs();
  runtime->draining = false;
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> ended,
                      store_->ExpireWorkerBatches(info.id, hello.running_batches));
  RecordLostLeases(ended);
  Forget(ended);
  Notify(ended);
  runtime->batch_id = 0;
  for (const auto& [batch_id, batch] : batches_) {
    if (batch->worker_id == info.id) runtime->batch_id = batch_id;
  }
  // Only now, when nothing can fail any more, does the scheduler hold the link.
  runtime->link = link;
  runtime->info.connected = true;
  WorkerCommand welcome;
  welcome.kind = WorkerCommand::Kind::kWelcome;
  welcome.session = session;
  welcome.lease_ms = options_.lease_ms;
  welcome.heartbeat_ms = options_.heartbeat_ms;
  std::set<std::string> missing;
  for (const ModelOffer& m : info.models) {
    if (m.tokenizer_hash.empty() || encoders_.count(m.tokenizer_hash) != 0) continue;
    auto stored = store_->GetTokenizer(m.tokenizer_hash);
    if (stored.status().code() == StatusCode::kNotFound) missing.insert(m.tokenizer_hash);
  }
  welcome.missing_tokenizers.assign(missing.begin(), missing.end());
  link->Send(std::move(welcome));
  for (const ModelOffer& m : info.models) {
    if (missing.count(m.tokenizer_hash) != 0) continue;
    Status status = ValidateWaiting(m.name);
    (void)status;  // a tokenizer that does not load fails nothing now; submits report it
  }
  ScheduleLocked(false);
  return session;
}

void Scheduler::Detach(const std::string& worker_id, int64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second->info.session != session) return;
  it->second->link = nullptr;
  it->second->info.connected = false;
  (void)store_->DetachWorker(worker_id, session);
}

Status Scheduler::UploadTokenizer(const std::string& worker_id, int64_t session,
                                  const TokenizerFiles& tokenizer) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  // Tokenizer files are JSON and Jinja text; the store keeps them as JSON.
  for (const auto& [name, contents] : tokenizer.files) {
    NS_RETURN_IF_ERROR(ValidateUtf8(contents).Prefixed("tokenizer file " + name));
  }
  const std::string hash = TokenizerHash(tokenizer);
  std::vector<std::string> models;
  for (const ModelOffer& m : workers_[worker_id]->info.models) {
    if (m.tokenizer_hash == hash) models.push_back(m.name);
  }
  if (models.empty()) {
    return InvalidArgument("tokenizer " + hash + " matches none of the models worker " + worker_id +
                           " advertised");
  }
  NS_RETURN_IF_ERROR(store_->PutTokenizer(tokenizer));
  for (const std::string& model : models) NS_RETURN_IF_ERROR(ValidateWaiting(model));
  ScheduleLocked(false);
  return Status::Ok();
}

Status Scheduler::Heartbeat(const std::string& worker_id, int64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  workers_[worker_id]->info.last_seen_at_ms = clock_->NowMs();
  return store_->ExtendLeases(worker_id, options_.lease_ms);
}

Status Scheduler::Progress(const std::string& worker_id, int64_t session,
                           const PassProgress& progress) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> started, store_->RecordProgress(worker_id, progress));
  NS_RETURN_IF_ERROR(store_->ExtendLeases(worker_id, options_.lease_ms));
  WorkerRuntime& worker = *workers_[worker_id];
  worker.info.last_seen_at_ms = clock_->NowMs();
  auto it = batches_.find(progress.batch_id);
  if (it == batches_.end())
    return Internal("batch " + std::to_string(progress.batch_id) + " has no runtime state");
  BatchRuntime& batch = *it->second;
  batch.passes_done = std::max(batch.passes_done, progress.pass_index + 1);
  batch.last_pass_seconds = progress.seconds;
  batch.seconds_per_pass = SmoothSecondsPerPass(batch.seconds_per_pass, progress.seconds);
  batch.sequences = progress.sequences;
  batch.mode = progress.mode;
  batch.free_kv_bytes = progress.free_kv_bytes;
  batch.wants_top_up = progress.want_top_up;
  for (const auto& [job_id, generated] : progress.generated) {
    auto job = batch.jobs.find(job_id);
    if (job != batch.jobs.end()) job->second.generated = generated;
  }
  double& measured = worker.measured_seconds_per_pass[batch.model];
  measured = SmoothSecondsPerPass(measured, progress.seconds);
  std::set<int64_t> submissions;
  for (const auto& [job_id, job] : batch.jobs) submissions.insert(job.submission_id);
  for (int64_t submission : submissions) {
    std::vector<JobChange> mine;
    for (const JobChange& c : started) {
      if (c.submission_id == submission) mine.push_back(c);
    }
    NotifySubmission(submission, std::move(mine));
  }
  if (progress.want_top_up) ScheduleLocked(false);
  return Status::Ok();
}

Status Scheduler::Result(const std::string& worker_id, int64_t session, JobResult result) {
  std::vector<JobResult> one;
  one.push_back(std::move(result));
  NS_ASSIGN_OR_RETURN(std::vector<Status> statuses, Results(worker_id, session, std::move(one)));
  return statuses[0];
}

StatusOr<std::vector<Status>> Scheduler::Results(const std::string& worker_id, int64_t session,
                                                 std::vector<JobResult> results) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  for (JobResult& result : results) result.worker_id = worker_id;
  NS_ASSIGN_OR_RETURN(std::vector<ResultOutcome> outcomes, store_->InsertResults(results));
  RecordRefused(worker_id, results, outcomes);
  std::vector<Status> statuses;
  std::vector<JobChange> changes;
  for (ResultOutcome& outcome : outcomes) {
    if (outcome.status.ok()) changes.push_back(outcome.change);
    statuses.push_back(std::move(outcome.status));
  }
  Forget(changes);
  Notify(changes);
  // Every outcome is final (stored, or refused for good), so the worker may
  // drop them all; on a store error nothing is acknowledged and it resends.
  WorkerCommand stored;
  stored.kind = WorkerCommand::Kind::kResultsStored;
  for (const JobResult& result : results) stored.job_ids.push_back(result.job_id);
  if (WorkerLink* link = workers_[worker_id]->link) link->Send(std::move(stored));
  if (workers_[worker_id]->batch_id == 0) ScheduleLocked(false);
  return statuses;
}

Status Scheduler::HandBack(const std::string& worker_id, int64_t session, int64_t batch_id,
                           const std::vector<int64_t>& job_ids, bool draining) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  if (draining) workers_[worker_id]->draining = true;
  // An idle worker announces its drain with an empty hand-back of batch 0.
  if (batch_id == 0 && job_ids.empty()) return Status::Ok();
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> changes,
                      store_->HandBack(worker_id, batch_id, job_ids));
  Forget(changes);
  Notify(changes);
  ScheduleLocked(false);
  return Status::Ok();
}

Status Scheduler::Withdraw(const std::string& worker_id, int64_t session, const std::string& model,
                           const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  (void)reason;  // the worker fails the batch's jobs itself, each with the reason
  auto& models = workers_[worker_id]->info.models;
  models.erase(std::remove_if(models.begin(), models.end(),
                              [&](const ModelOffer& m) { return m.name == model; }),
               models.end());
  return store_->WithdrawModel(worker_id, model);
}

void Scheduler::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  auto expired = store_->ExpireLeases();
  if (expired.ok()) {
    RecordLostLeases(*expired);
    Forget(*expired);
    Notify(*expired);
  }
  ScheduleLocked(true);
}

// ---------------------------------------------------------------- scheduling

std::vector<WorkerSlot> Scheduler::Slots() const {
  std::vector<WorkerSlot> slots;
  for (const auto& [id, w] : workers_) {
    WorkerSlot slot;
    slot.info = w->info;
    slot.info.connected = w->info.connected && !w->draining;
    auto batch = batches_.find(w->batch_id);
    if (batch != batches_.end()) {
      const BatchRuntime& b = *batch->second;
      slot.batch_id = b.id;
      slot.batch_model = b.model;
      slot.batch_jobs = static_cast<int32_t>(b.jobs.size());
      slot.wants_top_up = b.wants_top_up;
      slot.free_kv_bytes = b.free_kv_bytes;
    }
    slots.push_back(std::move(slot));
  }
  return slots;
}

void Scheduler::ScheduleLocked(bool all_models) {
  Snapshot snapshot;
  snapshot.workers = Slots();
  std::set<std::string> models;
  for (const WorkerSlot& slot : snapshot.workers) {
    const bool open = slot.info.connected && (slot.batch_id == 0 || slot.wants_top_up);
    if (!open && !all_models) continue;
    for (const ModelOffer& m : slot.info.models) {
      if (slot.batch_id == 0 || all_models || m.name == slot.batch_model) models.insert(m.name);
    }
  }
  for (const std::string& model : models) {
    auto queue = store_->QueuedJobs(model, options_.queue_window);
    if (!queue.ok()) return;
    snapshot.queue.insert(snapshot.queue.end(), queue->begin(), queue->end());
  }
  if (snapshot.queue.empty()) return;
  const Plan plan = Schedule(snapshot);
  std::map<std::string, std::vector<int64_t>> rejected;  // reason -> jobs
  for (const Rejection& r : plan.rejections) rejected[r.reason].push_back(r.job_id);
  for (const auto& [reason, ids] : rejected) {
    auto failed = store_->FailQueued(ids, reason);
    if (failed.ok()) Notify(*failed);
  }
  for (const Assignment& assignment : plan.assignments) ApplyAssignment(assignment);
}

void Scheduler::ApplyAssignment(const Assignment& assignment) {
  auto worker_it = workers_.find(assignment.worker_id);
  if (worker_it == workers_.end() || worker_it->second->link == nullptr) return;
  WorkerRuntime& worker = *worker_it->second;
  const bool top_up = assignment.batch_id != 0;
  auto lease = top_up ? store_->TopUp(assignment.batch_id, assignment.job_ids)
                      : store_->CreateBatch(assignment.worker_id, assignment.model,
                                            assignment.job_ids, options_.lease_ms);
  if (!lease.ok()) return;  // the jobs moved meanwhile (cancelled); the next round retries
  auto& batch = batches_[lease->batch_id];
  if (batch == nullptr) {
    batch = std::make_unique<BatchRuntime>();
    batch->id = lease->batch_id;
    batch->worker_id = worker.info.id;
    batch->model = assignment.model;
  }
  batch->wants_top_up = false;
  batch->free_kv_bytes = std::max<int64_t>(0, batch->free_kv_bytes - assignment.kv_bytes);
  worker.batch_id = lease->batch_id;
  std::vector<JobChange> changes;
  for (const Job& job : lease->jobs) {
    batch->jobs[job.id] = {job.submission_id, PassesNeeded(job.spec), 0, batch->passes_done};
    // Queue time ends at the first lease; a lease after a lost one or a
    // hand-back leaves first_leased_at_ms where it was.
    if (options_.metrics != nullptr && job.first_leased_at_ms == job.updated_at_ms) {
      options_.metrics->JobLeased(
          job.spec.model, static_cast<double>(job.first_leased_at_ms - job.created_at_ms) / 1e3);
    }
    changes.push_back({job.id, job.submission_id, JobState::kQueued, JobState::kLeased,
                       lease->batch_id, worker.info.id, ""});
  }
  WorkerCommand command;
  command.kind = WorkerCommand::Kind::kAssign;
  command.batch_id = lease->batch_id;
  command.model = assignment.model;
  command.lease_expires_at_ms = lease->expires_at_ms;
  command.top_up = top_up;
  command.jobs = std::move(lease->jobs);
  worker.link->Send(std::move(command));
  Notify(changes);
}

// Drops jobs that left their batch from the runtime state, and tells workers
// about their jobs that were cancelled.
void Scheduler::Forget(const std::vector<JobChange>& changes) {
  std::map<int64_t, std::vector<int64_t>> cancelled;  // batch -> jobs
  for (const JobChange& change : changes) {
    if (change.batch_id == 0) continue;
    if (change.to == JobState::kLeased || change.to == JobState::kRunning) continue;
    auto it = batches_.find(change.batch_id);
    if (it == batches_.end()) continue;
    it->second->jobs.erase(change.job_id);
    if (change.to == JobState::kCancelled) cancelled[change.batch_id].push_back(change.job_id);
  }
  for (const auto& [batch_id, job_ids] : cancelled) {
    auto worker = workers_.find(batches_[batch_id]->worker_id);
    if (worker == workers_.end() || worker->second->link == nullptr) continue;
    WorkerCommand command;
    command.kind = WorkerCommand::Kind::kCancel;
    command.batch_id = batch_id;
    command.job_ids = job_ids;
    command.reason = "cancelled by a client";
    worker->second->link->Send(std::move(command));
  }
  for (auto it = batches_.begin(); it != batches_.end();) {
    if (!it->second->jobs.empty()) {
      ++it;
      continue;
    }
    auto worker = workers_.find(it->second->worker_id);
    if (worker != workers_.end() && worker->second->batch_id == it->first) {
      worker->second->batch_id = 0;
    }
    it = batches_.erase(it);
  }
}

// ---------------------------------------------------------------- watchers and ETA

void Scheduler::Notify(const std::vector<JobChange>& changes) {
  RecordFinished(changes);
  std::map<int64_t, std::vector<JobChange>> by_submission;
  for (const JobChange& change : changes) by_submission[change.submission_id].push_back(change);
  for (auto& [submission, mine] : by_submission) NotifySubmission(submission, std::move(mine));
}

void Scheduler::NotifySubmission(int64_t submission_id, std::vector<JobChange> changes) {
  std::vector<WatchState*> watches;
  for (auto& [id, watch] : watches_) {
    if (watch->submission_id == submission_id) watches.push_back(watch.get());
  }
  if (watches.empty()) return;
  auto status = StatusLocked(submission_id);
  if (!status.ok()) return;
  const int64_t now = clock_->NowMs();
  for (WatchState* watch : watches) {
    // A known ETA is recomputed at most once a second (it plays the whole
    // queue out) and counted down in between; an unknown one is retried.
    if (status->submission.done() || !watch->eta || now - watch->eta_at_ms >= kEtaRefreshMs) {
      watch->eta = EtaLocked(submission_id, *status);
      watch->eta_at_ms = now;
    }
    SubmissionUpdate update{*status, changes};
    if (watch->eta) {  // counted down since it was computed
      const double elapsed = static_cast<double>(now - watch->eta_at_ms) / 1000.0;
      update.status.eta_seconds = std::max(0.0, *watch->eta - elapsed);
    }
    watch->watcher->OnUpdate(update);
  }
}

double Scheduler::SecondsPerPass(const WorkerRuntime& worker, const std::string& model) const {
  auto measured = worker.measured_seconds_per_pass.find(model);
  if (measured != worker.measured_seconds_per_pass.end() && measured->second > 0) {
    return measured->second;
  }
  const ModelOffer* offer = FindModel(worker.info, model);
  if (offer == nullptr) return 0;
  if (offer->seconds_per_pass > 0) return offer->seconds_per_pass;
  // The worker sent no figure: the planner's arithmetic on what it did send.
  auto planned = planner::SecondsPerPass(static_cast<double>(offer->checkpoint_bytes) / 1e9,
                                         worker.info.read_bytes_per_second / 1e9,
                                         /*prefetching=*/true);
  return planned.value_or(0);
}

double Scheduler::BusySeconds(const WorkerRuntime& worker) const {
  auto it = batches_.find(worker.batch_id);
  if (it == batches_.end()) return 0;
  const BatchRuntime& batch = *it->second;
  const double spp =
      batch.seconds_per_pass > 0 ? batch.seconds_per_pass : SecondsPerPass(worker, batch.model);
  int64_t longest = 0;
  for (const auto& [id, job] : batch.jobs) longest = std::max(longest, batch.PassesLeft(job));
  return static_cast<double>(longest) * spp;
}

std::optional<double> Scheduler::EtaLocked(int64_t submission_id, const SubmissionStatus& status) {
  if (status.submission.done()) return 0.0;
  if (status.waiting_for_tokenizer > 0 || !status.submission.sealed) return std::nullopt;
  double worst = 0;
  // Jobs in batches: their passes left at their batch's pace.
  for (const auto& [batch_id, batch] : batches_) {
    const double spp = BatchSecondsPerPass(*batch);
    for (const auto& [job_id, job] : batch->jobs) {
      if (job.submission_id != submission_id) continue;
      auto seconds = RunningJobSeconds(batch->PassesLeft(job), spp);
      if (!seconds) return std::nullopt;
      worst = std::max(worst, *seconds);
    }
  }
  // Queued jobs: the queue of each of their models played out over its workers.
  const int64_t queued = status.submission.counts.queued - status.waiting_for_tokenizer;
  if (queued == 0) return worst;
  auto models = store_->QueuedModelsOf(submission_id);
  if (!models.ok()) return std::nullopt;
  int64_t seen = 0;
  for (const std::string& model : *models) {
    auto queue = store_->QueuedJobs(model, options_.eta_window);
    if (!queue.ok()) return std::nullopt;
    std::vector<EtaJob> eta_queue;
    for (const QueuedJob& q : *queue) eta_queue.push_back({q.kv_tokens, q.passes});
    const auto finish = QueueFinishTimes(EtaWorkersLocked(model), eta_queue);
    for (size_t i = 0; i < queue->size(); ++i) {
      if ((*queue)[i].submission_id != submission_id) continue;
      ++seen;
      if (!finish[i]) return std::nullopt;
      worst = std::max(worst, *finish[i]);
    }
  }
  if (seen < queued) return std::nullopt;  // some are beyond the window played out
  return worst;
}

std::vector<EtaWorker> Scheduler::EtaWorkersLocked(const std::string& model) const {
  std::vector<EtaWorker> eta_workers;
  for (const auto& [id, w] : workers_) {
    const ModelOffer* offer = FindModel(w->info, model);
    if (offer == nullptr || !w->info.connected || w->draining) continue;
    eta_workers.push_back({id, SecondsPerPass(*w, model), w->info.kv_budget_bytes,
                           offer->kv_bytes_per_token, w->info.max_batch_jobs, BusySeconds(*w)});
  }
  return eta_workers;
}

double Scheduler::BatchSecondsPerPass(const BatchRuntime& batch) const {
  if (batch.seconds_per_pass > 0) return batch.seconds_per_pass;
  auto worker = workers_.find(batch.worker_id);
  return worker != workers_.end() ? SecondsPerPass(*worker->second, batch.model) : 0;
}

// The latest finish time among the model's jobs in batches and in the queue.
std::optional<double> Scheduler::ModelEtaLocked(const std::string& model) {
  bool any = false;
  double worst = 0;
  for (const auto& [batch_id, batch] : batches_) {
    if (batch->model != model) continue;
    const double spp = BatchSecondsPerPass(*batch);
    for (const auto& [job_id, job] : batch->jobs) {
      auto seconds = RunningJobSeconds(batch->PassesLeft(job), spp);
      if (!seconds) return std::nullopt;
      worst = std::max(worst, *seconds);
      any = true;
    }
  }
  auto queue = store_->QueuedJobs(model, options_.eta_window);
  if (!queue.ok() || static_cast<int64_t>(queue->size()) >= options_.eta_window) {
    return std::nullopt;  // unreadable, or longer than the window played out
  }
  std::vector<EtaJob> eta_queue;
  for (const QueuedJob& q : *queue) eta_queue.push_back({q.kv_tokens, q.passes});
  for (const std::optional<double>& finish : QueueFinishTimes(EtaWorkersLocked(model), eta_queue)) {
    if (!finish) return std::nullopt;
    worst = std::max(worst, *finish);
    any = true;
  }
  if (!any) return std::nullopt;
  return worst;
}

LiveGauges Scheduler::Gauges() {
  std::lock_guard<std::mutex> lock(mu_);
  LiveGauges gauges;
  std::set<std::string> models;
  for (const auto& [id, w] : workers_) {
    if (w->info.connected) ++gauges.workers_attached;
    for (const ModelOffer& m : w->info.models) models.insert(m.name);
  }
  for (const auto& [id, batch] : batches_) models.insert(batch->model);
  for (const std::string& model : models) {
    if (auto eta = ModelEtaLocked(model)) gauges.eta_seconds[model] = *eta;
  }
  return gauges;
}

// ---------------------------------------------------------------- metrics

void Scheduler::RecordFinished(const std::vector<JobChange>& changes) {
  if (options_.metrics == nullptr) return;
  for (const JobChange& change : changes) {
    if (!IsTerminal(change.to)) continue;
    auto job = store_->GetJob(change.job_id);  // the model and when it was submitted
    if (!job.ok()) continue;
    options_.metrics->JobFinished(
        job->spec.model, change.to,
        static_cast<double>(job->updated_at_ms - job->created_at_ms) / 1e3);
  }
}

void Scheduler::RecordLostLeases(const std::vector<JobChange>& changes) {
  if (options_.metrics == nullptr) return;
  std::set<int64_t> batches;
  for (const JobChange& change : changes) {
    auto batch = batches_.find(change.batch_id);
    if (batch == batches_.end()) continue;
    if (batches.insert(change.batch_id).second) {
      options_.metrics->LeaseExpired(batch->second->model, batch->second->worker_id);
    }
    if (change.to == JobState::kQueued) options_.metrics->JobRetried(batch->second->model);
  }
}

void Scheduler::RecordRefused(const std::string& worker_id, const std::vector<JobResult>& results,
                              const std::vector<ResultOutcome>& outcomes) {
  if (options_.metrics == nullptr) return;
  for (size_t i = 0; i < outcomes.size() && i < results.size(); ++i) {
    const StatusCode code = outcomes[i].status.code();
    if (code != StatusCode::kAlreadyExists && code != StatusCode::kFailedPrecondition) continue;
    auto job = store_->GetJob(results[i].job_id);
    if (job.ok()) options_.metrics->ResultRefused(job->spec.model, worker_id);
  }
}

}  // namespace nightshift::scheduler
