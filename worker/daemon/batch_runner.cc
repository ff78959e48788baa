#include "worker/daemon/batch_runner.h"

#include <algorithm>

namespace nightshift::worker {

// A job in flight and its text so far.
struct BatchRunner::Job {
  JobAssignment assignment;
  engine::SequenceId sequence = 0;
  bool prompt_counted = false;
  size_t tokens_seen = 0;  // generated tokens already fed to the decoder
  std::unique_ptr<tokenizer::IncrementalDecoder> decoder;  // null without a tokenizer
  tokenizer::StopStringMatcher matcher;
  std::string text;      // released by the matcher so far
  bool stopped = false;  // a stop string matched

  explicit Job(JobAssignment a) : assignment(std::move(a)), matcher(assignment.stop) {}
  bool classification() const { return !assignment.labels.empty(); }
};

namespace {

engine::SequenceRequest ToRequest(const JobAssignment& job) {
  engine::SequenceRequest r;
  r.prompt = job.prompt;
  r.labels = job.label_ids;
  r.max_new_tokens = job.max_new_tokens > 0 ? job.max_new_tokens : 16;
  r.sampling.temperature = job.sampling.temperature;
  r.sampling.top_k = job.sampling.top_k;
  r.sampling.top_p = job.sampling.top_p;
  r.sampling.seed = job.sampling.seed;
  r.logprobs = job.logprobs;
  r.top_logprobs = job.top_logprobs;
  return r;
}

JobOutcome Failed(int64_t batch_id, int64_t job_id, std::string error) {
  JobOutcome outcome;
  outcome.batch_id = batch_id;
  outcome.job_id = job_id;
  outcome.error = std::move(error);
  return outcome;
}

int64_t PromptTokens(const JobAssignment& job) {
  int64_t tokens = static_cast<int64_t>(job.prompt.size());
  for (const auto& label : job.label_ids) tokens += static_cast<int64_t>(label.size());
  return tokens;
}

}  // namespace

BatchRunner::BatchRunner(int64_t batch_id, BatchEngine* engine,
                         const tokenizer::Tokenizer* tokenizer, uint64_t kv_budget_bytes,
                         int64_t pass_token_budget)
    : batch_id_(batch_id),
      engine_(engine),
      tokenizer_(tokenizer),
      kv_budget_bytes_(kv_budget_bytes),
      pass_token_budget_(pass_token_budget) {}

BatchRunner::~BatchRunner() = default;

BatchRunner::AddResult BatchRunner::Add(const std::vector<JobAssignment>& jobs) {
  AddResult result;
  for (const JobAssignment& assignment : jobs) {
    const bool known = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& entry) {
      return entry.second->assignment.job_id == assignment.job_id;
    });
    if (known) continue;
    StatusOr<engine::SequenceId> id = engine_->Add(ToRequest(assignment));
    if (!id.ok()) {
      if (id.status().code() == StatusCode::kResourceExhausted) {
        result.handed_back.push_back(assignment.job_id);
      } else {
        result.failed.push_back(Failed(batch_id_, assignment.job_id, id.status().ToString()));
      }
      continue;
    }
    auto job = std::make_unique<Job>(assignment);
    job->sequence = *id;
    if (tokenizer_ != nullptr) {
      job->decoder = std::make_unique<tokenizer::IncrementalDecoder>(*tokenizer_,
                                                                     /*skip_special_tokens=*/true);
    }
    jobs_[*id] = std::move(job);
  }
  return result;
}

bool BatchRunner::IsEos(engine::TokenId id) const {
  const auto& eos = engine_->eos_token_ids();
  return std::find(eos.begin(), eos.end(), static_cast<int64_t>(id)) != eos.end();
}

std::string BatchRunner::TokenText(engine::TokenId id) const {
  if (tokenizer_ == nullptr) return "";
  StatusOr<std::string> text = tokenizer_->Decode({id}, /*skip_special_tokens=*/false);
  return text.ok() ? *text : "";
}

// Feeds the tokens not seen yet through the decoder and the stop-string
// matcher (EOS ids are not text).
void BatchRunner::MatchStopStrings(Job& job, const std::vector<engine::TokenId>& generated) {
  for (; job.tokens_seen < generated.size(); ++job.tokens_seen) {
    const engine::TokenId id = generated[job.tokens_seen];
    if (job.decoder == nullptr || job.stopped || IsEos(id)) continue;
    StatusOr<std::string> piece = job.decoder->Add(id);
    if (!piece.ok()) continue;  // an id the tokenizer does not know has no text
    tokenizer::StopStringMatcher::Result r = job.matcher.Feed(*piece);
    job.text += r.text;
    job.stopped = r.stopped;
  }
}

JobOutcome BatchRunner::Complete(Job& job, const engine::SequenceResult& result) {
  JobOutcome outcome;
  outcome.batch_id = batch_id_;
  outcome.job_id = job.assignment.job_id;
  outcome.ok = true;
  api::JobOutput& out = outcome.output;
  out.prompt_tokens = static_cast<int64_t>(job.assignment.prompt.size());
  out.cached_prompt_tokens = result.shared_prompt_tokens;
  if (job.classification()) {
    out.finish_reason = "label";
    for (size_t i = 0; i < result.labels.size() && i < job.assignment.labels.size(); ++i) {
      out.labels.push_back({job.assignment.labels[i], result.labels[i].logprob});
    }
    if (result.best_label >= 0 && result.best_label < static_cast<int64_t>(out.labels.size())) {
      out.text = out.labels[result.best_label].label;
    }
    return outcome;
  }
  MatchStopStrings(job, result.generated);
  if (!job.stopped && job.decoder != nullptr) {
    StatusOr<std::string> tail = job.decoder->Finish();
    tokenizer::StopStringMatcher::Result r = job.matcher.Feed(tail.ok() ? *tail : "");
    job.text += r.text;
    job.stopped = r.stopped;
    if (!job.stopped) job.text += job.matcher.Finish();
  }
  out.text = job.text;
  out.token_ids = result.generated;
  out.completion_tokens = static_cast<int64_t>(result.generated.size());
  out.finish_reason =
      job.stopped || result.finish_reason == engine::FinishReason::kStop ? "stop" : "length";
  for (const engine::TokenLogprob& lp : result.logprobs) {
    api::TokenLogprob token{lp.token, TokenText(lp.token), lp.logprob, {}};
    for (const auto& [id, logprob] : lp.top) token.top.push_back({id, TokenText(id), logprob});
    out.logprobs.push_back(std::move(token));
  }
  return outcome;
}

StatusOr<PassOutcome> BatchRunner::RunPass() {
  if (jobs_.empty()) return FailedPrecondition("batch " + std::to_string(batch_id_) + " is empty");
  PassOutcome pass;
  NS_ASSIGN_OR_RETURN(pass.stats, engine_->Step());
  ++passes_;
  for (auto& [sequence, job] : jobs_) {
    if (job->prompt_counted) continue;
    job->prompt_counted = true;
    pass.prompt_tokens += PromptTokens(job->assignment);
  }
  std::map<engine::SequenceId, engine::SequenceResult> finished;
  for (engine::SequenceResult& r : engine_->TakeFinished()) finished[r.id] = std::move(r);
  // Live generation jobs: count their tokens and match stop strings; a match
  // ends the sequence now, and its result comes with the next TakeFinished.
  bool stopped_any = false;
  for (auto& [sequence, job] : jobs_) {
    if (finished.count(sequence) != 0 || job->classification()) continue;
    StatusOr<std::vector<engine::TokenId>> generated = engine_->Generated(sequence);
    if (!generated.ok()) return generated.status();
    pass.generated_tokens += static_cast<int64_t>(generated->size() - job->tokens_seen);
    pass.generated[job->assignment.job_id] = static_cast<int64_t>(generated->size());
    MatchStopStrings(*job, *generated);
    if (job->stopped) {
      NS_RETURN_IF_ERROR(engine_->Finish(sequence, engine::FinishReason::kStop));
      stopped_any = true;
    }
  }
  if (stopped_any) {
    for (engine::SequenceResult& r : engine_->TakeFinished()) finished[r.id] = std::move(r);
  }
  for (auto& [sequence, result] : finished) {
    auto it = jobs_.find(sequence);
    if (it == jobs_.end()) continue;  // cancelled meanwhile
    Job& job = *it->second;
    if (!job.classification() && pass.generated.count(job.assignment.job_id) == 0) {
      pass.generated_tokens += static_cast<int64_t>(result.generated.size() - job.tokens_seen);
    }
    pass.generated[job.assignment.job_id] = static_cast<int64_t>(result.generated.size());
    pass.finished.push_back(Complete(job, result));
    jobs_.erase(it);
  }
  return pass;
}

void BatchRunner::Cancel(const std::vector<int64_t>& job_ids) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const int64_t id = it->second->assignment.job_id;
    if (std::find(job_ids.begin(), job_ids.end(), id) == job_ids.end()) {
      ++it;
      continue;
    }
    (void)engine_->Cancel(it->first);  // NotFound only if it finished; nothing to drop then
    it = jobs_.erase(it);
  }
}

std::vector<int64_t> BatchRunner::TakeUnfinished() {
  std::vector<int64_t> ids;
  for (const auto& [sequence, job] : jobs_) {
    ids.push_back(job->assignment.job_id);
    (void)engine_->Cancel(sequence);
  }
  jobs_.clear();
  return ids;
}

std::vector<JobOutcome> BatchRunner::FailAll(const std::string& error) {
  std::vector<JobOutcome> outcomes;
  for (int64_t id : TakeUnfinished()) outcomes.push_back(Failed(batch_id_, id, error));
  return outcomes;
}

uint64_t BatchRunner::free_kv_bytes() const {
  const uint64_t used = engine_->kv_bytes_in_use();
  return used >= kv_budget_bytes_ ? 0 : kv_budget_bytes_ - used;
}

int64_t BatchRunner::free_pass_tokens() const {
  return std::max<int64_t>(0, pass_token_budget_ - engine_->next_pass_tokens());
}

}  // namespace nightshift::worker
