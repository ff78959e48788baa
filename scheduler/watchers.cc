#include "scheduler/watchers.h"

#include <algorithm>

namespace nightshift::scheduler {

namespace {

// How often a known ETA is recomputed.
constexpr int64_t kEtaRefreshMs = 1000;

}  // namespace

int64_t Watchers::Add(int64_t submission_id, SubmissionWatcher* watcher, std::optional<double> eta,
                      int64_t now_ms) {
  const int64_t id = next_id_++;
  watches_[id] = {submission_id, watcher, eta, now_ms};
  return id;
}

void Watchers::Remove(int64_t watch_id) { watches_.erase(watch_id); }

bool Watchers::Watched(int64_t submission_id) const {
  return std::any_of(watches_.begin(), watches_.end(),
                     [&](const auto& w) { return w.second.submission_id == submission_id; });
}

void Watchers::Notify(const SubmissionStatus& status, const std::vector<JobChange>& changes,
                      int64_t now_ms, const std::function<std::optional<double>()>& eta) {
  for (auto& [id, watch] : watches_) {
    if (watch.submission_id != status.submission.id) continue;
    if (status.submission.done() || !watch.eta || now_ms - watch.eta_at_ms >= kEtaRefreshMs) {
      watch.eta = eta();
      watch.eta_at_ms = now_ms;
    }
    SubmissionUpdate update{status, changes};
    update.status.eta_seconds.reset();
    if (watch.eta) {  // counted down since it was computed
      const double elapsed = static_cast<double>(now_ms - watch.eta_at_ms) / 1000.0;
      update.status.eta_seconds = std::max(0.0, *watch.eta - elapsed);
    }
    watch.watcher->OnUpdate(update);
  }
}

}  // namespace nightshift::scheduler
