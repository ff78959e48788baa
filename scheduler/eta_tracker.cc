#include "scheduler/eta_tracker.h"

namespace nightshift::scheduler {

void EtaTracker::JobFinished(int64_t submission, int64_t passes_needed, const JobResult& result) {
  if (!result.ok || passes_needed <= 1 || !result.output.labels.empty()) return;
  StopStats& s = stops_[submission];
  const int64_t generated = result.output.completion_tokens > 0
                                ? result.output.completion_tokens
                                : static_cast<int64_t>(result.output.token_ids.size());
  s.tokens += generated;
  if (result.output.finish_reason == "stop" && generated < passes_needed) ++s.early_stops;
}

void EtaTracker::Progress(int64_t submission, int64_t done, int64_t total, int64_t now_ms,
                          const std::function<std::optional<double>()>& eta) {
  if (total <= 0) return;
  std::optional<std::optional<double>> now;  // asked once, when a milestone needs it
  for (int milestone : kEtaMilestones) {
    if (done * 100 < milestone * total) break;
    auto& shown = shown_[submission];
    if (shown.count(milestone) != 0) continue;
    if (!now) now = eta();
    shown[milestone] = {*now, now_ms};
  }
}

std::vector<EtaError> EtaTracker::Ended(int64_t submission, int64_t now_ms) {
  std::vector<EtaError> errors;
  auto it = shown_.find(submission);
  if (it != shown_.end()) {
    for (const auto& [milestone, shown] : it->second) {
      const double actual = static_cast<double>(now_ms - shown.at_ms) / 1e3;
      if (!shown.eta || actual <= 0) continue;
      errors.push_back({std::to_string(milestone), (*shown.eta - actual) / actual});
    }
    shown_.erase(it);
  }
  stops_.erase(submission);
  return errors;
}

}  // namespace nightshift::scheduler
