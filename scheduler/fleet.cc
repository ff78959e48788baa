#include "scheduler/fleet.h"

#include <algorithm>

#include "planner/model_facts.h"

namespace nightshift::scheduler {

int64_t LiveBatch::PassesLeft(const JobProgress& job) const {
  return std::max<int64_t>(0, job.passes_needed - job.generated);
}

LiveBatch::JobProgress ProgressOf(const Job& job, int64_t joined_at_pass) {
  QueuedJob q;
  q.kv_tokens = job.kv_tokens;
  q.passes = PassesNeeded(job.spec);
  return {job.submission_id,      q.passes,       0, joined_at_pass, false,
          q.reserved_kv_tokens(), q.pass_tokens()};
}

bool LiveBatch::JoinsNextBoundary(const JobProgress& job) const {
  return !job.reported && passes_done > 0 && job.joined_at_pass >= passes_done;
}

BatchStatus LiveBatch::View(int64_t jobs) const {
  return {id,        worker_id, model, mode, passes_done, seconds_per_pass, last_pass_seconds,
          sequences, jobs};
}

LiveWorker& Fleet::Worker(const std::string& id) {
  auto& worker = workers_[id];
  if (worker == nullptr) {
    worker = std::make_unique<LiveWorker>();
    worker->info.id = id;
  }
  return *worker;
}

LiveWorker* Fleet::FindWorker(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

const LiveWorker* Fleet::FindWorker(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

LiveBatch& Fleet::Batch(int64_t id, const std::string& worker_id, const std::string& model) {
  auto& batch = batches_[id];
  if (batch == nullptr) {
    batch = std::make_unique<LiveBatch>();
    batch->id = id;
    batch->worker_id = worker_id;
    batch->model = model;
  }
  return *batch;
}

LiveBatch* Fleet::FindBatch(int64_t id) {
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : it->second.get();
}

std::map<int64_t, Fleet::Cancelled> Fleet::Forget(const std::vector<JobChange>& changes) {
  std::map<int64_t, Cancelled> cancelled;
  for (const JobChange& change : changes) {
    if (change.batch_id == 0) continue;
    if (change.to == JobState::kLeased || change.to == JobState::kRunning) continue;
    LiveBatch* batch = FindBatch(change.batch_id);
    if (batch == nullptr) continue;
    batch->jobs.erase(change.job_id);
    if (change.to == JobState::kCancelled) {
      Cancelled& c = cancelled[change.batch_id];
      c.worker_id = batch->worker_id;
      c.job_ids.push_back(change.job_id);
    }
  }
  for (auto it = batches_.begin(); it != batches_.end();) {
    if (!it->second->jobs.empty()) {
      ++it;
      continue;
    }
    LiveWorker* worker = FindWorker(it->second->worker_id);
    if (worker != nullptr) {
      if (worker->batch_id == it->first) worker->batch_id = 0;
      worker->ended_batch_id = it->first;
      worker->ended_batch_model = it->second->model;
    }
    it = batches_.erase(it);
  }
  return cancelled;
}

std::vector<WorkerSlot> Fleet::Slots() const {
  std::vector<WorkerSlot> slots;
  for (const auto& [id, w] : workers_) {
    WorkerSlot slot;
    slot.info = w->info;
    slot.info.connected = w->info.connected && !w->draining;
    // A model whose checkpoint the worker cannot read now gets no batches there.
    auto& models = slot.info.models;
    models.erase(std::remove_if(models.begin(), models.end(),
                                [](const ModelOffer& m) { return !m.unhealthy.empty(); }),
                 models.end());
    auto batch = batches_.find(w->batch_id);
    if (batch != batches_.end()) {
      const LiveBatch& b = *batch->second;
      slot.batch_id = b.id;
      slot.batch_model = b.model;
      slot.batch_jobs = static_cast<int32_t>(b.jobs.size());
      slot.wants_top_up = b.wants_top_up;
      slot.free_kv_bytes = b.free_kv_bytes;
      slot.free_pass_tokens = b.free_pass_tokens;
      slot.kept_prefixes = b.kept_prefixes;
    }
    slots.push_back(std::move(slot));
  }
  return slots;
}

std::vector<const LiveWorker*> Fleet::ServersOf(const std::string& model) const {
  std::vector<const LiveWorker*> servers;
  for (const auto& [id, w] : workers_) {
    if (FindModel(w->info, model) != nullptr) servers.push_back(w.get());
  }
  std::stable_sort(servers.begin(), servers.end(), [](const auto* a, const auto* b) {
    return a->info.connected && !b->info.connected;
  });
  return servers;
}

int64_t Fleet::MaxContext(const std::string& model) const {
  int64_t context = 0;
  for (const auto& [id, w] : workers_) {
    const ModelOffer* offer = FindModel(w->info, model);
    if (offer == nullptr || offer->max_context_tokens <= 0) continue;
    if (context == 0 || offer->max_context_tokens < context) context = offer->max_context_tokens;
  }
  return context;
}

double Fleet::PriorSecondsPerPass(const LiveWorker& worker, const std::string& model) const {
  const ModelOffer* offer = FindModel(worker.info, model);
  if (offer == nullptr) return 0;
  if (offer->seconds_per_pass > 0) return offer->seconds_per_pass;
  // The worker sent no figure: the planner's on what it did send.
  return planner::PassSeconds(static_cast<uint64_t>(std::max<int64_t>(0, offer->checkpoint_bytes)),
                              worker.info.read_bytes_per_second);
}

PassCost Fleet::Cost(const LiveWorker& worker, const std::string& model) const {
  const double prior = PriorSecondsPerPass(worker, model);
  auto measured = worker.pass_times.find(model);
  if (measured == worker.pass_times.end()) return PassTimes().Cost(prior);
  return measured->second.Cost(prior);
}

double Fleet::SecondsPerPass(const LiveWorker& worker, const std::string& model,
                             int64_t jobs) const {
  return Cost(worker, model).Seconds(jobs);
}

bool Fleet::Measured(const LiveWorker& worker, const std::string& model) const {
  auto measured = worker.pass_times.find(model);
  return measured != worker.pass_times.end() && measured->second.count() > 0;
}

BatchStatus Fleet::View(const LiveBatch& batch, int64_t jobs) const {
  BatchStatus view = batch.View(jobs);
  const LiveWorker* worker = FindWorker(batch.worker_id);
  if (worker != nullptr && Measured(*worker, batch.model)) {
    view.eta_seconds_per_pass =
        SecondsPerPass(*worker, batch.model, static_cast<int64_t>(batch.jobs.size()));
    view.eta_passes_measured = std::min<int64_t>(worker->pass_times.at(batch.model).count(),
                                                 static_cast<int64_t>(PassTimes::kWindow));
  }
  return view;
}

double Fleet::BusySeconds(const LiveWorker& worker) const {
  auto it = batches_.find(worker.batch_id);
  if (it == batches_.end()) return 0;
  const LiveBatch& batch = *it->second;
  int64_t longest = 0;
  for (const auto& [id, job] : batch.jobs) longest = std::max(longest, batch.PassesLeft(job));
  return static_cast<double>(longest) *
         SecondsPerPass(worker, batch.model, static_cast<int64_t>(batch.jobs.size()));
}

}  // namespace nightshift::scheduler
