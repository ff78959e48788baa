#include "planner/exact.h"

#include <algorithm>
#include <cmath>

#include "planner/model_facts.h"
#include "planner/round.h"

namespace nightshift::planner {
namespace {

constexpr double kBytesPerGb = 1e9;
constexpr int kExactGbDecimals = 6;

double Gb(uint64_t bytes) {
  return PyRound(static_cast<double>(bytes) / kBytesPerGb, kExactGbDecimals);
}

}  // namespace

int ComputeDtypeBytes(const CheckpointShape& shape, Device device) {
  return device == Device::kCpu ? 4 : shape.stored_dtype_bytes;
}

int64_t ContextTokens(double context_k) {
  return static_cast<int64_t>(std::ceil(context_k * kTokensPerK));
}

uint64_t KvBytesPerToken(const CheckpointShape& shape, int kv_dtype_bytes) {
  return KvBytesPerToken(shape.layers, shape.kv_heads, shape.head_dim, kv_dtype_bytes);
}

uint64_t ActivationBytes(const CheckpointShape& shape, int compute_dtype_bytes, int64_t batch,
                         int64_t prompt_tokens, int64_t context_tokens) {
  const uint64_t a = static_cast<uint64_t>(compute_dtype_bytes);
  const uint64_t b = static_cast<uint64_t>(std::max<int64_t>(1, batch));
  const uint64_t p = static_cast<uint64_t>(std::max<int64_t>(1, prompt_tokens));
  const uint64_t c = static_cast<uint64_t>(std::max<int64_t>(1, context_tokens));
  const uint64_t q = static_cast<uint64_t>(shape.heads * shape.head_dim);
  const uint64_t kv = static_cast<uint64_t>(shape.kv_heads * shape.head_dim);
  const uint64_t width = 2 * static_cast<uint64_t>(shape.hidden) + 2 * q + 2 * kv +
                         2 * static_cast<uint64_t>(shape.intermediate);
  const uint64_t per_pass = b * p * width;
  const uint64_t scores = static_cast<uint64_t>(shape.heads) * p * c;
  const uint64_t logits = b * static_cast<uint64_t>(shape.vocab);
  return a * (per_pass + scores + logits) + kRuntimeOverheadBytes;
}

Sizing ExactSizing(const CheckpointShape& shape, const PlanOptions& options, Device device) {
  const int dtype_bytes = ComputeDtypeBytes(shape, device);
  const int64_t context = ContextTokens(options.context_k);
  const uint64_t batch = static_cast<uint64_t>(std::max<int64_t>(1, options.batch));
  const uint64_t kv_per_sequence =
      KvBytesPerToken(shape, dtype_bytes) * static_cast<uint64_t>(context);
  const uint64_t activations =
      ActivationBytes(shape, dtype_bytes, options.batch, options.prompt_tokens, context);
  const uint64_t resident_layers = options.prefetching ? 2 : 1;

  Sizing s;
  s.checkpoint_gb = Gb(shape.tensor_bytes);
  s.activation_gb = Gb(activations);
  s.kv_cache_gb = Gb(kv_per_sequence);
  // A mixture of experts' loader also reads the next dense part ahead of
  // each layer's routing, into buffers of its own (LookAheadBufferBytes).
  const uint64_t look_ahead = LookAheadBufferBytes(shape.moe.group_bytes, {}, options.prefetching,
                                                   DeferredGroups(shape.moe));
  s.resident_gb = Gb(shape.largest_group_bytes * resident_layers + look_ahead + activations +
                     kv_per_sequence * batch);
  double disk = Gb(shape.file_bytes);
  s.disk = {disk, disk};
  s.layers = shape.layers;
  s.layers_estimated = false;
  if (shape.moe.is_moe()) {
    s.pass_read_gb = Gb(ExpectedStreamedBytesPerPass(shape.moe, static_cast<int64_t>(batch)));
  }
  return s;
}

PinSplitPlan PlanPinSplit(const std::vector<uint64_t>& group_bytes, uint64_t total_bytes,
                          uint64_t embedding_bytes, uint64_t memory_budget_bytes,
                          uint64_t working_set_bytes, uint64_t kv_bytes_per_sequence,
                          int64_t queued_jobs, double read_bytes_per_second) {
  MoeFacts dense;  // no sparse layer: every group is read
  dense.total_bytes = total_bytes;
  dense.embedding_bytes = embedding_bytes;
  dense.group_bytes = group_bytes;
  dense.group_experts.assign(group_bytes.size(), 0);
  return PlanPinSplit(dense, memory_budget_bytes, working_set_bytes, kv_bytes_per_sequence,
                      queued_jobs, read_bytes_per_second);
}

PinSplitPlan PlanPinSplit(const MoeFacts& facts, uint64_t memory_budget_bytes,
                          uint64_t working_set_bytes, uint64_t kv_bytes_per_sequence,
                          int64_t queued_jobs, double read_bytes_per_second) {
  const std::vector<uint64_t>& group_bytes = facts.group_bytes;
  PinSplitPlan plan;
  plan.working_set_bytes = working_set_bytes;
  const uint64_t left = PinBudgetBytes(memory_budget_bytes, working_set_bytes, 0, 0);
  const uint64_t per_sequence = std::max<uint64_t>(1, kv_bytes_per_sequence);
  const int64_t most = static_cast<int64_t>(std::min<uint64_t>(left / per_sequence, 1u << 30));
  if (most < 1) return plan;
  const int64_t queue = std::max<int64_t>(1, queued_jobs);
  std::vector<int64_t> counts;
  for (int64_t k = 1; k < most; k *= 2) counts.push_back(k);
  counts.push_back(std::min(queue, most));
  counts.push_back(most);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  for (int64_t k : counts) {
    PinSplit split;
    split.kv_sequences = k;
    split.kv_budget_bytes = static_cast<uint64_t>(k) * per_sequence;
    const std::vector<bool> pinned = ChoosePinnedGroups(group_bytes, left - split.kv_budget_bytes);
    split.pinned_bytes = PinnedBytes(group_bytes, pinned);
    split.jobs_per_pass = std::min(k, queue);
    split.streamed_bytes = ExpectedStreamedBytesPerPass(facts, split.jobs_per_pass, pinned);
    split.seconds_per_pass = PassSeconds(split.streamed_bytes, read_bytes_per_second);
    if (split.seconds_per_pass > 0) {
      split.jobs_per_second = static_cast<double>(split.jobs_per_pass) / split.seconds_per_pass;
    }
    plan.alternatives.push_back(split);
  }
  for (size_t i = 1; i < plan.alternatives.size(); ++i) {
    const PinSplit& a = plan.alternatives[i];
    const PinSplit& best = plan.alternatives[plan.chosen];
    if (a.jobs_per_second > best.jobs_per_second ||
        (a.jobs_per_second == best.jobs_per_second && a.pinned_bytes > best.pinned_bytes)) {
      plan.chosen = i;
    }
  }
  return plan;
}

ModelSpec HeuristicSpec(const CheckpointShape& shape) {
  ModelSpec spec;
  spec.size_b = static_cast<double>(shape.parameters) / 1e9;
  spec.layers = shape.layers;
  if (shape.parameters > 0) {
    spec.bytes_per_param =
        static_cast<double>(shape.tensor_bytes) / static_cast<double>(shape.parameters);
  }
  return spec;
}

}  // namespace nightshift::planner
