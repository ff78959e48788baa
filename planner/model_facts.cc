#include "planner/model_facts.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace nightshift::planner {

int DefaultKvDtypeBytes(bool accelerator_path, int projection_dtype_bytes) {
  return accelerator_path && projection_dtype_bytes == 2 ? 2 : kEngineKvDtypeBytes;
}

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

int64_t SharedFirstPassTokens(int64_t batch, int64_t prompt_tokens, int64_t shared_prefix_tokens) {
  if (batch <= 0) return 0;
  return shared_prefix_tokens + batch * (prompt_tokens - shared_prefix_tokens);
}

bool KeepPrefixFromPins(int64_t prefix_tokens, uint64_t kv_bytes, double compute_seconds_per_token,
                        double read_bytes_per_second) {
  if (!(compute_seconds_per_token > 0) || !(read_bytes_per_second > 0)) return false;
  return static_cast<double>(prefix_tokens) * compute_seconds_per_token >
         static_cast<double>(kv_bytes) / read_bytes_per_second;
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

int64_t HeadSliceRows(int64_t rows, uint64_t head_bytes, uint64_t largest_layer_bytes) {
  if (rows <= 0) return 1;
  const uint64_t fit =
      largest_layer_bytes == 0 ? 1 : (head_bytes + largest_layer_bytes - 1) / largest_layer_bytes;
  const uint64_t tail = std::min<uint64_t>(kMinHeadSlices, head_bytes / kMinHeadSliceBytes);
  const int64_t slices = static_cast<int64_t>(std::max<uint64_t>({1, fit, tail}));
  int64_t per_slice = (rows + std::min(slices, rows) - 1) / std::min(slices, rows);
  if (largest_layer_bytes > 0) {  // rounding up must not take a slice past the bound
    const uint64_t row_bytes = std::max<uint64_t>(1, head_bytes / static_cast<uint64_t>(rows));
    per_slice = std::min(
        per_slice, std::max<int64_t>(1, static_cast<int64_t>(largest_layer_bytes / row_bytes)));
  }
  return per_slice;
}

namespace {

// Runs of whole experts in index order, each of at most `cap` bytes but for
// an expert larger than that, alone.
std::vector<ExpertSlice> PackExperts(const std::vector<uint64_t>& expert_bytes, uint64_t cap) {
  std::vector<ExpertSlice> slices;
  for (size_t e = 0; e < expert_bytes.size(); ++e) {
    const int64_t index = static_cast<int64_t>(e);
    if (slices.empty() || slices.back().bytes + expert_bytes[e] > cap) {
      slices.push_back({index, index, 0});
    }
    slices.back().end = index + 1;
    slices.back().bytes += expert_bytes[e];
  }
  return slices;
}

}  // namespace

std::vector<ExpertSlice> ExpertSlices(const std::vector<uint64_t>& expert_bytes,
                                      uint64_t slice_bytes) {
  // The fewest slices packing allows, then the smallest cap that keeps that
  // many (packing in order is exact for runs: it finds whether a cap allows
  // n slices).
  std::vector<ExpertSlice> best = PackExperts(expert_bytes, slice_bytes);
  uint64_t low = 1, high = slice_bytes;  // `high` keeps best.size() slices
  while (low < high) {
    const uint64_t mid = low + (high - low) / 2;
    std::vector<ExpertSlice> packed = PackExperts(expert_bytes, mid);
    if (packed.size() <= best.size()) {
      high = mid;
      best = std::move(packed);
    } else {
      low = mid + 1;
    }
  }
  return best;
}

double ExpectedExpertsTouched(int64_t experts, int64_t top_k, int64_t rows) {
  if (experts <= 0 || top_k <= 0 || rows <= 0) return 0;
  const double e = static_cast<double>(experts);
  const double miss = 1.0 - std::min(1.0, static_cast<double>(top_k) / e);
  return e * (1.0 - std::pow(miss, static_cast<double>(rows)));
}

double ExpertTouchedProbability(int64_t experts, int64_t top_k, uint64_t routed, uint64_t seen_rows,
                                int64_t rows) {
  if (experts <= 0 || rows <= 0) return 0;
  const double k = static_cast<double>(std::clamp<int64_t>(top_k, 0, experts));
  const double share =
      std::min(1.0, (static_cast<double>(routed) + k) /
                        (static_cast<double>(seen_rows) + static_cast<double>(experts)));
  return 1.0 - std::pow(1.0 - share, static_cast<double>(rows));
}

bool ReadExpertsAhead(double touched_fraction, uint64_t expert_bytes, double read_bytes_per_second,
                      double routing_wait_seconds) {
  if (!(read_bytes_per_second > 0)) return false;
  const double untouched = std::max(0.0, 1.0 - touched_fraction);
  return untouched * static_cast<double>(expert_bytes) / read_bytes_per_second <
         routing_wait_seconds;
}

namespace {

// The LM head: its own tensor, or the embedding's when tied (the largest
// embedding tensor, as the engine binds it); null when there is neither.
const checkpoint::TensorInfo* HeadTensor(const checkpoint::Checkpoint& checkpoint) {
  if (checkpoint.lm_head >= 0) return &checkpoint.tensors[static_cast<size_t>(checkpoint.lm_head)];
  const checkpoint::TensorInfo* head = nullptr;
  for (int t : checkpoint.embedding.tensors) {
    const checkpoint::TensorInfo& info = checkpoint.tensors[static_cast<size_t>(t)];
    if (head == nullptr || info.size > head->size) head = &info;
  }
  return head;
}

// A weight matrix a pass multiplies: a float one, or a quantized module
// (its logical [out, in], whatever its packed parts' dtypes).
bool IsProjectionMatrix(const checkpoint::TensorInfo& t) {
  return t.shape.size() == 2 &&
         (t.quant != nullptr || t.dtype == checkpoint::DType::kF32 ||
          t.dtype == checkpoint::DType::kF16 || t.dtype == checkpoint::DType::kBF16);
}

double MatrixFlops(const checkpoint::TensorInfo& t) {
  return 2.0 * static_cast<double>(t.shape[0]) * static_cast<double>(t.shape[1]);
}

// One decoder layer as the loader reads it: its dense part (every tensor
// that is not an expert's) and its experts in index order (the indices
// present; checkpoint::ExpertIndex), with what each costs.
struct LayerSplit {
  uint64_t dense_bytes = 0;
  uint64_t dense_elements = 0;
  double dense_flops = 0;  // per token
  std::vector<uint64_t> expert_bytes;
  uint64_t expert_elements = 0;  // all experts together
  double expert_flops = 0;       // all experts together, per token
  int64_t experts() const { return static_cast<int64_t>(expert_bytes.size()); }
};

LayerSplit SplitLayer(const checkpoint::Checkpoint& checkpoint,
                      const checkpoint::TensorGroup& layer) {
  LayerSplit split;
  std::map<int, uint64_t> experts;
  for (int t : layer.tensors) {
    const checkpoint::TensorInfo& info = checkpoint.tensors[static_cast<size_t>(t)];
    const double flops = IsProjectionMatrix(info) ? MatrixFlops(info) : 0;
    const uint64_t elements = static_cast<uint64_t>(std::max<int64_t>(0, info.numel()));
    const int expert = checkpoint::ExpertIndex(info.name);
    if (expert < 0) {
      split.dense_bytes += info.size;
      split.dense_elements += elements;
      split.dense_flops += flops;
    } else {
      experts[expert] += info.size;
      split.expert_elements += elements;
      split.expert_flops += flops;
    }
  }
  for (const auto& [index, bytes] : experts) split.expert_bytes.push_back(bytes);
  return split;
}

// Experts each token runs in a checkpoint whose sparse layers hold at most
// `experts`: the config's top_k (checkpoint::ParseModelShape), at most
// `experts`; `experts` when the config does not say.
int64_t TopK(const checkpoint::Checkpoint& checkpoint, int64_t experts) {
  StatusOr<checkpoint::ModelConfig> config = checkpoint::ParseModelShape(checkpoint.config);
  if (!config.ok() || config->moe.top_k <= 0) return experts;
  return std::min(config->moe.top_k, experts);
}

// The loader's groups (StreamedGroupBytes) and the experts each holds (0 for
// a dense group).
void LoaderGroups(const checkpoint::Checkpoint& checkpoint, uint64_t expert_slice_bytes,
                  std::vector<uint64_t>* groups, std::vector<int64_t>* group_experts) {
  uint64_t largest_layer = 0;
  auto add = [&](uint64_t bytes, int64_t experts) {
    groups->push_back(bytes);
    group_experts->push_back(experts);
    largest_layer = std::max(largest_layer, bytes);
  };
  for (const checkpoint::TensorGroup& layer : checkpoint.layers) {
    const LayerSplit split = SplitLayer(checkpoint, layer);
    add(split.dense_bytes, 0);
    for (const ExpertSlice& slice : ExpertSlices(split.expert_bytes, expert_slice_bytes)) {
      add(slice.bytes, slice.end - slice.first);
    }
  }
  const checkpoint::TensorInfo* head = HeadTensor(checkpoint);
  uint64_t norm = 0;  // the head group's other tensors: the final norm (and bias)
  for (int t : checkpoint.head.tensors) {
    if (t != checkpoint.lm_head) norm += checkpoint.tensors[static_cast<size_t>(t)].size;
  }
  if (head == nullptr || head->shape.empty() || head->shape[0] <= 0) {
    groups->push_back(norm);
    group_experts->push_back(0);
    return;
  }
  const int64_t rows = head->shape[0];
  const uint64_t row_bytes = head->size / static_cast<uint64_t>(rows);
  const int64_t per_slice = HeadSliceRows(rows, head->size, largest_layer);
  for (int64_t row = 0; row < rows; row += per_slice) {
    const uint64_t bytes = static_cast<uint64_t>(std::min(per_slice, rows - row)) * row_bytes;
    groups->push_back(bytes + (row == 0 ? norm : 0));
    group_experts->push_back(0);
  }
}

}  // namespace

std::vector<uint64_t> StreamedGroupBytes(const checkpoint::Checkpoint& checkpoint,
                                         uint64_t expert_slice_bytes) {
  std::vector<uint64_t> groups;
  std::vector<int64_t> experts;
  LoaderGroups(checkpoint, expert_slice_bytes, &groups, &experts);
  return groups;
}

std::vector<uint64_t> StreamedGroupBytes(const checkpoint::Checkpoint& checkpoint) {
  return StreamedGroupBytes(checkpoint, kDefaultExpertSliceBytes);
}

const char* PinPlacementName(PinPlacement placement) {
  switch (placement) {
    case PinPlacement::kHead:
      return "head";
    case PinPlacement::kTail:
      return "tail";
    case PinPlacement::kSpread:
      break;
  }
  return "spread";
}

StatusOr<PinPlacement> ParsePinPlacement(const std::string& word) {
  for (PinPlacement p : {PinPlacement::kSpread, PinPlacement::kHead, PinPlacement::kTail}) {
    if (word == PinPlacementName(p)) return p;
  }
  return InvalidArgument("pin placement '" + word + "': expected spread, head or tail");
}

namespace {

// 0..n-1 in bit-reversed order of the smallest power of two >= n (values
// >= n skipped): 0, n/2, n/4, 3n/4, ... so any prefix is spread evenly.
std::vector<size_t> SpreadOrder(size_t n) {
  size_t bits = 0;
  while ((size_t{1} << bits) < n) ++bits;
  std::vector<size_t> order;
  for (size_t i = 0; i < (size_t{1} << bits); ++i) {
    size_t r = 0;
    for (size_t b = 0; b < bits; ++b) {
      if (i & (size_t{1} << b)) r |= size_t{1} << (bits - 1 - b);
    }
    if (r < n) order.push_back(r);
  }
  return order;
}

}  // namespace

std::vector<bool> ChoosePinnedGroups(const std::vector<uint64_t>& group_bytes,
                                     uint64_t pin_budget_bytes, PinPlacement placement) {
  const size_t n = group_bytes.size();
  std::vector<bool> pinned(n, false);
  std::vector<size_t> order;
  if (placement == PinPlacement::kSpread) {
    order = SpreadOrder(n);
  } else {
    for (size_t i = 0; i < n; ++i)
      order.push_back(placement == PinPlacement::kHead ? i : n - 1 - i);
  }
  uint64_t left = pin_budget_bytes;
  for (size_t g : order) {
    if (group_bytes[g] <= left) {
      pinned[g] = true;
      left -= group_bytes[g];
    }
  }
  return pinned;
}

uint64_t PinnedBytes(const std::vector<uint64_t>& group_bytes, const std::vector<bool>& pinned) {
  uint64_t bytes = 0;
  for (size_t g = 0; g < group_bytes.size() && g < pinned.size(); ++g) {
    if (pinned[g]) bytes += group_bytes[g];
  }
  return bytes;
}

std::vector<bool> ChooseHostTierGroups(const std::vector<uint64_t>& group_bytes,
                                       const std::vector<bool>& device_pinned,
                                       uint64_t host_budget_bytes, bool prefetch,
                                       PinPlacement placement, const std::vector<bool>& deferred) {
  std::vector<bool> host(group_bytes.size(), false);
  const uint64_t buffers = StreamBufferBytes(group_bytes, device_pinned, prefetch, deferred);
  if (host_budget_bytes <= buffers) return host;
  std::vector<size_t> candidates;  // the groups the device does not keep, in pass order
  std::vector<uint64_t> candidate_bytes;
  for (size_t g = 0; g < group_bytes.size(); ++g) {
    if (device_pinned.empty() || !device_pinned[g]) {
      candidates.push_back(g);
      candidate_bytes.push_back(group_bytes[g]);
    }
  }
  const std::vector<bool> chosen =
      ChoosePinnedGroups(candidate_bytes, host_budget_bytes - buffers, placement);
  for (size_t i = 0; i < candidates.size(); ++i) host[candidates[i]] = chosen[i];
  return host;
}

uint64_t ActivationBytesPerRow(const checkpoint::ModelConfig& c) {
  return 4 * static_cast<uint64_t>(std::max<int64_t>(
                 0, 8 * c.hidden_size + 6 * c.q_dim() + 6 * c.kv_dim() + 3 * c.intermediate_size));
}

int64_t MicroBatchRows(const checkpoint::ModelConfig& c, uint64_t activation_budget_bytes) {
  constexpr uint64_t kMaxRows = 256;
  const uint64_t per_row = ActivationBytesPerRow(c);
  if (activation_budget_bytes == 0 || per_row == 0) return static_cast<int64_t>(kMaxRows);
  return static_cast<int64_t>(std::clamp<uint64_t>(activation_budget_bytes / per_row, 1, kMaxRows));
}

uint64_t ActivationWorkingSetBytes(const checkpoint::ModelConfig& c,
                                   uint64_t activation_budget_bytes) {
  constexpr uint64_t kMaxScoreBytes = 64ull << 20;
  const uint64_t scores = activation_budget_bytes > 0
                              ? std::min(activation_budget_bytes, kMaxScoreBytes)
                              : kMaxScoreBytes;
  return static_cast<uint64_t>(MicroBatchRows(c, activation_budget_bytes)) *
             ActivationBytesPerRow(c) +
         2 * scores;
}

uint64_t PinBudgetBytes(uint64_t memory_budget, uint64_t stream_buffer_bytes,
                        uint64_t activation_bytes, uint64_t kv_budget_bytes) {
  uint64_t left = memory_budget;
  for (uint64_t use : {stream_buffer_bytes, activation_bytes, kv_budget_bytes}) {
    left -= std::min(left, use);
  }
  return left;
}

std::vector<bool> LookAheadGroups(const std::vector<bool>& deferred) {
  const size_t n = deferred.size();
  std::vector<bool> ahead(n, false);
  for (size_t g = 0; g < n && n > 2; ++g) {
    ahead[g] = !deferred[g] && deferred[(g + n - 1) % n] && deferred[(g + 1) % n];
  }
  return ahead;
}

namespace {

// The largest group not pinned among those `among` marks (empty: all).
uint64_t LargestStreamed(const std::vector<uint64_t>& group_bytes, const std::vector<bool>& pinned,
                         const std::vector<bool>& among) {
  uint64_t largest = 0;
  for (size_t g = 0; g < group_bytes.size(); ++g) {
    const bool streamed = g >= pinned.size() || !pinned[g];
    const bool counted = among.empty() || (g < among.size() && among[g]);
    if (streamed && counted) largest = std::max(largest, group_bytes[g]);
  }
  return largest;
}

}  // namespace

uint64_t StreamBufferBytes(const std::vector<uint64_t>& group_bytes,
                           const std::vector<bool>& pinned, bool prefetch,
                           const std::vector<bool>& deferred) {
  return LargestStreamed(group_bytes, pinned, {}) * (prefetch ? 2 : 1) +
         LookAheadBufferBytes(group_bytes, pinned, prefetch, deferred);
}

uint64_t LookAheadBufferBytes(const std::vector<uint64_t>& group_bytes,
                              const std::vector<bool>& pinned, bool prefetch,
                              const std::vector<bool>& deferred) {
  const std::vector<bool> ahead = LookAheadGroups(deferred);
  if (!prefetch || std::find(ahead.begin(), ahead.end(), true) == ahead.end()) return 0;
  return 2 * LargestStreamed(group_bytes, pinned, ahead);
}

uint64_t StreamedBytesPerPass(const checkpoint::Checkpoint& checkpoint, uint64_t pinned_bytes) {
  return StreamedBytesPerPass(checkpoint.total_bytes, pinned_bytes, checkpoint.embedding.bytes);
}

uint64_t StreamedBytesPerPass(uint64_t total_bytes, uint64_t pinned_bytes,
                              uint64_t embedding_bytes) {
  return std::max(total_bytes - std::min(total_bytes, pinned_bytes),
                  std::min(total_bytes, embedding_bytes));
}

double SliceTouchedProbability(int64_t experts, int64_t top_k, int64_t slice_experts,
                               int64_t rows) {
  if (rows <= 0 || slice_experts <= 0) return 0;
  if (top_k <= 0 || experts - slice_experts < top_k) return 1;
  // One token misses the slice when all its top_k lie outside it:
  // C(E - m, k) / C(E, k) = prod_{i<k} (E - m - i) / (E - i).
  double miss = 1;
  for (int64_t i = 0; i < top_k; ++i) {
    miss *= static_cast<double>(experts - slice_experts - i) / static_cast<double>(experts - i);
  }
  return 1.0 - std::pow(miss, static_cast<double>(rows));
}

MoeFacts MoeFactsOf(const checkpoint::Checkpoint& checkpoint, uint64_t slice_bytes) {
  MoeFacts f;
  f.slice_bytes = slice_bytes;
  f.total_bytes = checkpoint.total_bytes;
  f.embedding_bytes = checkpoint.embedding.bytes;
  for (const checkpoint::TensorInfo& t : checkpoint.tensors) {
    f.total_parameters += static_cast<uint64_t>(std::max<int64_t>(0, t.numel()));
  }
  std::vector<LayerSplit> splits;
  for (const checkpoint::TensorGroup& layer : checkpoint.layers) {
    splits.push_back(SplitLayer(checkpoint, layer));
    const LayerSplit& split = splits.back();
    if (split.experts() == 0) continue;
    ++f.sparse_layers;
    f.experts = std::max(f.experts, split.experts());
    for (uint64_t bytes : split.expert_bytes) {
      f.expert_bytes += bytes;
      f.largest_expert_bytes = std::max(f.largest_expert_bytes, bytes);
    }
    for (const ExpertSlice& slice : ExpertSlices(split.expert_bytes, slice_bytes)) {
      f.widest_slice_bytes = std::max(f.widest_slice_bytes, slice.bytes);
    }
  }
  f.dense_bytes = f.total_bytes - std::min(f.total_bytes, f.expert_bytes);
  f.top_k = f.experts > 0 ? TopK(checkpoint, f.experts) : 0;
  f.active_parameters = f.total_parameters;
  for (const LayerSplit& split : splits) {
    if (split.experts() == 0) continue;
    const uint64_t k = static_cast<uint64_t>(std::min(f.top_k, split.experts()));
    const uint64_t active = split.expert_elements * k / static_cast<uint64_t>(split.experts());
    f.active_parameters -= std::min(f.active_parameters, split.expert_elements - active);
  }
  LoaderGroups(checkpoint, slice_bytes, &f.group_bytes, &f.group_experts);
  return f;
}

std::vector<bool> DeferredGroups(const MoeFacts& facts) {
  std::vector<bool> deferred;
  for (int64_t experts : facts.group_experts) deferred.push_back(experts > 0);
  return deferred;
}

uint64_t ExpectedStreamedBytesPerPass(const MoeFacts& facts, int64_t rows,
                                      const std::vector<bool>& pinned) {
  const uint64_t streamed = StreamedBytesPerPass(
      facts.total_bytes, PinnedBytes(facts.group_bytes, pinned), facts.embedding_bytes);
  if (!facts.is_moe()) return streamed;
  const int64_t b = std::max<int64_t>(1, rows);
  // Expected bytes of the unpinned slices' experts no token routes to (the
  // loader reads a slice's routed experts alone).
  const double touched = SliceTouchedProbability(facts.experts, facts.top_k, 1, b);
  double unread = 0;
  for (size_t g = 0; g < facts.group_bytes.size() && g < facts.group_experts.size(); ++g) {
    if (facts.group_experts[g] == 0 || (g < pinned.size() && pinned[g])) continue;
    unread += static_cast<double>(facts.group_bytes[g]) * (1.0 - touched);
  }
  return streamed - std::min(streamed, static_cast<uint64_t>(std::llround(unread)));
}

uint64_t ExpectedStreamedBytesPerPass(const checkpoint::Checkpoint& checkpoint, int64_t rows,
                                      const std::vector<bool>& pinned) {
  return ExpectedStreamedBytesPerPass(MoeFactsOf(checkpoint), rows, pinned);
}

double PassSeconds(uint64_t streamed_bytes, double read_bytes_per_second) {
  if (!(read_bytes_per_second > 0)) return 0;
  return static_cast<double>(streamed_bytes) / read_bytes_per_second;
}

double LayerFlopsPerToken(const checkpoint::Checkpoint& checkpoint) {
  std::vector<LayerSplit> splits;
  int64_t experts = 0;
  for (const checkpoint::TensorGroup& layer : checkpoint.layers) {
    splits.push_back(SplitLayer(checkpoint, layer));
    experts = std::max(experts, splits.back().experts());
  }
  const int64_t top_k = experts > 0 ? TopK(checkpoint, experts) : 0;
  double flops = 0;
  for (const LayerSplit& split : splits) {
    flops += split.dense_flops;
    if (split.experts() > 0) {
      // Each token runs top_k of the layer's experts (all of one width).
      flops += split.expert_flops * static_cast<double>(std::min(top_k, split.experts())) /
               static_cast<double>(split.experts());
    }
  }
  return flops;
}

double HeadFlopsPerRow(const checkpoint::Checkpoint& checkpoint) {
  // The head StreamedGroupBytes prices.
  const checkpoint::TensorInfo* head = HeadTensor(checkpoint);
  return head != nullptr && IsProjectionMatrix(*head) ? MatrixFlops(*head) : 0;
}

double PassFlops(double layer_flops_per_token, double head_flops_per_row, int64_t tokens,
                 int64_t logit_rows) {
  return static_cast<double>(std::max<int64_t>(0, tokens)) * layer_flops_per_token +
         static_cast<double>(std::max<int64_t>(0, logit_rows)) * head_flops_per_row;
}

double PassFlops(const checkpoint::Checkpoint& checkpoint, int64_t tokens, int64_t logit_rows) {
  return PassFlops(LayerFlopsPerToken(checkpoint), HeadFlopsPerRow(checkpoint), tokens, logit_rows);
}

double PassSecondsWithCompute(uint64_t streamed_bytes, double read_bytes_per_second,
                              double pass_flops, double flops_per_second) {
  const double read = PassSeconds(streamed_bytes, read_bytes_per_second);
  if (!(flops_per_second > 0) || !(pass_flops > 0)) return read;
  return std::max(read, pass_flops / flops_per_second);
}

}  // namespace nightshift::planner
