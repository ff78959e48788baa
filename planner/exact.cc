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
  s.resident_gb =
      Gb(shape.largest_group_bytes * resident_layers + activations + kv_per_sequence * batch);
  double disk = Gb(shape.file_bytes);
  s.disk = {disk, disk};
  s.layers = shape.layers;
  s.layers_estimated = false;
  return s;
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
