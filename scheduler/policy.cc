#include "scheduler/policy.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace nightshift::scheduler {
namespace {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// What is left of one worker while the plan is built.
struct Budget {
  const WorkerSlot* worker = nullptr;
  int64_t kv_bytes_left = 0;
  int64_t jobs_left = 0;
  // Tokens the batch's next pass can still feed; for an idle worker, set
  // from the model's budget when the batch opens.
  int64_t pass_tokens_left = kNoLimit;
  bool fresh = false;   // a new batch with no job yet: takes one job whatever its tokens
  std::string model;    // "" while the idle worker is still unassigned
  int assignment = -1;  // index into Plan::assignments once it has one
};

bool DispatchOrder(const QueuedJob& a, const QueuedJob& b) {
  return std::make_tuple(-static_cast<int64_t>(a.priority), a.submission_id, a.id) <
         std::make_tuple(-static_cast<int64_t>(b.priority), b.submission_id, b.id);
}

// A model's pass-token budget on `worker`, kNoLimit when it has none.
int64_t PassTokenBudget(const WorkerSlot& worker, const std::string& model) {
  const ModelOffer* offer = FindModel(worker.info, model);
  return offer != nullptr && offer->pass_token_budget > 0 ? offer->pass_token_budget : kNoLimit;
}

int64_t JobLimit(const WorkerSlot& w) {
  return w.info.max_batch_jobs > 0 ? w.info.max_batch_jobs : kNoLimit;
}

// Jobs the worker's active batch may still take.
int64_t JobsLeft(const WorkerSlot& w) {
  return JobLimit(w) == kNoLimit ? kNoLimit : JobLimit(w) - w.batch_jobs;
}

std::vector<Budget> OpenBudgets(const std::vector<WorkerSlot>& workers) {
  std::vector<Budget> budgets;
  for (const WorkerSlot& w : workers) {
    if (!TakesJobs(w)) continue;
    if (w.batch_id == 0) {
      budgets.push_back({&w, w.info.kv_budget_bytes, JobLimit(w), kNoLimit, true, "", -1});
    } else {
      const int64_t tokens_left =
          PassTokenBudget(w, w.batch_model) == kNoLimit ? kNoLimit : w.free_pass_tokens;
      budgets.push_back({&w, w.free_kv_bytes, JobsLeft(w), tokens_left, false, w.batch_model, -1});
    }
  }
  return budgets;
}

// The reason a job can never run, or "" when some known worker could hold it
// (or none serves its model yet: then it waits).
std::string NeverFits(const QueuedJob& job, const std::vector<WorkerSlot>& workers) {
  int64_t most_tokens = -1;
  std::string where;
  for (const WorkerSlot& w : workers) {
    const ModelOffer* offer = FindModel(w.info, job.model);
    if (offer == nullptr || offer->kv_bytes_per_token <= 0) continue;
    if (KvBytes(job, *offer) <= w.info.kv_budget_bytes) return "";
    const int64_t tokens = w.info.kv_budget_bytes / offer->kv_bytes_per_token;
    if (tokens > most_tokens) {
      most_tokens = tokens;
      where = w.info.id;
    }
  }
  if (most_tokens < 0) return "";
  return "needs " + std::to_string(job.reserved_kv_tokens()) +
         " tokens of KV cache; the most any worker serving " + job.model + " can hold is " +
         std::to_string(most_tokens) + " (worker " + where + ")";
}

// Tokens of `model` the budget can still hold.
int64_t TokensLeft(const Budget& b, const std::string& model) {
  const ModelOffer* offer = FindModel(b.worker->info, model);
  return b.kv_bytes_left / offer->kv_bytes_per_token;
}

// True when `b` is a better idle worker than `a` to open a batch of `model`:
// it has the model open, else it holds more tokens of it, else its id is smaller.
bool BetterIdle(const Budget& a, const Budget& b, const std::string& model) {
  const bool a_open = a.worker->info.open_model == model;
  const bool b_open = b.worker->info.open_model == model;
  if (a_open != b_open) return b_open;
  const int64_t a_tokens = TokensLeft(a, model);
  const int64_t b_tokens = TokensLeft(b, model);
  if (a_tokens != b_tokens) return b_tokens > a_tokens;
  return b.worker->info.id < a.worker->info.id;
}

// Picks the budget that takes `job`: a batch of its model with room first
// (the first in snapshot order), else the best idle worker. nullptr if none.
Budget* Place(const QueuedJob& job, std::vector<Budget>& budgets) {
  Budget* idle = nullptr;
  for (Budget& b : budgets) {
    const ModelOffer* offer = FindModel(b.worker->info, job.model);
    if (offer == nullptr || offer->kv_bytes_per_token <= 0 || b.jobs_left <= 0) continue;
    if (KvBytes(job, *offer) > b.kv_bytes_left) continue;
    if (!b.fresh && job.pass_tokens() > b.pass_tokens_left) continue;
    if (b.model == job.model) return &b;
    if (b.model.empty() && (idle == nullptr || BetterIdle(*idle, b, job.model))) idle = &b;
  }
  return idle;
}

}  // namespace

bool TakesJobs(const WorkerSlot& w) {
  if (!w.info.connected) return false;
  if (w.batch_id == 0) return true;
  return w.wants_top_up && (w.free_kv_bytes > 0 || w.free_pass_tokens > 0) && JobsLeft(w) > 0;
}

int64_t KvBytes(const QueuedJob& job, const ModelOffer& model) {
  return job.reserved_kv_tokens() * model.kv_bytes_per_token;
}

Plan Schedule(const Snapshot& snapshot) {
  Plan plan;
  std::vector<QueuedJob> queue = snapshot.queue;
  std::stable_sort(queue.begin(), queue.end(), DispatchOrder);
  std::vector<Budget> budgets = OpenBudgets(snapshot.workers);
  for (const QueuedJob& job : queue) {
    std::string never = NeverFits(job, snapshot.workers);
    if (!never.empty()) {
      plan.rejections.push_back({job.id, std::move(never)});
      continue;
    }
    Budget* budget = Place(job, budgets);
    if (budget == nullptr) continue;
    if (budget->assignment < 0) {
      if (budget->model.empty())
        budget->pass_tokens_left = PassTokenBudget(*budget->worker, job.model);
      budget->model = job.model;
      budget->assignment = static_cast<int>(plan.assignments.size());
      plan.assignments.push_back(
          {budget->worker->info.id, job.model, budget->worker->batch_id, {}, 0});
    }
    const int64_t bytes = KvBytes(job, *FindModel(budget->worker->info, job.model));
    Assignment& assignment = plan.assignments[budget->assignment];
    assignment.job_ids.push_back(job.id);
    assignment.kv_bytes += bytes;
    assignment.pass_tokens += job.pass_tokens();
    budget->kv_bytes_left -= bytes;
    budget->pass_tokens_left -= std::min(budget->pass_tokens_left, job.pass_tokens());
    budget->fresh = false;
    --budget->jobs_left;
  }
  return plan;
}

}  // namespace nightshift::scheduler
