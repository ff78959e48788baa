#include "scheduler/live_eta.h"

#include <algorithm>
#include <vector>

#include "scheduler/eta.h"

namespace nightshift::scheduler {

namespace {

std::vector<EtaJob> EtaQueue(const std::vector<QueuedJob>& queue) {
  std::vector<EtaJob> eta_queue;
  for (const QueuedJob& q : queue) eta_queue.push_back(EtaJobOf(q));
  return eta_queue;
}

}  // namespace

std::optional<double> SubmissionEta(const Fleet& fleet, Store& store, const Submission& submission,
                                    int64_t waiting_for_tokenizer, int eta_window) {
  if (submission.done()) return 0.0;
  if (waiting_for_tokenizer > 0 || !submission.sealed) return std::nullopt;
  double worst = 0;
  // Jobs in batches: their passes left at their batch's pace.
  for (const auto& [batch_id, batch] : fleet.batches()) {
    const double spp = fleet.BatchSecondsPerPass(*batch);
    for (const auto& [job_id, job] : batch->jobs) {
      if (job.submission_id != submission.id) continue;
      auto seconds = RunningJobSeconds(batch->PassesLeft(job), spp);
      if (!seconds) return std::nullopt;
      worst = std::max(worst, *seconds);
    }
  }
  // Queued jobs: the queue of each of their models played out over its workers.
  const int64_t queued = submission.counts.queued - waiting_for_tokenizer;
  if (queued == 0) return worst;
  auto models = store.QueuedModelsOf(submission.id);
  if (!models.ok()) return std::nullopt;
  int64_t seen = 0;
  for (const std::string& model : *models) {
    auto queue = store.QueuedJobs(model, eta_window);
    if (!queue.ok()) return std::nullopt;
    const auto finish = QueueFinishTimes(fleet.EtaWorkers(model), EtaQueue(*queue));
    for (size_t i = 0; i < queue->size(); ++i) {
      if ((*queue)[i].submission_id != submission.id) continue;
      ++seen;
      if (!finish[i]) return std::nullopt;
      worst = std::max(worst, *finish[i]);
    }
  }
  if (seen < queued) return std::nullopt;  // some are beyond the window played out
  return worst;
}

std::optional<double> ModelEta(const Fleet& fleet, Store& store, const std::string& model,
                               int eta_window) {
  bool any = false;
  double worst = 0;
  for (const auto& [batch_id, batch] : fleet.batches()) {
    if (batch->model != model) continue;
    const double spp = fleet.BatchSecondsPerPass(*batch);
    for (const auto& [job_id, job] : batch->jobs) {
      auto seconds = RunningJobSeconds(batch->PassesLeft(job), spp);
      if (!seconds) return std::nullopt;
      worst = std::max(worst, *seconds);
      any = true;
    }
  }
  auto queue = store.QueuedJobs(model, eta_window);
  if (!queue.ok() || static_cast<int64_t>(queue->size()) >= eta_window) {
    return std::nullopt;  // unreadable, or longer than the window played out
  }
  for (const std::optional<double>& finish :
       QueueFinishTimes(fleet.EtaWorkers(model), EtaQueue(*queue))) {
    if (!finish) return std::nullopt;
    worst = std::max(worst, *finish);
    any = true;
  }
  if (!any) return std::nullopt;
  return worst;
}

}  // namespace nightshift::scheduler
