#include "scheduler/event_metrics.h"

#include <map>
#include <set>

#include "scheduler/metrics.h"

namespace nightshift::scheduler {

void EventMetrics::Submitted(const std::vector<NewJob>& jobs) {
  if (metrics_ == nullptr) return;
  std::map<std::string, int64_t> by_model;
  for (const NewJob& job : jobs) ++by_model[job.spec.model];
  for (const auto& [model, count] : by_model) metrics_->JobsSubmitted(model, count);
}

void EventMetrics::Leased(const Job& job) {
  if (metrics_ == nullptr || job.first_leased_at_ms != job.updated_at_ms) return;
  metrics_->JobLeased(job.spec.model,
                      static_cast<double>(job.first_leased_at_ms - job.created_at_ms) / 1e3);
}

void EventMetrics::Finished(const std::vector<JobChange>& changes) {
  if (metrics_ == nullptr) return;
  for (const JobChange& change : changes) {
    if (!IsTerminal(change.to)) continue;
    auto job = store_->GetJob(change.job_id);  // the model and when it was submitted
    if (!job.ok()) continue;
    metrics_->JobFinished(job->spec.model, change.to,
                          static_cast<double>(job->updated_at_ms - job->created_at_ms) / 1e3);
  }
}

void EventMetrics::LostLeases(const std::vector<JobChange>& changes, const Fleet& fleet) {
  if (metrics_ == nullptr) return;
  std::set<int64_t> batches;
  for (const JobChange& change : changes) {
    auto batch = fleet.batches().find(change.batch_id);
    if (batch == fleet.batches().end()) continue;
    if (batches.insert(change.batch_id).second) {
      metrics_->LeaseExpired(batch->second->model, batch->second->worker_id);
    }
    if (change.to == JobState::kQueued) metrics_->JobRetried(batch->second->model);
  }
}

void EventMetrics::Retried(const std::vector<JobChange>& changes, const Fleet& fleet) {
  if (metrics_ == nullptr) return;
  for (const JobChange& change : changes) {
    auto batch = fleet.batches().find(change.batch_id);
    if (batch != fleet.batches().end() && change.to == JobState::kQueued) {
      metrics_->JobRetried(batch->second->model);
    }
  }
}

void EventMetrics::EtaErrors(const std::vector<EtaError>& errors) {
  if (metrics_ == nullptr) return;
  for (const EtaError& e : errors) metrics_->EtaError(e.progress, e.ratio);
}

void EventMetrics::Refused(const std::string& worker_id, const std::vector<JobResult>& results,
                           const std::vector<ResultOutcome>& outcomes) {
  if (metrics_ == nullptr) return;
  for (size_t i = 0; i < outcomes.size() && i < results.size(); ++i) {
    const StatusCode code = outcomes[i].status.code();
    if (code != StatusCode::kAlreadyExists && code != StatusCode::kFailedPrecondition) continue;
    auto job = store_->GetJob(results[i].job_id);
    if (job.ok()) metrics_->ResultRefused(job->spec.model, worker_id);
  }
}

}  // namespace nightshift::scheduler
