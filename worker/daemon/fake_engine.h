// A scripted BatchEngine for the daemon's tests: every pass each sequence
// generates `next_token(request, step)` (by default the letters a, b, c, ...
// as byte tokens), stops at EOS (256) or max_new_tokens, scores labels in
// one pass (label i: logprob -0.5 x (i + 1), the first wins), and reserves
// (prompt + labels + max_new_tokens) x kv_per_token bytes of its KV budget.
// With a pass-token budget it refuses, as the engine does, a sequence whose
// prompt and labels do not fit beside the next pass's other tokens.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "worker/daemon/batch_runner.h"

namespace nightshift::worker::testing {

class FakeEngine : public BatchEngine {
 public:
  std::function<engine::TokenId(const engine::SequenceRequest&, int64_t step)> next_token =
      [](const engine::SequenceRequest&, int64_t step) {
        return static_cast<engine::TokenId>('a' + step % 26);
      };
  uint64_t kv_budget = 1 << 20;
  uint64_t kv_per_token = 8;
  // A finished sequence's SequenceResult::shared_prompt_tokens.
  std::function<int64_t(const engine::SequenceRequest&)> shared_prompt_tokens =
      [](const engine::SequenceRequest&) { return int64_t{0}; };
  int64_t pass_token_budget = 0;  // 0: no limit
  Status step_error;              // returned by every Step once set
  engine::Residency residency = engine::Residency::kStream;
  int64_t steps = 0;
  std::vector<engine::SequenceId> finished_by_caller;
  std::vector<engine::SequenceId> cancelled;

  StatusOr<engine::SequenceId> Add(engine::SequenceRequest request) override {
    if (request.prompt.empty()) return InvalidArgument("empty prompt");
    const uint64_t kv = KvBytesFor(request);
    if (kv_bytes_in_use() + kv > kv_budget) return ResourceExhausted("KV budget full");
    const int64_t queued = next_pass_tokens();
    if (pass_token_budget > 0 && queued > 0 && queued + FeedTokens(request) > pass_token_budget) {
      return ResourceExhausted("pass-token budget full");
    }
    const engine::SequenceId id = next_id_++;
    active_[id] = {std::move(request), {}, {}, false};
    return id;
  }
  uint64_t kv_bytes_in_use() const override {
    uint64_t used = 0;
    for (const auto& [id, s] : active_) used += KvBytesFor(s.request);
    return used;
  }
  int64_t next_pass_tokens() const override {
    int64_t tokens = 0;
    for (const auto& [id, s] : active_) tokens += s.started ? 1 : FeedTokens(s.request);
    return tokens;
  }
  StatusOr<std::vector<engine::TokenId>> Generated(engine::SequenceId id) const override {
    auto it = active_.find(id);
    if (it == active_.end()) return NotFound("sequence not in flight");
    return it->second.generated;
  }
  Status Finish(engine::SequenceId id, engine::FinishReason reason) override {
    auto it = active_.find(id);
    if (it == active_.end()) return NotFound("sequence not in flight");
    finished_by_caller.push_back(id);
    Done(it, reason);
    return Status::Ok();
  }
  Status Cancel(engine::SequenceId id) override {
    if (active_.erase(id) == 0) return NotFound("sequence not in flight");
    cancelled.push_back(id);
    return Status::Ok();
  }
  StatusOr<engine::PassStats> Step() override {
    if (!step_error.ok()) return step_error;
    if (active_.empty()) return FailedPrecondition("nothing in flight");
    engine::PassStats stats;
    stats.index = steps++;
    stats.seconds = 0.01;
    stats.bytes_read = 1000;
    stats.io_seconds = 0.002;
    stats.load_seconds = 0.003;
    stats.compute_seconds = 0.004;
    stats.sequences = static_cast<int64_t>(active_.size());
    stats.residency = residency;
    for (auto it = active_.begin(); it != active_.end();) {
      Sequence& s = it->second;
      auto current = it++;
      if (!s.started) {
        stats.tokens += FeedTokens(s.request);
        s.started = true;
      } else {
        stats.tokens += 1;
      }
      if (!s.request.labels.empty()) {
        Done(current, engine::FinishReason::kLength);
        continue;
      }
      const engine::TokenId token = next_token(s.request, static_cast<int64_t>(s.generated.size()));
      s.generated.push_back(token);
      if (s.request.logprobs) {
        engine::TokenLogprob lp{token, -0.25, {}};
        for (int k = 0; k < s.request.top_logprobs; ++k) lp.top.push_back({token + k, -0.25 - k});
        s.logprobs.push_back(lp);
      }
      if (token == kEos) {
        Done(current, engine::FinishReason::kStop);
      } else if (static_cast<int64_t>(s.generated.size()) >= s.request.max_new_tokens) {
        Done(current, engine::FinishReason::kLength);
      }
    }
    stats.kv_bytes = kv_bytes_in_use();
    return stats;
  }
  std::vector<engine::SequenceResult> TakeFinished() override {
    std::vector<engine::SequenceResult> out;
    out.swap(finished_);
    return out;
  }
  int64_t active() const { return static_cast<int64_t>(active_.size()); }
  const std::vector<int64_t>& eos_token_ids() const override { return eos_; }

  static constexpr engine::TokenId kEos = 256;

 private:
  struct Sequence {
    engine::SequenceRequest request;
    std::vector<engine::TokenId> generated;
    std::vector<engine::TokenLogprob> logprobs;
    bool started = false;
  };

  static int64_t FeedTokens(const engine::SequenceRequest& r) {
    int64_t tokens = static_cast<int64_t>(r.prompt.size());
    for (const auto& label : r.labels) tokens += static_cast<int64_t>(label.size());
    return tokens;
  }

  uint64_t KvBytesFor(const engine::SequenceRequest& r) const {
    uint64_t tokens = r.prompt.size();
    for (const auto& label : r.labels) tokens += label.size();
    if (r.labels.empty()) tokens += static_cast<uint64_t>(r.max_new_tokens);
    return tokens * kv_per_token;
  }

  void Done(std::map<engine::SequenceId, Sequence>::iterator it, engine::FinishReason reason) {
    engine::SequenceResult r;
    r.id = it->first;
    r.prompt = it->second.request.prompt;
    r.generated = it->second.generated;
    r.finish_reason = reason;
    r.logprobs = it->second.logprobs;
    for (size_t i = 0; i < it->second.request.labels.size(); ++i) {
      engine::LabelScore score;
      score.ids = it->second.request.labels[i];
      score.logprob = -0.5 * static_cast<double>(i + 1);
      r.labels.push_back(score);
    }
    r.best_label = r.labels.empty() ? -1 : 0;
    r.shared_prompt_tokens = shared_prompt_tokens(it->second.request);
    finished_.push_back(std::move(r));
    active_.erase(it);
  }

  std::map<engine::SequenceId, Sequence> active_;
  std::vector<engine::SequenceResult> finished_;
  std::vector<int64_t> eos_ = {kEos};
  engine::SequenceId next_id_ = 1;
};

}  // namespace nightshift::worker::testing
