#include "scheduler/live_eta.h"

#include <algorithm>
#include <set>
#include <vector>

namespace nightshift::scheduler {

StatusOr<EtaSnapshot> ModelSnapshot(const Fleet& fleet, Store& store, const std::string& model,
                                    const EtaContext& context) {
  EtaSnapshot snapshot;
  snapshot.model = model;
  NS_ASSIGN_OR_RETURN(snapshot.queue,
                      store.QueuedJobs(model, context.eta_window, context.prompt_ids_window));
  snapshot.min_shared_prefix_tokens = context.min_shared_prefix_tokens;
  std::map<int64_t, StopStats> stops;
  if (context.stops != nullptr) stops = *context.stops;
  for (const auto& [id, w] : fleet.workers()) {
    if (FindModel(w->info, model) == nullptr) continue;
    EtaWorker worker;
    worker.info = w->info;
    worker.takes_work = w->info.connected && !w->draining;
    worker.cost = fleet.Cost(*w, model);
    const LiveBatch* batch = nullptr;
    auto found = fleet.batches().find(w->batch_id);
    if (found != fleet.batches().end()) batch = found->second.get();
    if (batch != nullptr && batch->model != model) {
      worker.start_at = fleet.BusySeconds(*w);  // another model's batch first
    } else if (batch != nullptr) {
      int64_t tokens = 0;  // of the pass in flight
      for (const auto& [job_id, job] : batch->jobs) {
        EtaJob j;
        j.id = job_id;
        j.submission_id = job.submission_id;
        j.kv_tokens = job.kv_tokens;
        j.pass_tokens = job.pass_tokens;
        j.passes_left = std::max<int64_t>(1, batch->PassesLeft(job));
        j.started = job.generated > 0;
        j.in_pass = !batch->JoinsNextBoundary(job);
        if (j.in_pass) tokens += j.started ? 1 : j.pass_tokens;
        if (job.passes_needed > 1) stops[job.submission_id].tokens += job.generated;
        worker.batch.push_back(j);
      }
      worker.kept_prefixes = batch->kept_prefixes;
      const double elapsed =
          static_cast<double>(std::max<int64_t>(0, context.now_ms - batch->pass_started_ms)) / 1e3;
      worker.pass_left = std::max(0.0, worker.cost.Seconds(tokens) - elapsed);
    }
    if (!worker.takes_work && worker.batch.empty()) continue;
    snapshot.workers.push_back(std::move(worker));
  }
  for (const auto& [submission, s] : stops) snapshot.stop_hazards[submission] = s.Hazard();
  return snapshot;
}

namespace {

// The models with jobs of `submission` in batches.
std::set<std::string> RunningModelsOf(const Fleet& fleet, int64_t submission) {
  std::set<std::string> models;
  for (const auto& [batch_id, batch] : fleet.batches()) {
    for (const auto& [job_id, job] : batch->jobs) {
      if (job.submission_id == submission) models.insert(batch->model);
    }
  }
  return models;
}

}  // namespace

std::optional<double> SubmissionEta(const Fleet& fleet, Store& store, const Submission& submission,
                                    int64_t waiting_for_tokenizer, const EtaContext& context) {
  if (submission.done()) return 0.0;
  if (waiting_for_tokenizer > 0 || !submission.sealed) return std::nullopt;
  std::set<std::string> models = RunningModelsOf(fleet, submission.id);
  const int64_t queued = submission.counts.queued - waiting_for_tokenizer;
  if (queued > 0) {
    auto queued_models = store.QueuedModelsOf(submission.id);
    if (!queued_models.ok()) return std::nullopt;
    models.insert(queued_models->begin(), queued_models->end());
  }
  double worst = 0;
  int64_t seen = 0;
  for (const std::string& model : models) {
    auto snapshot = ModelSnapshot(fleet, store, model, context);
    if (!snapshot.ok()) return std::nullopt;
    for (const QueuedJob& q : snapshot->queue) seen += q.submission_id == submission.id ? 1 : 0;
    const EtaForecast forecast = Forecast(*snapshot);
    auto mine = forecast.submissions.find(submission.id);
    if (mine == forecast.submissions.end()) continue;
    if (!mine->second) return std::nullopt;
    worst = std::max(worst, *mine->second);
  }
  if (seen < queued) return std::nullopt;  // some are beyond the window played out
  return worst;
}

std::optional<double> ModelEta(const Fleet& fleet, Store& store, const std::string& model,
                               const EtaContext& context) {
  auto snapshot = ModelSnapshot(fleet, store, model, context);
  if (!snapshot.ok() || static_cast<int64_t>(snapshot->queue.size()) >= context.eta_window) {
    return std::nullopt;  // unreadable, or longer than the window played out
  }
  const EtaForecast forecast = Forecast(*snapshot);
  if (forecast.jobs.empty()) return std::nullopt;
  double worst = 0;
  for (const auto& [job, finish] : forecast.jobs) {
    if (!finish) return std::nullopt;
    worst = std::max(worst, *finish);
  }
  return worst;
}

std::optional<double> ForecastCache::Get(const std::string& key, int64_t now_ms,
                                         const std::function<std::optional<double>()>& compute) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    const Entry& e = it->second;
    const int64_t age_ms = now_ms - e.at_ms;
    if (age_ms >= 0 && age_ms < e.reuse_ms) {
      if (!e.eta) return std::nullopt;
      return std::max(0.0, *e.eta - age_ms / 1000.0);
    }
    entries_.erase(it);
  }
  const auto start = std::chrono::steady_clock::now();
  std::optional<double> eta = compute();
  const auto cost = std::chrono::steady_clock::now() - start;
  if (cost >= kMinCost) {
    const auto reuse = std::chrono::duration_cast<std::chrono::milliseconds>(kReuseFactor * cost);
    entries_[key] = {now_ms, reuse.count(), eta};
  }
  return eta;
}

}  // namespace nightshift::scheduler
