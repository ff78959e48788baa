#include "scheduler/types.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>

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

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

const char* EndpointUrl(Endpoint endpoint) {
  return endpoint == Endpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
}

StatusOr<Endpoint> ParseEndpointUrl(std::string_view url) {
  if (url == "/v1/completions") return Endpoint::kCompletions;
  if (url == "/v1/chat/completions") return Endpoint::kChatCompletions;
  return InvalidArgument("unsupported url '" + std::string(url) +
                         "' (/v1/completions or /v1/chat/completions)");
}

int64_t KvTokens(const JobSpec& spec, const TokenisedPrompt& tokens) {
  int64_t total = static_cast<int64_t>(tokens.prompt.size());
  if (spec.labels.empty()) return total + spec.max_new_tokens;
  for (const auto& label : tokens.labels) total += static_cast<int64_t>(label.size());
  return total;
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

std::string TokenizerHash(const TokenizerFiles& tokenizer) {
  // Each part is length-prefixed so that no two different inputs hash the same bytes.
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  auto add = [&](const std::string& part) {
    const uint64_t size = part.size();
    EVP_DigestUpdate(ctx, &size, sizeof(size));
    EVP_DigestUpdate(ctx, part.data(), part.size());
  };
  add(std::to_string(tokenizer.files.size()));
  for (const auto& [name, content] : tokenizer.files) {
    add(name);
    add(content);
  }
  for (int32_t id : tokenizer.eos_ids) add(std::to_string(id));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

const ModelOffer* FindModel(const WorkerInfo& worker, std::string_view model) {
  for (const auto& offer : worker.models) {
    if (offer.name == model) return &offer;
  }
  return nullptr;
}

}  // namespace nightshift::scheduler
