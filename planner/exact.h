// Exact mode: the plan's sizes from a real checkpoint's shapes instead of
// the catalog's rules of thumb.
//
// The input is CheckpointShape, plain numbers that planner/checkpoint_shape.h
// reads from the checkpoint metadata (config + safetensors headers, no tensor
// data). What changes against the catalog estimate (planner/estimate.h):
//
//   checkpoint_gb  every tensor's bytes (what one pass reads)
//   disk           the safetensors files' bytes
//   largest layer  the largest streamed group: embedding, any decoder layer,
//                  or final norm + LM head (instead of 1.25 x the average)
//   KV per token   2 (K and V) x layers x kv_heads x head_dim x KV dtype bytes
//   activations    sized from the shapes and the tokens of the largest pass
//                  (instead of a flat 0.5 GB), see ActivationBytes
//
// Resident memory = largest layer x (2 with prefetch, 1 without)
//                 + ActivationBytes + KV per token x context tokens x batch.
//
// The KV cache and the activations live in the compute dtype: fp32 on CPU
// (bf16 arithmetic is slow there), the stored dtype on a GPU. GB is 10^9
// bytes; exact GB figures are rounded to 6 decimals (1 kB), so even a tiny
// checkpoint keeps meaningful figures. Every function is pure and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/estimate.h"
#include "planner/model_facts.h"
#include "planner/plan.h"

namespace nightshift::planner {

// A checkpoint's sizes and attention/MLP shapes.
struct CheckpointShape {
  uint64_t tensor_bytes = 0;         // all tensors: what one pass reads
  uint64_t file_bytes = 0;           // the safetensors files on disk
  uint64_t largest_group_bytes = 0;  // largest of embedding, any layer, head
  uint64_t parameters = 0;           // elements across all tensors
  int layers = 0;                    // decoder layers found in the checkpoint
  int64_t hidden = 0;                // hidden size
  int64_t heads = 0;                 // attention (query) heads
  int64_t kv_heads = 0;              // key/value heads (= heads without grouped-query attention)
  int64_t head_dim = 0;              // per-head width (config head_dim, else hidden / heads)
  int64_t intermediate = 0;          // MLP width
  int64_t vocab = 0;                 // LM head rows
  int stored_dtype_bytes = 2;        // element size of the dtype holding most bytes
  // The mixture of experts (MoeFacts::is_moe(); a dense checkpoint's facts
  // otherwise): what a pass of B rows is expected to read.
  MoeFacts moe;
};

enum class Device { kCpu, kGpu };

// Bytes per element of the compute dtype (KV cache, activations): 4 on CPU,
// the stored dtype's on a GPU.
int ComputeDtypeBytes(const CheckpointShape& shape, Device device);

// Tokens of context for `context_k` units of 1024 (rounded up).
int64_t ContextTokens(double context_k);

// K and V of one token across all layers: planner/model_facts.h's
// KvBytesPerToken (2 x layers x kv_heads x head_dim x kv_dtype_bytes) of
// `shape`.
uint64_t KvBytesPerToken(const CheckpointShape& shape, int kv_dtype_bytes);

// A fixed allowance for what is not tensors of the pass: libtorch's own
// code and thread pools, allocator slack, the process itself.
inline constexpr uint64_t kRuntimeOverheadBytes = 256ull << 20;

// The activation term of the resident footprint, in bytes. With
//   A = compute dtype bytes,  B = batch,  P = max(1, prompt_tokens),
//   T = B x P   (tokens in the largest pass: every prompt in its first pass),
//   C = context tokens,
//   q = heads x head_dim,  kv = kv_heads x head_dim,
//   W = 2 x hidden + 2 x q + 2 x kv + 2 x intermediate
//       (residual stream and its normed copy, queries and attention output,
//        keys and values, the MLP's two intermediate projections),
// it is
//   A x (T x W  +  heads x P x C  +  B x vocab)  +  kRuntimeOverheadBytes
// where heads x P x C bounds the attention scores of one sequence (the
// engine attends one sequence at a time; P queries against at most C keys),
// and B x vocab is the logits of the one position per sequence the LM head
// runs at. Without a prompt length (prompt_tokens = 0) the largest pass is a
// decode pass of one token per sequence.
uint64_t ActivationBytes(const CheckpointShape& shape, int compute_dtype_bytes, int64_t batch,
                         int64_t prompt_tokens, int64_t context_tokens);

// The exact sizing of `shape` under `options` (prefetching, context_k, batch
// and prompt_tokens are read) on `device`. layers_estimated is false. For a
// mixture of experts, pass_read_gb is what a decode pass of the batch (one
// row per sequence) is expected to read: ExpectedStreamedBytesPerPass of
// shape.moe at `batch` rows; unset for a dense checkpoint.
Sizing ExactSizing(const CheckpointShape& shape, const PlanOptions& options, Device device);

// One way to split what a memory budget leaves after the working set
// between the KV cache and pinned groups (partial residency).
struct PinSplit {
  int64_t kv_sequences = 0;      // sequences the KV budget holds at the planned context
  uint64_t kv_budget_bytes = 0;  // kv_sequences x KV bytes per sequence
  uint64_t pinned_bytes = 0;     // groups pinned with the rest (ChoosePinnedGroups)
  uint64_t streamed_bytes = 0;   // StreamedBytesPerPass with them pinned
  double seconds_per_pass = 0;   // PassSeconds(streamed_bytes, bandwidth)
  int64_t jobs_per_pass = 0;     // min(kv_sequences, queued jobs)
  double jobs_per_second = 0;    // jobs_per_pass / seconds_per_pass (0 when unknown)
};

struct PinSplitPlan {
  uint64_t working_set_bytes = 0;      // stream buffers + activation working set
  std::vector<PinSplit> alternatives;  // by kv_sequences, ascending
  size_t chosen = 0;                   // index into alternatives; meaningless when empty
};

// The splits of `memory_budget_bytes` after `working_set_bytes` for a queue of
// `queued_jobs` jobs (at least 1) of `kv_bytes_per_sequence` each, on a disk
// reading `read_bytes_per_second`, over the loader's groups `group_bytes`
// (StreamedGroupBytes) of a checkpoint of `total_bytes` tensor bytes
// (`embedding_bytes` of them the embedding's, see StreamedBytesPerPass). The
// alternatives are KV budgets of 1, 2, 4, ... sequences up to the most that
// fit, plus exactly the queue and the most that fit; each prices its passes
// from the streamed bytes (PassSeconds: seconds per pass = streamed bytes /
// bandwidth, the figure the worker advertises). The chosen split maximises
// jobs per second; ties (e.g. more KV than the queue fills) go to the one
// pinning more, whose passes are shorter. Empty when not even one
// sequence's KV fits beside the working set.
PinSplitPlan PlanPinSplit(const std::vector<uint64_t>& group_bytes, uint64_t total_bytes,
                          uint64_t embedding_bytes, uint64_t memory_budget_bytes,
                          uint64_t working_set_bytes, uint64_t kv_bytes_per_sequence,
                          int64_t queued_jobs, double read_bytes_per_second);
// The same over a checkpoint's MoeFacts (its groups, total and embedding
// bytes): a mixture of experts' split prices each pass at the bytes a pass
// of its jobs (one row each) is expected to read with the split's pins
// (ExpectedStreamedBytesPerPass), so more jobs per pass also read more
// experts. A dense checkpoint's facts give the figures above.
PinSplitPlan PlanPinSplit(const MoeFacts& facts, uint64_t memory_budget_bytes,
                          uint64_t working_set_bytes, uint64_t kv_bytes_per_sequence,
                          int64_t queued_jobs, double read_bytes_per_second);

// The catalog entry the seed would have for this checkpoint, to show its
// estimate beside the exact one: size_b = parameters / 10^9, the real layer
// count (declared), bytes_per_param = tensor_bytes / parameters.
ModelSpec HeuristicSpec(const CheckpointShape& shape);

}  // namespace nightshift::planner
