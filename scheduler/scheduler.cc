#include "scheduler/scheduler.h"

#include <algorithm>
#include <limits>

#include "common/utf8.h"
#include "planner/model_facts.h"
#include "scheduler/eta.h"
#include "scheduler/live_eta.h"

namespace nightshift::scheduler {

namespace {

constexpr int kTokeniseChunk = 500;

// Jobs of `prompt_tokens` tokens holding `reserved_kv_tokens` positions
// across passes that one batch on `worker` takes at once: as many as its KV
// budget holds, or, for jobs that end in their first pass (no KV reserved),
// as many as one pass's token budget feeds (at least one).
int64_t JobsPerBatch(const WorkerInfo& worker, const ModelOffer& offer, int64_t reserved_kv_tokens,
                     int64_t prompt_tokens) {
  if (reserved_kv_tokens > 0 || offer.pass_token_budget <= 0) {
    const int64_t positions = reserved_kv_tokens > 0 ? reserved_kv_tokens : prompt_tokens;
    return worker.kv_budget_bytes / (offer.kv_bytes_per_token * positions);
  }
  return std::max<int64_t>(1, offer.pass_token_budget / prompt_tokens);
}

std::string WaitingReason(const std::string& model) {
  return "waiting for a worker that serves " + model;
}

}  // namespace

Scheduler::Scheduler(Store* store, Clock* clock, SchedulerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      tokenizers_(store, options_.tokenizer_cache_dir),
      events_(store, options_.metrics) {}

Scheduler::~Scheduler() = default;

Status Scheduler::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  NS_ASSIGN_OR_RETURN(std::vector<WorkerInfo> workers, store_->ListWorkers());
  for (WorkerInfo& info : workers) {
    if (info.connected) NS_RETURN_IF_ERROR(store_->DetachWorker(info.id, info.session));
    info.connected = false;
    fleet_.Worker(info.id).info = std::move(info);
  }
  NS_ASSIGN_OR_RETURN(std::vector<Lease> leases, store_->ActiveBatches());
  for (const Lease& lease : leases) {
    LiveBatch& batch = fleet_.Batch(lease.batch_id, lease.worker_id, lease.model);
    for (const Job& job : lease.jobs) batch.jobs[job.id] = ProgressOf(job, 0);
    batch.pass_started_ms = clock_->NowMs();
    if (LiveWorker* worker = fleet_.FindWorker(lease.worker_id)) worker->batch_id = lease.batch_id;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- tokenisers

StatusOr<std::shared_ptr<const PromptEncoder>> Scheduler::EncoderFor(const std::string& model) {
  for (const LiveWorker* w : fleet_.ServersOf(model)) {
    const std::string& hash = FindModel(w->info, model)->tokenizer_hash;  // "" = no tokenizer
    auto encoder = tokenizers_.Get(hash);
    if (encoder.status().code() == StatusCode::kNotFound) continue;  // not uploaded yet
    if (!encoder.ok()) return encoder.status().Prefixed("the tokenizer of " + model);
    return encoder;
  }
  return NotFound(WaitingReason(model));
}

// Tokenises queued jobs of `model` that waited for its tokenizer; the ones
// that turn out invalid fail with the reason.
Status Scheduler::ValidateWaiting(const std::string& model) {
  auto encoder = EncoderFor(model);
  if (!encoder.ok())
    return encoder.status().code() == StatusCode::kNotFound ? Status::Ok() : encoder.status();
  const int64_t context = fleet_.MaxContext(model);
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
  events_.Finished(failures);
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

Scheduler::Encoded Scheduler::EncodeJobs(const std::vector<JobSpec>& jobs,
                                         const std::vector<bool>& skip) {
  // Tokenisers and contexts are looked up under the lock; encoding runs outside it.
  std::map<std::string, std::shared_ptr<const PromptEncoder>> encoders;
  std::map<std::string, Status> encoder_errors;
  std::map<std::string, int64_t> contexts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const JobSpec& spec : jobs) {
      if (encoders.count(spec.model) != 0 || encoder_errors.count(spec.model) != 0) continue;
      auto encoder = EncoderFor(spec.model);
      if (encoder.ok()) {
        encoders[spec.model] = *encoder;
      } else {
        encoder_errors[spec.model] = encoder.status();
      }
      contexts[spec.model] = fleet_.MaxContext(spec.model);
    }
  }
  Encoded encoded;
  encoded.tokens.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (i < skip.size() && skip[i]) continue;
    const JobSpec& spec = jobs[i];
    Status status;
    auto encoder = encoders.find(spec.model);
    if (encoder != encoders.end()) {
      auto tokens = encoder->second->Encode(spec);
      status = tokens.ok() ? CheckContext(spec, *tokens, contexts[spec.model]) : tokens.status();
      if (status.ok()) encoded.tokens[i] = std::move(tokens).value();
    } else if (encoder_errors[spec.model].code() != StatusCode::kNotFound) {
      status = encoder_errors[spec.model];
    }  // else it waits for a worker that serves its model
    if (!status.ok()) encoded.problems.push_back({i, status.message()});
  }
  return encoded;
}

Scheduler::Encoded Scheduler::CheckAndEncode(std::vector<JobSpec>& jobs,
                                             const std::vector<std::string>& decode_problems) {
  std::optional<std::set<std::string>> known;
  if (!options_.allow_unknown_models) known = KnownModels();
  std::vector<JobProblem> problems =
      FindJobProblems(jobs, options_.limits, decode_problems, known ? &*known : nullptr);
  std::vector<bool> skip(jobs.size(), false);
  for (const JobProblem& p : problems) skip[p.index] = true;
  Encoded encoded = EncodeJobs(jobs, skip);
  problems.insert(problems.end(), encoded.problems.begin(), encoded.problems.end());
  std::stable_sort(problems.begin(), problems.end(),
                   [](const JobProblem& a, const JobProblem& b) { return a.index < b.index; });
  encoded.problems = std::move(problems);
  return encoded;
}

std::vector<JobProblem> Scheduler::CheckJobs(std::vector<JobSpec>& jobs,
                                             const std::vector<std::string>& decode_problems) {
  return CheckAndEncode(jobs, decode_problems).problems;
}

StatusOr<std::vector<JobProblem>> Scheduler::CheckRequest(SubmitRequest request) {
  NS_RETURN_IF_ERROR(CheckRequestSize(request.jobs.size(), request.request_bytes, options_.limits));
  return CheckJobs(request.jobs, request.decode_problems);
}

StatusOr<SubmitReply> Scheduler::Submit(SubmitRequest request) {
  NS_RETURN_IF_ERROR(CheckRequestSize(request.jobs.size(), request.request_bytes, options_.limits));
  Encoded encoded = CheckAndEncode(request.jobs, request.decode_problems);
  if (!encoded.problems.empty()) return InvalidArgument(FormatJobProblems(encoded.problems));
  SubmitChunk chunk;
  chunk.submission_id = request.submission_id;
  chunk.keep_open = request.keep_open;
  chunk.idempotency_key = request.idempotency_key;
  SubmitReply reply;
  for (size_t i = 0; i < request.jobs.size(); ++i) {
    NewJob job{std::move(request.jobs[i]), std::move(encoded.tokens[i]), "", options_.max_attempts};
    if (!job.tokens) {
      job.reason = WaitingReason(job.spec.model);
      ++reply.waiting_for_tokenizer;
    }
    chunk.jobs.push_back(std::move(job));
  }
  NS_ASSIGN_OR_RETURN(SubmitOutcome outcome, store_->Submit(chunk));
  reply.submission_id = outcome.submission_id;
  reply.job_ids = std::move(outcome.job_ids);
  reply.replayed = outcome.replayed;
  if (reply.replayed) reply.waiting_for_tokenizer = 0;
  if (!reply.replayed) events_.Submitted(chunk.jobs);
  std::lock_guard<std::mutex> lock(mu_);
  NotifySubmission(reply.submission_id, {});
  ScheduleLocked(false);
  return reply;
}

std::set<std::string> Scheduler::KnownModels() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> models;
  for (const auto& [id, w] : fleet_.workers()) {
    for (const ModelOffer& m : w->info.models) models.insert(m.name);
  }
  return models;
}

StatusOr<SubmissionStatus> Scheduler::StatusLocked(int64_t id) {
  SubmissionStatus status;
  NS_ASSIGN_OR_RETURN(status.submission, store_->GetSubmission(id));
  NS_ASSIGN_OR_RETURN(status.waiting_for_tokenizer, store_->CountUntokenised(id));
  for (const auto& [batch_id, batch] : fleet_.batches()) {
    int64_t mine = 0;
    for (const auto& [job_id, job] : batch->jobs) mine += job.submission_id == id ? 1 : 0;
    if (mine > 0) status.batches.push_back(fleet_.View(*batch, mine));
  }
  return status;
}

StatusOr<SubmissionStatus> Scheduler::GetSubmission(int64_t id, bool with_prompt_tokens) {
  SubmissionStatus status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    NS_ASSIGN_OR_RETURN(status, StatusLocked(id));
    status.eta_seconds = EtaLocked(status);
  }
  if (with_prompt_tokens) {
    NS_ASSIGN_OR_RETURN(status.prompt_tokens, store_->SumPromptTokens(id));
  }
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

StatusOr<SubmissionStatus> Scheduler::CancelSubmission(int64_t id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> changes, store_->CancelSubmission(id, reason));
  Forget(changes);
  Notify(changes);
  ScheduleLocked(false);
  NS_ASSIGN_OR_RETURN(SubmissionStatus status, StatusLocked(id));
  status.eta_seconds = EtaLocked(status);
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
  status.eta_seconds = EtaLocked(status);
  const int64_t id = watchers_.Add(submission_id, watcher, status.eta_seconds, clock_->NowMs());
  watcher->OnUpdate({std::move(status), {}});
  return id;
}

void Scheduler::Unwatch(int64_t watch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.Remove(watch_id);
}

StatusOr<std::vector<WorkerStatus>> Scheduler::ListWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerStatus> out;
  for (const auto& [id, w] : fleet_.workers()) {
    WorkerStatus status;
    status.info = w->info;
    for (const auto& [model, passes] : w->pass_times) {
      if (fleet_.Measured(*w, model))
        status.measured_seconds_per_pass[model] = passes.MedianSeconds();
    }
    status.draining = w->draining;
    if (const LiveBatch* b = fleet_.FindBatch(w->batch_id)) {
      status.batch = fleet_.View(*b, static_cast<int64_t>(b->jobs.size()));
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
  const int64_t kv_tokens = planner::ReservedKvPositions(prompt_tokens, max_new_tokens, {});
  for (const auto& [id, w] : fleet_.workers()) {
    const ModelOffer* offer = FindModel(w->info, model);
    if (offer == nullptr) continue;
    ModelEstimate e;
    e.worker_id = id;
    e.connected = w->info.connected;
    e.offer = *offer;
    e.seconds_per_pass = fleet_.SecondsPerPass(*w, model);
    e.measured = fleet_.Measured(*w, model);
    e.jobs_per_batch = JobsPerBatch(w->info, *offer, kv_tokens, prompt_tokens);
    if (w->info.max_batch_jobs > 0) {
      e.jobs_per_batch = std::min<int64_t>(e.jobs_per_batch, w->info.max_batch_jobs);
    }
    estimate.workers.push_back(e);
  }
  if (estimate.workers.empty()) return NotFound("no known worker serves " + model);
  NS_ASSIGN_OR_RETURN(EtaSnapshot snapshot,
                      ModelSnapshot(fleet_, *store_, model, EtaContextLocked()));
  estimate.queued_ahead = static_cast<int64_t>(snapshot.queue.size());
  // The asked jobs, as a submission behind every queued one.
  constexpr int64_t kAsked = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < jobs; ++i) {
    QueuedJob q;
    q.id = kAsked - jobs + i;
    q.submission_id = kAsked;
    q.model = model;
    q.priority = std::numeric_limits<int32_t>::min();
    q.kv_tokens = planner::KvPositions(prompt_tokens, max_new_tokens, {});
    q.passes = std::max<int64_t>(1, max_new_tokens);
    snapshot.queue.push_back(std::move(q));
  }
  const EtaForecast forecast = Forecast(snapshot);
  auto asked = forecast.submissions.find(kAsked);
  if (asked != forecast.submissions.end()) estimate.seconds = asked->second;
  return estimate;
}

// ---------------------------------------------------------------- workers

Status Scheduler::CheckSession(const std::string& worker_id, int64_t session) {
  const LiveWorker* worker = fleet_.FindWorker(worker_id);
  if (worker == nullptr || worker->info.session != session || !worker->info.connected) {
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
  LiveWorker& worker = fleet_.Worker(info.id);
  if (worker.link != nullptr) {
    worker.link->Close(FailedPrecondition("superseded by a newer attach of worker " + info.id));
    worker.link = nullptr;
    worker.info.connected = false;
  }
  NS_ASSIGN_OR_RETURN(int64_t session, store_->AttachWorker(info));
  worker.info = info;
  worker.info.session = session;
  worker.info.last_seen_at_ms = clock_->NowMs();
  worker.draining = false;
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> ended,
                      store_->ExpireWorkerBatches(info.id, hello.running_batches));
  events_.LostLeases(ended, fleet_);
  Forget(ended);
  Notify(ended);
  worker.batch_id = 0;
  for (const auto& [batch_id, batch] : fleet_.batches()) {
    if (batch->worker_id == info.id) worker.batch_id = batch_id;
  }
  // Only now, when nothing can fail any more, does the scheduler hold the link.
  worker.link = link;
  worker.info.connected = true;
  forecasts_.Clear();  // none of them counted this worker
  WorkerCommand welcome;
  welcome.kind = WorkerCommand::Kind::kWelcome;
  welcome.session = session;
  welcome.lease_ms = options_.lease_ms;
  welcome.heartbeat_ms = options_.heartbeat_ms;
  std::set<std::string> missing;
  for (const ModelOffer& m : info.models) {
    if (m.tokenizer_hash.empty() || tokenizers_.Loaded(m.tokenizer_hash)) continue;
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
  LiveWorker* worker = fleet_.FindWorker(worker_id);
  if (worker == nullptr || worker->info.session != session) return;
  worker->link = nullptr;
  worker->info.connected = false;
  forecasts_.Clear();  // they counted this worker
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
  for (const ModelOffer& m : fleet_.Worker(worker_id).info.models) {
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
  return HeardFrom(worker_id);
}

Status Scheduler::HeardFrom(const std::string& worker_id) {
  LiveWorker& worker = fleet_.Worker(worker_id);
  const int64_t now = clock_->NowMs();
  worker.info.last_seen_at_ms = now;
  // A worker in millisecond passes reports a thousand times a second; a
  // commit each time would be most of the scheduler's work. Extended at most
  // every tenth of a lease, a lease never has under 90% of its length left.
  if (now - worker.leases_extended_at_ms < options_.lease_ms / 10) return Status::Ok();
  NS_RETURN_IF_ERROR(store_->ExtendLeases(worker_id, options_.lease_ms));
  worker.leases_extended_at_ms = now;
  return Status::Ok();
}

Status Scheduler::Progress(const std::string& worker_id, int64_t session,
                           const PassProgress& progress) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> started, store_->RecordProgress(worker_id, progress));
  NS_RETURN_IF_ERROR(HeardFrom(worker_id));
  LiveWorker& worker = fleet_.Worker(worker_id);
  LiveBatch* found = fleet_.FindBatch(progress.batch_id);
  if (found == nullptr) {
    // The pass that ended the batch: its results came first.
    if (worker.ended_batch_id == progress.batch_id)
      worker.pass_times[worker.ended_batch_model].Add(progress.seconds, progress.tokens);
    return Status::Ok();
  }
  LiveBatch& batch = *found;
  // Top-ups leased since the last report reached the worker during this pass
  // and join at its next boundary: the room it reports does not count them yet.
  int64_t pending_kv_tokens = 0, pending_pass_tokens = 0;
  for (const auto& [job_id, job] : batch.jobs) {
    if (!batch.JoinsNextBoundary(job) || progress.generated.count(job_id) != 0) continue;
    pending_kv_tokens += job.kv_tokens;
    pending_pass_tokens += job.pass_tokens;
  }
  const ModelOffer* offer = FindModel(worker.info, batch.model);
  const int64_t kv_bytes_per_token = offer != nullptr ? offer->kv_bytes_per_token : 0;
  batch.passes_done = std::max(batch.passes_done, progress.pass_index + 1);
  batch.last_pass_seconds = progress.seconds;
  batch.seconds_per_pass = SmoothSecondsPerPass(batch.seconds_per_pass, progress.seconds);
  batch.sequences = progress.sequences;
  batch.mode = progress.mode;
  batch.free_kv_bytes =
      std::max<int64_t>(0, progress.free_kv_bytes - pending_kv_tokens * kv_bytes_per_token);
  batch.free_pass_tokens = std::max<int64_t>(0, progress.free_pass_tokens - pending_pass_tokens);
  batch.kept_prefixes = progress.kept_prefixes;
  batch.wants_top_up =
      progress.want_top_up && (batch.free_kv_bytes > 0 || batch.free_pass_tokens > 0);
  batch.pass_started_ms = clock_->NowMs();  // the worker starts its next pass at once
  for (const auto& [job_id, generated] : progress.generated) {
    auto job = batch.jobs.find(job_id);
    if (job == batch.jobs.end()) continue;
    job->second.generated = generated;
    job->second.reported = true;
  }
  worker.pass_times[batch.model].Add(progress.seconds, progress.tokens);
  std::set<int64_t> submissions;
  for (const auto& [job_id, job] : batch.jobs) submissions.insert(job.submission_id);
  for (int64_t submission : submissions) {
    std::vector<JobChange> mine;
    for (const JobChange& c : started) {
      if (c.submission_id == submission) mine.push_back(c);
    }
    NotifySubmission(submission, std::move(mine));
  }
  if (batch.wants_top_up) ScheduleLocked(false);
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
  // Only results the store took count toward the ETA: results it could not
  // store (a full disk) come again.
  for (const JobResult& result : results) {
    LiveBatch* batch = fleet_.FindBatch(result.batch_id);
    if (batch == nullptr) continue;
    auto job = batch->jobs.find(result.job_id);
    if (job != batch->jobs.end())
      eta_tracker_.JobFinished(job->second.submission_id, job->second.passes_needed, result);
  }
  events_.Refused(worker_id, results, outcomes);
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
  LiveWorker& worker = fleet_.Worker(worker_id);
  if (worker.link != nullptr) worker.link->Send(std::move(stored));
  if (worker.batch_id == 0) ScheduleLocked(false);
  return statuses;
}

Status Scheduler::HandBack(const std::string& worker_id, int64_t session, int64_t batch_id,
                           const std::vector<int64_t>& job_ids, bool draining,
                           const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  if (draining && !fleet_.Worker(worker_id).draining) {
    fleet_.Worker(worker_id).draining = true;
    forecasts_.Clear();  // they counted on it taking more work
  }
  // An idle worker announces its drain with an empty hand-back of batch 0.
  if (batch_id == 0 && job_ids.empty()) return Status::Ok();
  NS_ASSIGN_OR_RETURN(std::vector<JobChange> changes,
                      store_->HandBack(worker_id, batch_id, job_ids, error));
  if (!error.empty()) events_.Retried(changes, fleet_);
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
  auto& models = fleet_.Worker(worker_id).info.models;
  models.erase(std::remove_if(models.begin(), models.end(),
                              [&](const ModelOffer& m) { return m.name == model; }),
               models.end());
  return store_->WithdrawModel(worker_id, model);
}

Status Scheduler::ModelHealth(const std::string& worker_id, int64_t session,
                              const std::string& model, const std::string& unhealthy) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(CheckSession(worker_id, session));
  for (ModelOffer& offer : fleet_.Worker(worker_id).info.models) {
    if (offer.name != model) continue;
    offer.unhealthy = unhealthy;
    if (unhealthy.empty()) ScheduleLocked(false);  // its queue may wait for it
    return Status::Ok();
  }
  return NotFound("worker " + worker_id + " does not offer model " + model);
}

void Scheduler::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  auto expired = store_->ExpireLeases();
  if (expired.ok()) {
    events_.LostLeases(*expired, fleet_);
    Forget(*expired);
    Notify(*expired);
  }
  ScheduleLocked(true);
}

// ---------------------------------------------------------------- scheduling

void Scheduler::ScheduleLocked(bool all_models) {
  Snapshot snapshot;
  snapshot.workers = fleet_.Slots();
  std::set<std::string> models;
  for (const WorkerSlot& slot : snapshot.workers) {
    if (!TakesJobs(slot) && !all_models) continue;
    for (const ModelOffer& m : slot.info.models) {
      if (slot.batch_id == 0 || all_models || m.name == slot.batch_model) models.insert(m.name);
    }
  }
  for (const std::string& model : models) {
    auto queue = store_->QueuedJobs(model, options_.queue_window, options_.queue_window);
    if (!queue.ok()) return;
    snapshot.queue.insert(snapshot.queue.end(), queue->begin(), queue->end());
  }
  if (snapshot.queue.empty()) return;
  snapshot.min_shared_prefix_tokens = options_.min_shared_prefix_tokens;
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
  LiveWorker* found = fleet_.FindWorker(assignment.worker_id);
  if (found == nullptr || found->link == nullptr) return;
  LiveWorker& worker = *found;
  const bool top_up = assignment.batch_id != 0;
  auto lease = top_up ? store_->TopUp(assignment.batch_id, assignment.job_ids)
                      : store_->CreateBatch(assignment.worker_id, assignment.model,
                                            assignment.job_ids, options_.lease_ms);
  if (!lease.ok()) return;  // the jobs moved meanwhile (cancelled); the next round retries
  LiveBatch& batch = fleet_.Batch(lease->batch_id, worker.info.id, assignment.model);
  if (!top_up) batch.pass_started_ms = clock_->NowMs();
  batch.wants_top_up = false;
  batch.free_kv_bytes = std::max<int64_t>(0, batch.free_kv_bytes - assignment.kv_bytes);
  batch.free_pass_tokens = std::max<int64_t>(0, batch.free_pass_tokens - assignment.pass_tokens);
  worker.batch_id = lease->batch_id;
  std::map<int64_t, int64_t> pass_tokens;  // by job: what it adds to its first pass
  for (size_t i = 0; i < assignment.job_ids.size(); ++i) {
    pass_tokens[assignment.job_ids[i]] = assignment.job_pass_tokens.at(i);
  }
  std::vector<JobChange> changes;
  for (const Job& job : lease->jobs) {
    LiveBatch::JobProgress& progress = batch.jobs[job.id] = ProgressOf(job, batch.passes_done);
    if (auto it = pass_tokens.find(job.id); it != pass_tokens.end()) {
      progress.pass_tokens = it->second;  // its shared prefix is computed once
    }
    events_.Leased(job);
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

void Scheduler::Forget(const std::vector<JobChange>& changes) {
  for (const auto& [batch_id, cancelled] : fleet_.Forget(changes)) {
    LiveWorker* worker = fleet_.FindWorker(cancelled.worker_id);
    if (worker == nullptr || worker->link == nullptr) continue;
    WorkerCommand command;
    command.kind = WorkerCommand::Kind::kCancel;
    command.batch_id = batch_id;
    command.job_ids = cancelled.job_ids;
    command.reason = "cancelled by a client";
    worker->link->Send(std::move(command));
  }
}

// ---------------------------------------------------------------- watchers and ETA

void Scheduler::Notify(const std::vector<JobChange>& changes) {
  events_.Finished(changes);
  std::map<int64_t, std::vector<JobChange>> by_submission;
  std::set<int64_t> finishing;
  for (const JobChange& change : changes) {
    by_submission[change.submission_id].push_back(change);
    if (IsTerminal(change.to)) finishing.insert(change.submission_id);
  }
  for (int64_t submission : finishing) TrackEta(submission);
  for (auto& [submission, mine] : by_submission) NotifySubmission(submission, std::move(mine));
}

void Scheduler::TrackEta(int64_t submission_id) {
  auto status = StatusLocked(submission_id);
  if (!status.ok()) return;
  const Submission& s = status->submission;
  const int64_t now_ms = clock_->NowMs();
  eta_tracker_.Progress(s.id, s.counts.total() - s.counts.unfinished(), s.counts.total(), now_ms,
                        [&] { return EtaLocked(*status); });
  if (s.done()) events_.EtaErrors(eta_tracker_.Ended(s.id, now_ms));
}

void Scheduler::NotifySubmission(int64_t submission_id, std::vector<JobChange> changes) {
  if (!watchers_.Watched(submission_id)) return;
  auto status = StatusLocked(submission_id);
  if (!status.ok()) return;
  watchers_.Notify(*status, changes, clock_->NowMs(), [&] { return EtaLocked(*status); });
}

EtaContext Scheduler::EtaContextLocked() {
  return {clock_->NowMs(), options_.eta_window, &eta_tracker_.stops(), options_.queue_window,
          options_.min_shared_prefix_tokens};
}

std::optional<double> Scheduler::EtaLocked(const SubmissionStatus& status) {
  const std::string key = "submission " + std::to_string(status.submission.id);
  if (status.submission.done()) {
    forecasts_.Forget(key);
    return 0.0;
  }
  return forecasts_.Get(key, clock_->NowMs(), [&] {
    return SubmissionEta(fleet_, *store_, status.submission, status.waiting_for_tokenizer,
                         EtaContextLocked());
  });
}

LiveGauges Scheduler::Gauges() {
  std::lock_guard<std::mutex> lock(mu_);
  LiveGauges gauges;
  std::set<std::string> models;
  for (const auto& [id, w] : fleet_.workers()) {
    if (w->info.connected) ++gauges.workers_attached;
    for (const ModelOffer& m : w->info.models) models.insert(m.name);
  }
  for (const auto& [id, batch] : fleet_.batches()) models.insert(batch->model);
  for (const std::string& model : models) {
    auto eta = forecasts_.Get("model " + model, clock_->NowMs(),
                              [&] { return ModelEta(fleet_, *store_, model, EtaContextLocked()); });
    if (eta) {
      gauges.eta_seconds[model] = *eta;
    }
  }
  return gauges;
}

}  // namespace nightshift::scheduler
