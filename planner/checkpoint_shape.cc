#include "planner/checkpoint_shape.h"

#include <initializer_list>
#include <map>
#include <optional>
#include <string>

namespace nightshift::planner {
namespace {

using nlohmann::json;

// The first of `names` holding a positive integer.
std::optional<int64_t> PositiveInt(const json& config, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = config.find(name);
    if (it != config.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
      return it->get<int64_t>();
    }
  }
  return std::nullopt;
}

const std::initializer_list<const char*> kHiddenNames = {"hidden_size", "n_embd", "d_model"};

// Multimodal configs nest the language model's shapes under text_config.
const json& TextConfig(const json& config) {
  auto nested = config.find("text_config");
  if (!PositiveInt(config, kHiddenNames) && nested != config.end() && nested->is_object()) {
    return *nested;
  }
  return config;
}

int64_t KvHeads(const json& config, int64_t heads) {
  if (auto kv = PositiveInt(config, {"num_key_value_heads", "num_kv_heads", "n_head_kv"})) {
    return *kv;
  }
  auto multi_query = config.find("multi_query");
  if (multi_query != config.end() && multi_query->is_boolean() && multi_query->get<bool>()) {
    return 1;
  }
  return heads;
}

int64_t VocabRows(const checkpoint::Checkpoint& ckpt, const json& config) {
  if (auto vocab = PositiveInt(config, {"vocab_size"})) return *vocab;
  const checkpoint::TensorInfo* largest = nullptr;
  for (int index : ckpt.embedding.tensors) {
    const checkpoint::TensorInfo& t = ckpt.tensors[index];
    if (!t.shape.empty() && (largest == nullptr || t.size > largest->size)) largest = &t;
  }
  return largest != nullptr ? largest->shape[0] : 0;
}

size_t DominantDTypeSize(const checkpoint::Checkpoint& ckpt) {
  std::map<checkpoint::DType, uint64_t> bytes;
  for (const checkpoint::TensorInfo& t : ckpt.tensors) bytes[t.dtype] += t.size;
  checkpoint::DType best = checkpoint::DType::kF32;
  uint64_t most = 0;
  for (const auto& [dtype, total] : bytes) {
    if (total > most) best = dtype, most = total;
  }
  return checkpoint::DTypeSize(best);
}

}  // namespace

StatusOr<CheckpointShape> ShapeOf(const checkpoint::Checkpoint& ckpt) {
  const std::string where = ckpt.dir + "/config.json: ";
  const json& config = TextConfig(ckpt.config);
  std::optional<int64_t> hidden = PositiveInt(config, kHiddenNames);
  if (!hidden) return DataLoss(where + "no hidden size (hidden_size, n_embd or d_model)");
  std::optional<int64_t> heads =
      PositiveInt(config, {"num_attention_heads", "n_head", "num_heads"});
  if (!heads) return DataLoss(where + "no attention head count (num_attention_heads or n_head)");
  if (ckpt.layers.empty()) return DataLoss(ckpt.dir + ": no decoder layers among the tensors");

  CheckpointShape s;
  s.hidden = *hidden;
  s.heads = *heads;
  s.kv_heads = KvHeads(config, s.heads);
  s.head_dim = PositiveInt(config, {"head_dim"}).value_or(s.hidden / s.heads);
  if (s.head_dim <= 0) return DataLoss(where + "hidden size smaller than the head count");
  s.intermediate =
      PositiveInt(config, {"intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"})
          .value_or(4 * s.hidden);
  s.vocab = VocabRows(ckpt, config);
  s.layers = static_cast<int>(ckpt.layers.size());
  s.tensor_bytes = ckpt.total_bytes;
  for (const checkpoint::FileInfo& f : ckpt.files) s.file_bytes += f.size;
  s.largest_group_bytes = ckpt.LargestGroupBytes();
  for (const checkpoint::TensorInfo& t : ckpt.tensors) {
    s.parameters += static_cast<uint64_t>(t.numel());
  }
  s.stored_dtype_bytes = static_cast<int>(DominantDTypeSize(ckpt));
  return s;
}

}  // namespace nightshift::planner
