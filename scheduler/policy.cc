#include "scheduler/policy.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <tuple>

#include "planner/model_facts.h"

namespace nightshift::scheduler {

int64_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  // Whole blocks compared with memcmp first: jobs of one group share
  // hundreds of tokens.
  constexpr size_t kBlock = 32;
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i + kBlock <= n && std::memcmp(&a[i], &b[i], kBlock * sizeof(int32_t)) == 0) i += kBlock;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

int64_t KeptAgreement(const std::vector<std::vector<int32_t>>& kept_prefixes,
                      const std::vector<int32_t>& prompt) {
  if (prompt.empty()) return 0;
  int64_t best = 0;
  for (const std::vector<int32_t>& kept : kept_prefixes) {
    const int64_t agree =
        std::min<int64_t>(CommonPrefix(kept, prompt), static_cast<int64_t>(prompt.size()) - 1);
    if (agree >= planner::kMinKeptPrefixTokens) best = std::max(best, agree);
  }
  return best;
}

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
  // The jobs this plan put in it, as positions in the PrefixIndex: the
  // prefixes its next pass computes once more jobs join.
  std::set<size_t> members;
  // Those of them that hold KV across passes: the prompt prefixes the
  // worker's engine keeps once for the jobs that share them.
  std::set<size_t> kv_members;
};

bool DispatchOrder(const QueuedJob& a, const QueuedJob& b) {
  return std::make_tuple(-static_cast<int64_t>(a.priority), a.submission_id, a.id) <
         std::make_tuple(-static_cast<int64_t>(b.priority), b.submission_id, b.id);
}

// An order of prompts in which those that begin alike are adjacent (memcmp's
// order of their bytes, a prefix before its extensions): not the ids'
// numeric order, but any such order serves, and memcmp is fast.
int CompareIds(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  const int c = n == 0 ? 0 : std::memcmp(a.data(), b.data(), n * sizeof(int32_t));
  if (c != 0) return c;
  return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
}

// The queue (in dispatch order: a job's rank is its index there) sorted by
// model, then prompt ids (CompareIds): the jobs that share the longest
// prefix with a job are its neighbours, and those sharing at least some
// length lie in one run around it (a radix tree's leaves, in order).
class PrefixIndex {
 public:
  PrefixIndex(const std::vector<const QueuedJob*>& queue, int64_t min_shared)
      : queue_(queue), min_shared_(std::max<int64_t>(1, min_shared)), position_(queue.size()) {
    sorted_.resize(queue.size());
    for (size_t rank = 0; rank < queue.size(); ++rank) sorted_[rank] = rank;
    std::sort(sorted_.begin(), sorted_.end(), [&](size_t a, size_t b) {
      const QueuedJob& x = *queue[a];
      const QueuedJob& y = *queue[b];
      if (x.model != y.model) return x.model < y.model;
      const int ids = CompareIds(x.prompt_ids, y.prompt_ids);
      return ids != 0 ? ids < 0 : a < b;
    });
    for (size_t i = 0; i < sorted_.size(); ++i) position_[sorted_[i]] = i;
    for (size_t i = 0; i + 1 < sorted_.size(); ++i) {
      const QueuedJob& x = *queue[sorted_[i]];
      const QueuedJob& y = *queue[sorted_[i + 1]];
      next_shared_.push_back(x.model == y.model ? CommonPrefix(x.prompt_ids, y.prompt_ids) : 0);
    }
  }

  size_t position(size_t rank) const { return position_[rank]; }

  // The ranks in the order jobs are taken: dispatch order, each job followed
  // by the jobs not taken yet of its model and priority that share at least
  // min_shared tokens with it, the longest shared prefix first.
  std::vector<size_t> TakingOrder() const {
    std::vector<size_t> order;
    std::vector<bool> taken(queue_.size(), false);
    for (size_t rank = 0; rank < queue_.size(); ++rank) {
      if (taken[rank]) continue;
      taken[rank] = true;
      order.push_back(rank);
      std::vector<std::pair<int64_t, size_t>> companions;  // (-shared, rank)
      const auto visit = [&](size_t i, int64_t shared) {
        const size_t other = sorted_[i];
        if (!taken[other] && queue_[other]->priority == queue_[rank]->priority) {
          companions.push_back({-shared, other});
        }
      };
      // What a job shares with `rank` is the least of what the neighbours
      // between them share: walk out both ways until it is too short.
      const size_t at = position_[rank];
      int64_t shared = kNoLimit;
      for (size_t i = at; i > 0; --i) {
        shared = std::min(shared, next_shared_[i - 1]);
        if (shared < min_shared_) break;
        visit(i - 1, shared);
      }
      shared = kNoLimit;
      for (size_t i = at + 1; i < sorted_.size(); ++i) {
        shared = std::min(shared, next_shared_[i - 1]);
        if (shared < min_shared_) break;
        visit(i, shared);
      }
      std::sort(companions.begin(), companions.end());
      for (const auto& [minus_shared, other] : companions) {
        taken[other] = true;
        order.push_back(other);
      }
    }
    return order;
  }

  // Tokens of the job of `rank`'s prompt that its next pass computes once
  // already for `members` (positions): the longest prefix it shares with one
  // of them, which is its neighbour among them in sorted order; 0 when
  // shorter than min_shared.
  int64_t SharedWith(size_t rank, const std::set<size_t>& members) const {
    const size_t at = position_[rank];
    int64_t shared = 0;
    auto after = members.upper_bound(at);
    if (after != members.end()) shared = Shared(rank, sorted_[*after]);
    if (after != members.begin())
      shared = std::max(shared, Shared(rank, sorted_[*std::prev(after)]));
    return shared >= min_shared_ ? shared : 0;
  }

 private:
  int64_t Shared(size_t a, size_t b) const {
    if (queue_[a]->model != queue_[b]->model) return 0;
    return CommonPrefix(queue_[a]->prompt_ids, queue_[b]->prompt_ids);
  }

  const std::vector<const QueuedJob*>& queue_;
  int64_t min_shared_;
  std::vector<size_t> sorted_;        // ranks by model, then prompt ids, then rank
  std::vector<size_t> position_;      // by rank: its index in sorted_
  std::vector<int64_t> next_shared_;  // by index i: what sorted_[i] shares with sorted_[i + 1]
};

// What the job of `rank` adds to the next pass of `b`: its first pass's
// tokens less the prefix it shares with the jobs this plan put there, or
// the longer part of a prefix the worker keeps that it agrees with (the
// jobs sharing more with it than that agree with the kept prefix alike, so
// the engine groups them together after it).
int64_t PassTokensJoining(const Budget& b, const QueuedJob& job, size_t rank,
                          const PrefixIndex& prefixes) {
  const int64_t shared = std::min(std::max(prefixes.SharedWith(rank, b.members),
                                           KeptAgreement(b.worker->kept_prefixes, job.prompt_ids)),
                                  job.pass_tokens());
  return job.pass_tokens() - std::max<int64_t>(0, shared);
}

// KV positions the job of `rank` adds to `b`: those it reserves less the
// prompt prefix the engine holds once for it and others (KVCache::Share):
// that of a prefix the worker keeps when it agrees with one (its first pass
// starts after it, and it holds those positions in the kept prefix's
// cache), else the longest it shares with a job this plan put there that
// holds KV too (going-on sequences that meet in one first pass), when at
// least min_shared long.
int64_t KvPositionsJoining(const Budget& b, const QueuedJob& job, size_t rank,
                           const PrefixIndex& prefixes) {
  const int64_t positions = job.reserved_kv_tokens();
  if (positions == 0) return 0;
  const int64_t kept = KeptAgreement(b.worker->kept_prefixes, job.prompt_ids);
  const int64_t shared = kept > 0 ? kept : prefixes.SharedWith(rank, b.kv_members);
  return positions - std::min(shared, positions);
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
      budgets.push_back({&w, w.info.kv_budget_bytes, JobLimit(w), kNoLimit, true, "", -1, {}, {}});
    } else {
      const int64_t tokens_left =
          PassTokenBudget(w, w.batch_model) == kNoLimit ? kNoLimit : w.free_pass_tokens;
      budgets.push_back(
          {&w, w.free_kv_bytes, JobsLeft(w), tokens_left, false, w.batch_model, -1, {}, {}});
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

// Picks the budget that takes the job of `rank`: a batch of its model with
// room first (the first in snapshot order), else the best idle worker.
// nullptr if none.
Budget* Place(const QueuedJob& job, size_t rank, std::vector<Budget>& budgets,
              const PrefixIndex& prefixes) {
  Budget* idle = nullptr;
  for (Budget& b : budgets) {
    const ModelOffer* offer = FindModel(b.worker->info, job.model);
    if (offer == nullptr || offer->kv_bytes_per_token <= 0 || b.jobs_left <= 0) continue;
    if (KvPositionsJoining(b, job, rank, prefixes) * offer->kv_bytes_per_token > b.kv_bytes_left)
      continue;
    if (!b.fresh && PassTokensJoining(b, job, rank, prefixes) > b.pass_tokens_left) continue;
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
  std::vector<const QueuedJob*> queue;
  queue.reserve(snapshot.queue.size());
  for (const QueuedJob& job : snapshot.queue) queue.push_back(&job);
  std::stable_sort(queue.begin(), queue.end(),
                   [](const QueuedJob* a, const QueuedJob* b) { return DispatchOrder(*a, *b); });
  const PrefixIndex prefixes(queue, snapshot.min_shared_prefix_tokens);
  std::vector<Budget> budgets = OpenBudgets(snapshot.workers);
  for (size_t rank : prefixes.TakingOrder()) {
    const QueuedJob& job = *queue[rank];
    std::string never = NeverFits(job, snapshot.workers);
    if (!never.empty()) {
      plan.rejections.push_back({job.id, std::move(never)});
      continue;
    }
    Budget* budget = Place(job, rank, budgets, prefixes);
    if (budget == nullptr) continue;
    if (budget->assignment < 0) {
      if (budget->model.empty())
        budget->pass_tokens_left = PassTokenBudget(*budget->worker, job.model);
      budget->model = job.model;
      budget->assignment = static_cast<int>(plan.assignments.size());
      plan.assignments.push_back(
          {budget->worker->info.id, job.model, budget->worker->batch_id, {}, 0, 0, {}, {}});
    }
    const int64_t positions = KvPositionsJoining(*budget, job, rank, prefixes);
    const int64_t bytes =
        positions * FindModel(budget->worker->info, job.model)->kv_bytes_per_token;
    const int64_t tokens = PassTokensJoining(*budget, job, rank, prefixes);
    Assignment& assignment = plan.assignments[budget->assignment];
    assignment.job_ids.push_back(job.id);
    assignment.kv_bytes += bytes;
    assignment.job_kv_tokens.push_back(positions);
    assignment.pass_tokens += tokens;
    assignment.job_pass_tokens.push_back(tokens);
    budget->kv_bytes_left -= bytes;
    budget->pass_tokens_left -= std::min(budget->pass_tokens_left, tokens);
    budget->members.insert(prefixes.position(rank));
    if (job.reserved_kv_tokens() > 0) budget->kv_members.insert(prefixes.position(rank));
    budget->fresh = false;
    --budget->jobs_left;
  }
  return plan;
}

}  // namespace nightshift::scheduler
