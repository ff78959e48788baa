#include "planner/model_facts.h"

#include <algorithm>

namespace nightshift::planner {

uint64_t KvBytesPerToken(int64_t layers, int64_t kv_heads, int64_t head_dim, int kv_dtype_bytes) {
  if (layers <= 0 || kv_heads <= 0 || head_dim <= 0 || kv_dtype_bytes <= 0) return 0;
  return 2ull * static_cast<uint64_t>(layers) * static_cast<uint64_t>(kv_heads) *
         static_cast<uint64_t>(head_dim) * static_cast<uint64_t>(kv_dtype_bytes);
}

uint64_t KvBytesPerToken(const checkpoint::ModelConfig& config, int kv_dtype_bytes) {
  return KvBytesPerToken(config.num_layers, config.num_kv_heads, config.head_dim, kv_dtype_bytes);
}

int64_t KvPositions(int64_t prompt_tokens, int64_t max_new_tokens,
                    const std::vector<int64_t>& label_tokens) {
  if (label_tokens.empty()) return prompt_tokens + std::max<int64_t>(max_new_tokens - 1, 0);
  int64_t positions = prompt_tokens;
  for (int64_t tokens : label_tokens) positions += tokens;
  return positions;
}

bool EndsInFirstPass(int64_t max_new_tokens, const std::vector<int64_t>& label_tokens) {
  return !label_tokens.empty() || max_new_tokens <= 1;
}

int64_t ReservedKvPositions(int64_t prompt_tokens, int64_t max_new_tokens,
                            const std::vector<int64_t>& label_tokens) {
  if (EndsInFirstPass(max_new_tokens, label_tokens)) return 0;
  return KvPositions(prompt_tokens, max_new_tokens, label_tokens);
}

int64_t FirstPassTokens(int64_t prompt_tokens, const std::vector<int64_t>& label_tokens) {
  int64_t tokens = prompt_tokens;
  for (int64_t t : label_tokens) tokens += t;
  return tokens;
}

uint64_t PassTokenBytes(const checkpoint::ModelConfig& config) {
  return 4ull * static_cast<uint64_t>(std::max<int64_t>(config.hidden_size, 0)) +
         KvBytesPerToken(1, config.num_kv_heads, config.head_dim, kEngineKvDtypeBytes);
}

int64_t DefaultPassTokenBudget(const checkpoint::ModelConfig& config) {
  const uint64_t per_token = std::max<uint64_t>(1, PassTokenBytes(config));
  return static_cast<int64_t>(std::max<uint64_t>(1, kDefaultPassTokenMemory / per_token));
}

int64_t MaxContextTokens(const checkpoint::ModelConfig& config) {
  int64_t context = config.max_position_embeddings;
  if (config.sliding_window && *config.sliding_window < context) context = *config.sliding_window;
  return context;
}

uint64_t StreamedBytesPerPass(const checkpoint::Checkpoint& checkpoint) {
  return checkpoint.total_bytes;
}

double PassSeconds(uint64_t streamed_bytes, double read_bytes_per_second) {
  if (!(read_bytes_per_second > 0)) return 0;
  return static_cast<double>(streamed_bytes) / read_bytes_per_second;
}

}  // namespace nightshift::planner
