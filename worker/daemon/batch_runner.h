// Runs the jobs of one batch on an engine, a pass at a time, and turns what
// the engine produces into job outcomes: text decoded with the model's
// tokenizer, stop strings matched on that text (the sequence is then ended
// with Engine::Finish), logprobs with token texts, classification scores.
//
// The engine sits behind BatchEngine, the part of engine::Engine a batch
// needs, so the runner is tested with a scripted fake; EngineBatchEngine
// (engine_adapter.h) is the real one.
//
// Thread-safety: none; one thread (the worker's runner) drives a BatchRunner.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/daemon/types.h"
#include "worker/engine/engine.h"
#include "worker/tokenizer/stop_strings.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift::worker {

// What a batch needs of an engine; see engine::Engine for each call's
// contract. Implementations are driven by one thread.
class BatchEngine {
 public:
  virtual ~BatchEngine() = default;
  virtual StatusOr<engine::SequenceId> Add(engine::SequenceRequest request) = 0;
  virtual uint64_t kv_bytes_in_use() const = 0;
  virtual int64_t next_pass_tokens() const = 0;
  virtual std::vector<std::vector<engine::TokenId>> kept_prefixes() const { return {}; }
  virtual StatusOr<std::vector<engine::TokenId>> Generated(engine::SequenceId id) const = 0;
  virtual Status Finish(engine::SequenceId id, engine::FinishReason reason) = 0;
  virtual Status Cancel(engine::SequenceId id) = 0;
  virtual StatusOr<engine::PassStats> Step() = 0;
  virtual std::vector<engine::SequenceResult> TakeFinished() = 0;
  virtual const std::vector<int64_t>& eos_token_ids() const = 0;
};

// What one pass did for the batch.
struct PassOutcome {
  engine::PassStats stats;
  std::map<int64_t, int64_t> generated;  // job id -> tokens generated so far (finished ones too)
  std::vector<JobOutcome> finished;      // jobs that finished in this pass
  int64_t prompt_tokens = 0;             // prompt and label tokens first fed in this pass
  int64_t generated_tokens = 0;          // tokens generated in this pass
};

class BatchRunner {
 public:
  // `engine` must outlive the runner (the worker keeps it open across
  // batches of the same model); `tokenizer` may be null (no text then, and
  // stop strings cannot match). `kv_budget_bytes` and `pass_token_budget`
  // are the engine's budgets (0: no pass-token limit).
  BatchRunner(int64_t batch_id, BatchEngine* engine, const tokenizer::Tokenizer* tokenizer,
              uint64_t kv_budget_bytes, int64_t pass_token_budget = 0);
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  struct AddResult {
    std::vector<JobOutcome> failed;    // refused by the engine for a reason of the job's own
    std::vector<int64_t> handed_back;  // no room in the KV budget now: give them back
  };
  // Queues jobs for the next pass. A job the engine refuses as invalid
  // (InvalidArgument, e.g. a prompt longer than the context) fails alone;
  // one that does not fit the KV budget or the next pass's tokens left
  // (ResourceExhausted) is handed back. A job id already in the batch is ignored.
  AddResult Add(const std::vector<JobAssignment>& jobs);

  // Runs one pass (FailedPrecondition when nothing is in flight). An engine
  // error is returned as is; the engine is then unusable (see Engine::Step)
  // and the caller fails the batch with FailAll.
  StatusOr<PassOutcome> RunPass();

  // Drops jobs without a result (the scheduler cancelled them). Unknown ids
  // are ignored.
  void Cancel(const std::vector<int64_t>& job_ids);
  // Drops every job still in flight and returns their ids (to hand back).
  std::vector<int64_t> TakeUnfinished();
  // Every job still in flight as failed with `error`; the batch is empty after.
  std::vector<JobOutcome> FailAll(const std::string& error);

  int64_t batch_id() const { return batch_id_; }
  bool empty() const { return jobs_.empty(); }
  size_t size() const { return jobs_.size(); }
  uint64_t free_kv_bytes() const;
  // Of the pass-token budget, what the next pass leaves for joining jobs; 0
  // without a budget.
  int64_t free_pass_tokens() const;
  int64_t passes() const { return passes_; }

 private:
  struct Job;

  void MatchStopStrings(Job& job, const std::vector<engine::TokenId>& generated);
  JobOutcome Complete(Job& job, const engine::SequenceResult& result);
  std::string TokenText(engine::TokenId id) const;
  bool IsEos(engine::TokenId id) const;

  int64_t batch_id_;
  BatchEngine* engine_;
  const tokenizer::Tokenizer* tokenizer_;
  uint64_t kv_budget_bytes_;
  int64_t pass_token_budget_;
  int64_t passes_ = 0;
  std::map<engine::SequenceId, std::unique_ptr<Job>> jobs_;  // by sequence id (add order)
};

}  // namespace nightshift::worker
