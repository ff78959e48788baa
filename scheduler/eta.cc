#include "scheduler/eta.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "planner/model_facts.h"

namespace nightshift::scheduler {

namespace {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (upper + *std::max_element(values.begin(), values.begin() + mid)) / 2;
}

}  // namespace

double SmoothSecondsPerPass(double previous, double sample) {
  if (previous <= 0) return sample;
  return previous + kPassSmoothing * (sample - previous);
}

double PassCost::Seconds(int64_t tokens) const {
  return base_seconds + seconds_per_token * static_cast<double>(std::max<int64_t>(0, tokens));
}

void PassTimes::Add(double seconds, int64_t tokens) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  recent_.push_back({seconds, std::max<int64_t>(0, tokens)});
  if (recent_.size() > kWindow) recent_.pop_front();
  ++count_;
}

double PassTimes::MedianSeconds() const {
  std::vector<double> seconds;
  for (const Sample& s : recent_) seconds.push_back(s.seconds);
  return Median(std::move(seconds));
}

// The blend. The prior (the advert: streamed bytes / measured read bandwidth)
// prices the read alone; a measured pass holds everything else too (compute,
// the page cache, prefetch overlap, the prefill of joining prompts), so the
// measured passes replace it as they come. A pass is priced as base +
// per_token x the tokens it feeds. One pass: a pass at most as long as the
// prior is the base; a longer one keeps the prior as the base and charges the
// excess to its tokens (a batch's first pass feeds every prompt: it is the
// prefill). Two passes: the line through them (the mean, when they fed as
// many tokens). From three on, a robust fit: the per-token slope is the
// median of the slopes between pairs of passes that fed different token
// counts (Theil-Sen), the base the median of each pass's time less its
// tokens' share, so one slow pass moves neither. The slope is never negative:
// where prefill costs nothing extra (a streamed pass bound by the read) every
// pass is priced alike; where it does (a compute-bound CPU), prefill-heavy
// passes are priced apart from decode passes.
PassCost PassTimes::Cost(double prior_seconds) const {
  PassCost cost;
  if (recent_.empty()) {
    cost.base_seconds = std::max(0.0, prior_seconds);
    return cost;
  }
  if (recent_.size() == 1) {
    const Sample& s = recent_[0];
    if (prior_seconds > 0 && s.seconds > prior_seconds && s.tokens > 0) {
      cost.base_seconds = prior_seconds;
      cost.seconds_per_token = (s.seconds - prior_seconds) / static_cast<double>(s.tokens);
    } else {
      cost.base_seconds = s.seconds;
    }
    return cost;
  }
  std::vector<double> slopes;
  for (size_t i = 0; i < recent_.size(); ++i) {
    for (size_t j = i + 1; j < recent_.size(); ++j) {
      const int64_t dt = recent_[j].tokens - recent_[i].tokens;
      if (dt == 0) continue;
      slopes.push_back((recent_[j].seconds - recent_[i].seconds) / static_cast<double>(dt));
    }
  }
  cost.seconds_per_token = std::max(0.0, Median(std::move(slopes)));
  std::vector<double> bases;
  for (const Sample& s : recent_) {
    bases.push_back(s.seconds - cost.seconds_per_token * static_cast<double>(s.tokens));
  }
  cost.base_seconds = std::max(1e-6, Median(std::move(bases)));
  return cost;
}

double StopStats::Hazard() const {
  if (early_stops <= 0 || tokens <= 0) return 0;
  return std::min(1.0, static_cast<double>(early_stops) / static_cast<double>(tokens));
}

int64_t ExpectedPasses(int64_t passes_left, double hazard) {
  if (passes_left <= 1) return std::max<int64_t>(0, passes_left);
  if (!(hazard > 0)) return passes_left;
  if (hazard >= 1) return 1;
  const double expected = (1 - std::pow(1 - hazard, static_cast<double>(passes_left))) / hazard;
  return std::clamp<int64_t>(std::llround(expected), 1, passes_left);
}

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// One worker while the forecast plays out.
struct Sim {
  const EtaWorker* worker = nullptr;
  const ModelOffer* offer = nullptr;
  std::vector<EtaJob> batch;
  double at = 0;         // the next event: the end of the pass in flight, or when it is free
  bool in_pass = false;  // at is the end of a pass (else it is idle from `at`)
  bool stuck = false;    // idle and nothing queued fits it
  // The prompt prefixes its engine keeps for the next pass (Engine::
  // kept_prefixes), each with the last pass a joining job used it in, and
  // the passes its batch ran: Take shows them to Schedule as the worker
  // reports them, so a top-up that agrees with one is priced without it.
  struct Kept {
    std::vector<int32_t> ids;
    int64_t used = 0;
    bool reported = false;  // by the worker, for the batch it runs now
  };
  std::vector<Kept> kept;
  int64_t passes = 0;
};

int64_t PassTokensOf(const std::vector<EtaJob>& batch) {
  int64_t tokens = 0;
  for (const EtaJob& j : batch) {
    if (j.in_pass) tokens += j.started ? 1 : j.pass_tokens;
  }
  return tokens;
}

class Player {
 public:
  explicit Player(const EtaSnapshot& s) : s_(s) {
    for (const QueuedJob& q : s.queue) {
      index_[q.id] = queue_.size();
      queue_.push_back(&q);
      taken_.push_back(false);
      forecast_.jobs[q.id] = std::nullopt;
      submission_of_[q.id] = q.submission_id;
    }
    queued_left_ = static_cast<int64_t>(queue_.size());
    for (const EtaWorker& w : s.workers) {
      Sim sim;
      sim.worker = &w;
      sim.offer = FindModel(w.info, s.model);
      sim.batch = w.batch;
      for (const std::vector<int32_t>& ids : w.kept_prefixes) sim.kept.push_back({ids, 0, true});
      for (EtaJob& j : sim.batch) {
        j.passes_left = ExpectedPasses(j.passes_left, Hazard(j.submission_id));
        forecast_.jobs[j.id] = std::nullopt;
        submission_of_[j.id] = j.submission_id;
      }
      // A worker of unknown speed plays nothing: its jobs stay unknown.
      if (!w.cost.known() || sim.offer == nullptr) {
        sim.at = kNever;
      } else if (!sim.batch.empty()) {
        sim.in_pass = true;
        sim.at = std::max(0.0, w.pass_left);
      } else {
        sim.at = std::max(0.0, w.start_at);
      }
      sims_.push_back(std::move(sim));
    }
    for (size_t i = 0; i < sims_.size(); ++i) {
      WorkerSlot slot;
      slot.info = s.workers[i].info;
      snapshot_.workers.push_back(std::move(slot));
    }
    snapshot_.min_shared_prefix_tokens = s.min_shared_prefix_tokens;
  }

  EtaForecast Play() {
    int64_t boundaries = 0;
    while (boundaries++ < s_.max_boundaries) {
      Sim* next = nullptr;
      for (Sim& sim : sims_) {
        if (!sim.in_pass && (sim.stuck || !sim.worker->takes_work || queued_left_ == 0)) continue;
        if (sim.at == kNever) continue;
        if (next == nullptr || sim.at < next->at) next = &sim;
      }
      if (next == nullptr) break;
      if (next->in_pass) {
        Boundary(*next);
      } else {
        Open(*next);
      }
    }
    return Finish();
  }

 private:
  double Hazard(int64_t submission) const {
    auto it = s_.stop_hazards.find(submission);
    return it == s_.stop_hazards.end() ? 0.0 : it->second;
  }

  size_t Index(const Sim& sim) const { return static_cast<size_t>(&sim - sims_.data()); }

  // Runs Schedule with `sim` the only worker open (idle, or at a boundary
  // with the room it has left), the others shown but closed (so that a job
  // only another worker could hold is not rejected). Returns the jobs it takes.
  std::vector<EtaJob> Take(Sim& sim, double now) {
    const size_t me = Index(sim);
    const int32_t max_jobs = sim.worker->info.max_batch_jobs;
    if (max_jobs > 0 && static_cast<int64_t>(sim.batch.size()) >= max_jobs) return {};
    Snapshot& snapshot = snapshot_;  // reused: its workers are set up once
    snapshot.queue.clear();
    for (size_t i = head_;
         i < queue_.size() && static_cast<int>(snapshot.queue.size()) < s_.schedule_window; ++i) {
      if (!taken_[i]) snapshot.queue.push_back(*queue_[i]);
    }
    if (snapshot.queue.empty()) return {};
    for (size_t i = 0; i < sims_.size(); ++i) {
      WorkerSlot& slot = snapshot.workers[i];
      slot.info.connected = i == me;
      slot.batch_id = sims_[i].batch.empty() ? 0 : 1;
      slot.batch_model = s_.model;
      slot.batch_jobs = static_cast<int32_t>(sims_[i].batch.size());
      slot.wants_top_up = false;
    }
    WorkerSlot& slot = snapshot.workers[me];
    slot.kept_prefixes.clear();
    if (!sim.batch.empty()) {
      for (const Sim::Kept& k : sim.kept) slot.kept_prefixes.push_back(k.ids);
      int64_t kv = 0;
      for (const EtaJob& j : sim.batch) kv += j.kv_tokens;
      slot.free_kv_bytes = std::max<int64_t>(
          0, sim.worker->info.kv_budget_bytes - kv * sim.offer->kv_bytes_per_token);
      int64_t next_tokens = 0;  // what the next pass feeds: the worker reports the rest
      for (const EtaJob& j : sim.batch) next_tokens += j.started ? 1 : j.pass_tokens;
      slot.free_pass_tokens = sim.offer->pass_token_budget > 0
                                  ? std::max<int64_t>(0, sim.offer->pass_token_budget - next_tokens)
                                  : 0;
      slot.wants_top_up = slot.free_kv_bytes > 0 || slot.free_pass_tokens > 0;
      if (!slot.wants_top_up) return {};
    }
    const Plan plan = Schedule(snapshot);
    for (const Rejection& r : plan.rejections) {
      MarkTaken(r.job_id);
      forecast_.jobs[r.job_id] = now;  // it fails at once
    }
    std::vector<EtaJob> jobs;
    for (const Assignment& a : plan.assignments) {
      if (a.worker_id != sim.worker->info.id) continue;
      for (size_t k = 0; k < a.job_ids.size(); ++k) {
        const QueuedJob& q = *queue_[index_.at(a.job_ids[k])];
        MarkTaken(q.id);
        // Its share of the pass and of the KV: a prefix it shares with a job
        // before it is computed (and, between jobs holding KV, held) once.
        jobs.push_back({q.id, q.submission_id, a.job_kv_tokens[k], a.job_pass_tokens[k],
                        ExpectedPasses(std::max<int64_t>(1, q.passes), Hazard(q.submission_id)),
                        false, true});
      }
    }
    return jobs;
  }

  void MarkTaken(int64_t id) {
    const size_t i = index_.at(id);
    if (taken_[i]) return;
    taken_[i] = true;
    --queued_left_;
    while (head_ < queue_.size() && taken_[head_]) ++head_;
  }

  // What the engine keeps after `joining` start (Engine::Impl::
  // PrefixesToKeep, less its check for KV room): a kept prefix they agree
  // with is used again; of those agreeing with none, each set of two or
  // more that agree on their first planner::kMinKeptPrefixTokens tokens
  // keeps the prompt prefix all of them share.
  void Keep(Sim& sim, const std::vector<EtaJob>& joining) {
    const size_t least = static_cast<size_t>(planner::kMinKeptPrefixTokens);
    // By their first `least` tokens.
    std::map<std::vector<int32_t>, std::vector<const std::vector<int32_t>*>> sets;
    for (const EtaJob& j : joining) {
      const std::vector<int32_t>& prompt = queue_[index_.at(j.id)]->prompt_ids;
      if (prompt.size() < least) continue;
      bool agrees = false;
      for (Sim::Kept& k : sim.kept) {
        if (KeptAgreement({k.ids}, prompt) > 0) {
          k.used = sim.passes;
          agrees = true;
        }
      }
      if (!agrees) {
        sets[std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(least))]
            .push_back(&prompt);
      }
    }
    for (const auto& [first, prompts] : sets) {
      if (prompts.size() < 2) continue;
      int64_t shared = static_cast<int64_t>(prompts[0]->size());
      for (const std::vector<int32_t>* p : prompts) {
        shared = std::min(shared, CommonPrefix(*prompts[0], *p));
      }
      std::vector<int32_t> ids(prompts[0]->begin(), prompts[0]->begin() + shared);
      const bool known = std::any_of(sim.kept.begin(), sim.kept.end(),
                                     [&](const Sim::Kept& k) { return k.ids == ids; });
      if (!known) sim.kept.push_back({std::move(ids), sim.passes});
    }
  }

  // Whether a job of `sim`'s batch that decodes holds kept prefix `k` (its
  // prompt begins with it). A job of the batch running at the snapshot, whose
  // prompt the forecast does not have, holds those its worker reported.
  bool Held(const Sim& sim, const Sim::Kept& k) const {
    return std::any_of(sim.batch.begin(), sim.batch.end(), [&](const EtaJob& j) {
      if (!j.started || j.kv_tokens == 0) return false;
      const auto at = index_.find(j.id);
      if (at == index_.end()) return k.reported;
      const std::vector<int32_t>& prompt = queue_[at->second]->prompt_ids;
      return prompt.size() >= k.ids.size() &&
             std::equal(k.ids.begin(), k.ids.end(), prompt.begin());
    });
  }

  // An idle worker opens a batch.
  void Open(Sim& sim) {
    std::vector<EtaJob> jobs = Take(sim, sim.at);
    if (jobs.empty()) {
      sim.stuck = true;  // nothing queued fits its whole budget now, nor will later
      return;
    }
    sim.kept.clear();
    sim.passes = 0;
    Keep(sim, jobs);
    sim.batch = std::move(jobs);
    sim.in_pass = true;
    sim.at += sim.worker->cost.Seconds(PassTokensOf(sim.batch));
  }

  // The pass in flight ends: its jobs advance, the finished leave, the room
  // is topped up, the next pass starts (or the worker is idle).
  void Boundary(Sim& sim) {
    const double now = sim.at;
    std::vector<EtaJob> left;
    for (EtaJob& j : sim.batch) {
      if (j.in_pass) {
        j.started = true;
        if (--j.passes_left <= 0) {
          forecast_.jobs[j.id] = now;
          continue;
        }
      } else {
        j.in_pass = true;  // joined at this boundary
      }
      left.push_back(j);
    }
    sim.batch = std::move(left);
    if (sim.batch.empty()) {
      sim.in_pass = false;  // idle from now: it opens the next batch at once
      if (!sim.worker->takes_work) sim.at = kNever;
      return;
    }
    // The engine drops a kept prefix after two passes that neither used it
    // nor had a decoding job hold it.
    ++sim.passes;
    for (Sim::Kept& k : sim.kept) {
      if (Held(sim, k)) k.used = sim.passes;
    }
    sim.kept.erase(std::remove_if(sim.kept.begin(), sim.kept.end(),
                                  [&](const Sim::Kept& k) { return k.used < sim.passes - 2; }),
                   sim.kept.end());
    if (sim.worker->takes_work && queued_left_ > 0) {
      std::vector<EtaJob> top_up = Take(sim, now);
      Keep(sim, top_up);
      for (EtaJob& j : top_up) {
        j.in_pass = !s_.top_ups_join_late;
        sim.batch.push_back(j);
      }
    }
    sim.at = now + sim.worker->cost.Seconds(PassTokensOf(sim.batch));
  }

  EtaForecast Finish() {
    for (const auto& [job, finish] : forecast_.jobs) {
      auto [it, fresh] = forecast_.submissions.try_emplace(submission_of_[job], finish);
      if (fresh) continue;
      if (!it->second || !finish) {
        it->second.reset();
      } else {
        it->second = std::max(*it->second, *finish);
      }
    }
    return std::move(forecast_);
  }

  const EtaSnapshot& s_;
  std::vector<const QueuedJob*> queue_;
  std::vector<bool> taken_;
  std::unordered_map<int64_t, size_t> index_;
  std::unordered_map<int64_t, int64_t> submission_of_;  // job id -> submission
  size_t head_ = 0;
  int64_t queued_left_ = 0;
  std::vector<Sim> sims_;
  Snapshot snapshot_;  // what Take hands Schedule: every worker, the head of the queue
  EtaForecast forecast_;
};

}  // namespace

EtaForecast Forecast(const EtaSnapshot& snapshot) { return Player(snapshot).Play(); }

}  // namespace nightshift::scheduler
