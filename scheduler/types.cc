#include "scheduler/types.h"

#include <algorithm>

#include "planner/model_facts.h"

namespace nightshift::scheduler {

StatusOr<JobState> Transition(JobState from, JobEvent event) {
  using S = JobState;
  using E = JobEvent;
  const bool live = from == S::kQueued || from == S::kLeased || from == S::kRunning;
  const bool held = from == S::kLeased || from == S::kRunning;
  switch (event) {
    case E::kLease:
      if (from == S::kQueued) return S::kLeased;
      break;
    case E::kStart:
      if (held) return S::kRunning;
      break;
    case E::kSucceed:
      if (held) return S::kSucceeded;
      break;
    case E::kFail:
      if (live) return S::kFailed;
      break;
    case E::kCancel:
      if (live) return S::kCancelled;
      break;
    case E::kRequeue:
      if (held) return S::kQueued;
      break;
  }
  return FailedPrecondition(std::string("a ") + JobStateName(from) + " job cannot take event '" +
                            JobEventName(event) + "'");
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kLeased:
      return "leased";
    case JobState::kRunning:
      return "running";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "?";
}

const char* JobEventName(JobEvent event) {
  switch (event) {
    case JobEvent::kLease:
      return "lease";
    case JobEvent::kStart:
      return "start";
    case JobEvent::kSucceed:
      return "succeed";
    case JobEvent::kFail:
      return "fail";
    case JobEvent::kCancel:
      return "cancel";
    case JobEvent::kRequeue:
      return "requeue";
  }
  return "?";
}

StatusOr<JobState> ParseJobState(std::string_view name) {
  for (JobState state : kAllJobStates) {
    if (name == JobStateName(state)) return state;
  }
  return InvalidArgument("unknown job state '" + std::string(name) +
                         "' (queued, leased, running, succeeded, failed, cancelled)");
}

const char* BatchStateName(BatchState state) {
  switch (state) {
    case BatchState::kActive:
      return "active";
    case BatchState::kFinished:
      return "finished";
    case BatchState::kExpired:
      return "expired";
    case BatchState::kReleased:
      return "released";
  }
  return "?";
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

int64_t KvTokens(const JobSpec& spec, const TokenisedPrompt& tokens) {
  std::vector<int64_t> label_tokens;
  if (!spec.labels.empty()) {
    for (const auto& label : tokens.labels) {
      label_tokens.push_back(static_cast<int64_t>(label.size()));
    }
  }
  return planner::KvPositions(static_cast<int64_t>(tokens.prompt.size()), spec.max_new_tokens,
                              label_tokens);
}

int64_t PassesNeeded(const JobSpec& spec) {
  return spec.labels.empty() ? std::max<int64_t>(1, spec.max_new_tokens) : 1;
}

int64_t& StateCounts::at(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return queued;
    case JobState::kLeased:
      return leased;
    case JobState::kRunning:
      return running;
    case JobState::kSucceeded:
      return succeeded;
    case JobState::kFailed:
      return failed;
    case JobState::kCancelled:
      break;
  }
  return cancelled;
}

}  // namespace nightshift::scheduler
