#include "planner/checkpoint_shape.h"

#include <algorithm>
#include <map>
#include <string>

#include "planner/model_facts.h"
#include "worker/checkpoint/model_config.h"

namespace nightshift::planner {
namespace {

// The LM head's rows: the config's vocab_size, else the first dimension of
// the largest embedding tensor.
int64_t VocabRows(const checkpoint::Checkpoint& ckpt, int64_t config_vocab) {
  if (config_vocab > 0) return config_vocab;
  const checkpoint::TensorInfo* largest = nullptr;
  for (int index : ckpt.embedding.tensors) {
    const checkpoint::TensorInfo& t = ckpt.tensors[index];
    if (!t.shape.empty() && (largest == nullptr || t.size > largest->size)) largest = &t;
  }
  return largest != nullptr ? largest->shape[0] : 0;
}

size_t DominantDTypeSize(const checkpoint::Checkpoint& ckpt) {
  std::map<checkpoint::DType, uint64_t> bytes;
  // A quantized projection counts as F16: what it is dequantised to and
  // multiplied in on a GPU.
  for (const checkpoint::TensorInfo& t : ckpt.tensors) {
    bytes[t.quant ? checkpoint::DType::kF16 : t.dtype] += t.size;
  }
  checkpoint::DType best = checkpoint::DType::kF32;
  uint64_t most = 0;
  for (const auto& [dtype, total] : bytes) {
    if (total > most) best = dtype, most = total;
  }
  return checkpoint::DTypeSize(best);
}

}  // namespace

StatusOr<CheckpointShape> ShapeOf(const checkpoint::Checkpoint& ckpt) {
  NS_ASSIGN_OR_RETURN(checkpoint::ModelConfig config,
                      checkpoint::ParseModelShape(ckpt.config, ckpt.dir + "/config.json"));
  if (ckpt.layers.empty()) return DataLoss(ckpt.dir + ": no decoder layers among the tensors");

  CheckpointShape s;
  s.hidden = config.hidden_size;
  s.heads = config.num_heads;
  s.kv_heads = config.num_kv_heads;
  s.head_dim = config.head_dim;
  s.intermediate = config.intermediate_size;
  s.vocab = VocabRows(ckpt, config.vocab_size);
  s.layers = static_cast<int>(ckpt.layers.size());
  s.tensor_bytes = StreamedBytesPerPass(ckpt);
  for (const checkpoint::FileInfo& f : ckpt.files) s.file_bytes += f.size;
  s.moe = MoeFactsOf(ckpt);
  s.largest_group_bytes = ckpt.LargestGroupBytes();
  if (s.moe.is_moe()) {
    // A sparse layer is never read whole: its dense part and its expert
    // slices are the loader's units (StreamedGroupBytes).
    s.largest_group_bytes = std::max(ckpt.embedding.bytes, ckpt.head.bytes);
    for (uint64_t group : s.moe.group_bytes) {
      s.largest_group_bytes = std::max(s.largest_group_bytes, group);
    }
  }
  for (const checkpoint::TensorInfo& t : ckpt.tensors) {
    s.parameters += static_cast<uint64_t>(t.numel());
  }
  s.stored_dtype_bytes = static_cast<int>(DominantDTypeSize(ckpt));
  return s;
}

}  // namespace nightshift::planner
