// The real BatchEngine: an engine::Engine opened on one checkpoint with the
// worker's residency, KV budget, device and thread settings.
//
// Thread-safety: as engine::Engine (one driving thread).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/daemon/batch_runner.h"
#include "worker/engine/engine.h"

namespace nightshift::worker {

class EngineBatchEngine : public BatchEngine {
 public:
  // Opens `dir` with `options` (Engine::Open's errors).
  static StatusOr<std::unique_ptr<EngineBatchEngine>> Open(const std::string& dir,
                                                           const engine::EngineOptions& options);

  StatusOr<engine::SequenceId> Add(engine::SequenceRequest request) override;
  uint64_t kv_bytes_in_use() const override;
  int64_t next_pass_tokens() const override;
  std::vector<std::vector<engine::TokenId>> kept_prefixes() const override;
  StatusOr<std::vector<engine::TokenId>> Generated(engine::SequenceId id) const override;
  Status Finish(engine::SequenceId id, engine::FinishReason reason) override;
  Status Cancel(engine::SequenceId id) override;
  StatusOr<engine::PassStats> Step() override;
  std::vector<engine::SequenceResult> TakeFinished() override;
  const std::vector<int64_t>& eos_token_ids() const override;

 private:
  explicit EngineBatchEngine(std::unique_ptr<engine::Engine> engine) : engine_(std::move(engine)) {}
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace nightshift::worker
