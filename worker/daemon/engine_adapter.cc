#include "worker/daemon/engine_adapter.h"

namespace nightshift::worker {

StatusOr<std::unique_ptr<EngineBatchEngine>> EngineBatchEngine::Open(
    const std::string& dir, const engine::EngineOptions& options) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine, engine::Engine::Open(dir, options));
  return std::unique_ptr<EngineBatchEngine>(new EngineBatchEngine(std::move(engine)));
}

StatusOr<engine::SequenceId> EngineBatchEngine::Add(engine::SequenceRequest request) {
  return engine_->Add(std::move(request));
}
uint64_t EngineBatchEngine::kv_bytes_in_use() const { return engine_->kv_bytes_in_use(); }
int64_t EngineBatchEngine::next_pass_tokens() const { return engine_->next_pass_tokens(); }
std::vector<std::vector<engine::TokenId>> EngineBatchEngine::kept_prefixes() const {
  return engine_->kept_prefixes();
}
StatusOr<std::vector<engine::TokenId>> EngineBatchEngine::Generated(engine::SequenceId id) const {
  return engine_->Generated(id);
}
Status EngineBatchEngine::Finish(engine::SequenceId id, engine::FinishReason reason) {
  return engine_->Finish(id, reason);
}
Status EngineBatchEngine::Cancel(engine::SequenceId id) { return engine_->Cancel(id); }
StatusOr<engine::PassStats> EngineBatchEngine::Step() { return engine_->Step(); }
std::vector<engine::SequenceResult> EngineBatchEngine::TakeFinished() {
  return engine_->TakeFinished();
}
const std::vector<int64_t>& EngineBatchEngine::eos_token_ids() const {
  return engine_->eos_token_ids();
}

}  // namespace nightshift::worker
