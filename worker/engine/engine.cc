#include "worker/engine/engine.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <new>
#include <numeric>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/quantization.h"
#include "worker/engine/architecture.h"
#include "worker/engine/compute_measure.h"
#include "worker/engine/decoder.h"
#include "worker/engine/device_stager.h"
#include "worker/engine/expert_usage.h"
#include "worker/engine/experts.h"
#include "worker/engine/isa.h"
#include "worker/engine/kernels.h"
#include "worker/engine/layer_loader.h"
#include "worker/engine/mapped_checkpoint.h"
#include "worker/engine/pass_trie.h"
#include "worker/engine/rope.h"
#include "worker/engine/small_matmul.h"

namespace nightshift::engine {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Each label's token count.
std::vector<int64_t> LabelTokenCounts(const SequenceRequest& request) {
  std::vector<int64_t> counts;
  for (const std::vector<TokenId>& label : request.labels) {
    counts.push_back(static_cast<int64_t>(label.size()));
  }
  return counts;
}

struct Sequence {
  Sequence(SequenceId id, SequenceRequest request, const ModelConfig& config, int64_t capacity,
           KvDType kv_dtype)
      : id(id),
        request(std::move(request)),
        sampler(this->request.sampling),
        cache(config, capacity, kv_dtype) {}

  SequenceId id;
  SequenceRequest request;
  Sampler sampler;
  KVCache cache;
  std::vector<TokenId> generated;
  int64_t cached = 0;  // tokens whose keys and values are in the cache
  std::vector<float> last_logits;
  std::vector<LabelScore> labels;
  int64_t best_label = -1;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finished;
  int64_t shared_prompt_tokens = 0;  // SequenceResult::shared_prompt_tokens

  bool classifying() const { return !request.labels.empty(); }
  // Ends in the pass that feeds its prompt (planner::EndsInFirstPass): its
  // cache holds a layer's keys and values only while that layer runs, and it
  // reserves no KV budget.
  bool one_pass() const { return planner::EndsInFirstPass(request.max_new_tokens, LabelLengths()); }

  int64_t NextFeedSize() const {
    return cached > 0 ? 1
                      : planner::FirstPassTokens(static_cast<int64_t>(request.prompt.size()),
                                                 LabelLengths());
  }

  std::vector<int64_t> LabelLengths() const { return LabelTokenCounts(request); }

  // Its first pass's tokens, for the pass's trie.
  TrieFeed Feed() const { return {request.prompt, request.labels}; }
};

// The rows of a first pass's trie whose logits the sequence of `feed`
// needs: its last prompt row (the next token, or every label's first);
// when classifying, then each label's rows but its last.
std::vector<int64_t> LogitRows(const PassTrie& trie, size_t feed) {
  std::vector<int64_t> rows = {trie.prompt_rows[feed].back()};
  for (const std::vector<int64_t>& label : trie.label_rows[feed]) {
    rows.insert(rows.end(), label.begin(), label.end() - 1);
  }
  return rows;
}

// Scores `labels` from `logprobs` [rows, vocab] (log-softmax of the rows
// LogitRows chose, in that order).
std::vector<LabelScore> ScoreLabels(const std::vector<std::vector<TokenId>>& labels,
                                    const at::Tensor& logprobs, int64_t* best) {
  auto table = logprobs.accessor<double, 2>();
  std::vector<LabelScore> scores;
  int64_t next_row = 1;  // row 0 predicts every label's first token
  for (const std::vector<TokenId>& ids : labels) {
    LabelScore score;
    score.ids = ids;
    for (size_t k = 0; k < ids.size(); ++k) {
      const int64_t row = k == 0 ? 0 : next_row++;
      score.token_logprobs.push_back(table[row][ids[k]]);
      score.logprob += score.token_logprobs.back();
    }
    scores.push_back(std::move(score));
  }
  *best = 0;
  for (size_t j = 1; j < scores.size(); ++j) {
    if (scores[j].logprob > scores[static_cast<size_t>(*best)].logprob) {
      *best = static_cast<int64_t>(j);
    }
  }
  const double top = scores[static_cast<size_t>(*best)].logprob;
  double total = 0;
  for (const LabelScore& score : scores) total += std::exp(score.logprob - top);
  for (LabelScore& score : scores) score.probability = std::exp(score.logprob - top) / total;
  return scores;
}

// The context the engine runs, from the options and the model (by default
// planner::MaxContextTokens, what the worker advertises); `note` explains a
// limit that comes from the sliding window.
Status ResolveContext(const ModelConfig& c, const EngineOptions& options, int64_t* context,
                      std::string* note) {
  if (options.max_context > c.max_position_embeddings) {
    return InvalidArgument("context " + std::to_string(options.max_context) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(c.max_position_embeddings));
  }
  const int64_t model_context = planner::MaxContextTokens(c);
  if (options.max_context > model_context) {
    return Unimplemented("context " + std::to_string(options.max_context) +
                         " is longer than sliding_window " + std::to_string(model_context) +
                         "; sliding-window attention is not implemented");
  }
  *context = options.max_context > 0 ? options.max_context : model_context;
  if (options.max_context == 0 && model_context < c.max_position_embeddings) {
    *note = " (limited by sliding_window; sliding-window attention is not implemented)";
  }
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> EosTokenIds(const checkpoint::Checkpoint& checkpoint,
                                           const ModelConfig& config) {
  const nlohmann::json& generation = checkpoint.generation_config;
  if (generation.is_object() && generation.contains("eos_token_id") &&
      !generation["eos_token_id"].is_null()) {
    ConfigReader reader(generation, "generation_config.json");
    std::vector<int64_t> ids = reader.IntList("eos_token_id");
    NS_RETURN_IF_ERROR(reader.status());
    return ids;
  }
  return config.eos_token_ids;
}

// Runs `fn`, turning libtorch and allocation exceptions into a Status.
template <typename Fn>
auto Guarded(Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory");
  } catch (const c10::OutOfMemoryError& e) {  // device allocators
    return ResourceExhausted(std::string("libtorch: ") + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    // The CPU allocator reports exhaustion as a plain c10::Error.
    if (what.find("not enough memory") != std::string::npos) {
      return ResourceExhausted("libtorch: " + what);
    }
    return Internal("libtorch: " + what);
  } catch (const std::exception& e) {
    return Internal(e.what());
  }
}

// The KV cache positions `request` reserves: planner::KvPositions (the
// scheduler's figure), a generation's clamped to `context` (it stops there).
int64_t CachePositions(const SequenceRequest& request, int64_t context) {
  const int64_t positions = planner::KvPositions(static_cast<int64_t>(request.prompt.size()),
                                                 request.max_new_tokens, LabelTokenCounts(request));
  return request.labels.empty() ? std::min(positions, context) : positions;
}

// Log-softmax in double of logits[0..vocab): `token`'s log-probability and
// the `top` most likely tokens, most likely first (lower id first on ties).
// NaN logits count as impossible.
TokenLogprob LogprobsOf(const float* logits, int64_t vocab, TokenId token, int top) {
  auto value = [logits](int64_t i) {
    const double v = logits[i];
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
  };
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, value(i));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(value(i) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = value(token) - log_z;
  const int64_t k = std::min<int64_t>(top, vocab);
  std::vector<TokenId> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](TokenId a, TokenId b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  for (int64_t j = 0; j < k; ++j) {
    out.top.emplace_back(ids[static_cast<size_t>(j)], value(ids[static_cast<size_t>(j)]) - log_z);
  }
  return out;
}

// GPUs the linked libtorch sees: 0 without CUDA. (c10's device guard
// interface, which every libtorch version has, rather than ATen's CUDA hooks.)
int64_t CudaDeviceCount() {
  if (!at::hasCUDA()) return 0;
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).deviceCount();
}

// True for "cuda" and "cuda:N".
bool IsCudaDevice(const std::string& device) {
  if (device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  return std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Status ValidateOptions(const EngineOptions& options) {
  if (options.max_context < 0) return InvalidArgument("max_context must be >= 0");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0");
  if (options.read_streams < 0 || options.read_streams > 64) {
    return InvalidArgument("read_streams must be in 0..64");
  }
  if (options.pass_token_budget < 0) return InvalidArgument("pass_token_budget must be >= 0");
  if (options.adaptive_split &&
      (options.memory_budget_bytes == 0 || options.kv_budget_bytes == 0)) {
    return InvalidArgument("an adaptive split needs a memory budget and a KV budget (its ceiling)");
  }
  if (options.host_memory_budget_bytes > 0 && !IsCudaDevice(options.device) &&
      !options.accelerator_path_on_cpu) {
    return InvalidArgument(
        "a host memory budget is the accelerator path's second tier; on the CPU the memory "
        "budget pins groups in host memory");
  }
  return CheckDevice(options.device);
}

std::vector<const checkpoint::TensorInfo*> PresentTensors(const LayerTensors& layer) {
  std::vector<const checkpoint::TensorInfo*> out;
  for (const checkpoint::TensorInfo* t : layer.weights) {
    if (t != nullptr) out.push_back(t);
  }
  return out;
}

// A sparse layer's experts' tensors, expert after expert (ExpertWeight order).
std::vector<const checkpoint::TensorInfo*> ExpertTensorList(const LayerTensors& layer,
                                                            int64_t first, int64_t end) {
  std::vector<const checkpoint::TensorInfo*> out;
  for (int64_t e = first; e < end; ++e) {
    for (const checkpoint::TensorInfo* t : layer.experts[static_cast<size_t>(e)].weights) {
      out.push_back(t);
    }
  }
  return out;
}

// Every tensor of the layer: PresentTensors, then every expert's.
std::vector<const checkpoint::TensorInfo*> AllTensors(const LayerTensors& layer) {
  std::vector<const checkpoint::TensorInfo*> out = PresentTensors(layer);
  for (const checkpoint::TensorInfo* t :
       ExpertTensorList(layer, 0, static_cast<int64_t>(layer.experts.size()))) {
    out.push_back(t);
  }
  return out;
}

// Where a decoder layer is in the loader's groups: group `dense` holds the
// layer's tensors (a sparse layer's dense part: attention, norms, router,
// shared expert); a sparse layer's expert slices (planner::ExpertSlices)
// follow it, group dense + 1 + s holding experts [slices[s].first,
// slices[s].end), each a unit of its own (LayerLoaderOptions::units).
struct LayerGroups {
  size_t dense = 0;
  std::vector<planner::ExpertSlice> slices;
};

uint64_t ExpertSliceBytes(const EngineOptions& options) {
  return options.expert_slice_bytes > 0 ? options.expert_slice_bytes
                                        : planner::kDefaultExpertSliceBytes;
}

std::vector<planner::ExpertSlice> SlicesOf(const LayerTensors& layer, uint64_t slice_bytes) {
  std::vector<uint64_t> bytes;
  for (const ExpertTensors& expert : layer.experts) bytes.push_back(expert.bytes);
  return planner::ExpertSlices(bytes, slice_bytes);
}

// The LM head as row slices no larger than the largest group of a decoder
// layer (a dense layer, or a sparse layer's dense part or expert slice), so
// the loader's buffers (sized to the largest group) need not hold the
// largest matrix whole; one slice when it fits.
std::vector<checkpoint::TensorInfo> HeadSlices(const ModelTensors& tensors, uint64_t slice_bytes) {
  uint64_t largest_layer = 0;
  for (const LayerTensors& layer : tensors.layers) {
    largest_layer = std::max(largest_layer, layer.dense_bytes);
    for (const planner::ExpertSlice& slice : SlicesOf(layer, slice_bytes)) {
      largest_layer = std::max(largest_layer, slice.bytes);
    }
  }
  const checkpoint::TensorInfo& head = *tensors.lm_head;
  const int64_t rows = head.shape[0];
  const uint64_t row_bytes = head.size / static_cast<uint64_t>(rows);
  // planner::StreamedGroupBytes prices the same slices.
  const int64_t per_slice = planner::HeadSliceRows(rows, head.size, largest_layer);
  std::vector<checkpoint::TensorInfo> out;
  for (int64_t row = 0; row < rows; row += per_slice) {
    checkpoint::TensorInfo slice = head;
    slice.shape[0] = std::min(per_slice, rows - row);
    slice.offset = head.offset + static_cast<uint64_t>(row) * row_bytes;
    slice.size = static_cast<uint64_t>(slice.shape[0]) * row_bytes;
    out.push_back(std::move(slice));
  }
  return out;
}

// The loader's groups: every decoder layer's (LayerGroups), then the final
// norm with the LM head's first slice (norm, slice, norm bias when present:
// RunHead's order), then each further slice alone. Expert slices are
// deferred: a pass reads those its rows route to.
struct StreamPlan {
  std::vector<TensorList> groups;
  std::vector<bool> deferred;
  std::vector<std::vector<int>> units;
  std::vector<LayerGroups> layers;
  size_t head = 0;  // the head's first group
};

StreamPlan StreamedGroups(const ModelTensors& tensors,
                          const std::vector<checkpoint::TensorInfo>& head_slices,
                          uint64_t slice_bytes) {
  StreamPlan plan;
  auto add = [&plan](TensorList group, bool deferred, std::vector<int> units) {
    plan.groups.push_back(std::move(group));
    plan.deferred.push_back(deferred);
    plan.units.push_back(std::move(units));
  };
  for (const LayerTensors& layer : tensors.layers) {
    LayerGroups& where = plan.layers.emplace_back();
    where.dense = plan.groups.size();
    add(PresentTensors(layer), false, {});
    where.slices = SlicesOf(layer, slice_bytes);
    for (const planner::ExpertSlice& slice : where.slices) {
      std::vector<int> units;
      for (int64_t e = slice.first; e < slice.end; ++e) {
        units.insert(units.end(), kExpertWeightCount, static_cast<int>(e - slice.first));
      }
      add(ExpertTensorList(layer, slice.first, slice.end), true, std::move(units));
    }
  }
  plan.head = plan.groups.size();
  TensorList head = {tensors.final_norm, &head_slices[0]};
  if (tensors.final_norm_bias != nullptr) head.push_back(tensors.final_norm_bias);
  add(std::move(head), false, {});
  for (size_t s = 1; s < head_slices.size(); ++s) add({&head_slices[s]}, false, {});
  return plan;
}

// Parallel reads in flight when EngineOptions::read_streams is 0: four 16 MB
// preads reached ~1.9 GB/s on a cold 1.7 GB checkpoint here, one ~0.2-1.1.
// (Reads are now up to 128 MB, LayerLoaderOptions::chunk_bytes: a layer
// smaller than that is one read, and the streams serve larger ones.)
constexpr int kDefaultReadStreams = 4;

// On the accelerator path (`staged`) the loader streams even when the engine
// is resident: the device keeps the groups, not host memory. For a GPU its
// buffers are page-locked, so that the copies out of them are asynchronous.
LayerLoaderOptions LoaderOptions(const EngineOptions& options, bool staged,
                                 const StreamPlan& plan) {
  LayerLoaderOptions out;
  out.deferred = plan.deferred;
  out.units = plan.units;
  out.resident = options.residency == Residency::kResident && !staged;
  if (IsCudaDevice(options.device)) out.allocate = PinnedBuffer;
  out.prefetch = options.prefetch;
  out.read_streams = options.read_streams > 0 ? options.read_streams : kDefaultReadStreams;
  out.direct = options.direct_reads;
  return out;
}

// The weight shapes a pass multiplies: every layer's matrices and the LM
// head's slices, each distinct shape once with how often a pass runs it.
std::vector<ProjectionShape> ProjectionShapes(const ModelTensors& tensors,
                                              const std::vector<checkpoint::TensorInfo>& head) {
  std::vector<ProjectionShape> shapes;
  auto add = [&](const checkpoint::TensorInfo& t) {
    if (t.shape.size() != 2) return;  // norms and biases
    const ProjectionShape shape = ShapeOf(t);
    for (ProjectionShape& s : shapes) {
      if (s.SameWeight(shape)) {
        ++s.per_pass;
        return;
      }
    }
    shapes.push_back(shape);
  };
  for (const LayerTensors& layer : tensors.layers) {
    for (const checkpoint::TensorInfo* t : AllTensors(layer)) add(*t);
  }
  for (const checkpoint::TensorInfo& slice : head) add(slice);
  return shapes;
}

// The choice for these shapes; measured when kAuto has 16-bit weights to
// choose for, or `always_measure`.
StatusOr<ComputeChoice> ChooseCompute(const std::vector<ProjectionShape>& shapes,
                                      const EngineOptions& options, bool always_measure) {
  ComputeChoice choice;
  choice.requested = options.compute_dtype;
  choice.batch_invariant = options.batch_invariant;
  const bool all_f32 = std::all_of(shapes.begin(), shapes.end(), [](const ProjectionShape& s) {
    return s.dtype == checkpoint::DType::kF32;
  });
  if (always_measure || (options.compute_dtype == ComputeDType::kAuto && !all_f32)) {
    NS_ASSIGN_OR_RETURN(MeasuredCompute measured,
                        MeasureProjections(shapes, {options.compute_state_dir}));
    choice.measurement = std::move(measured.measurement);
    choice.cached = measured.cached;
    choice.cache_path = std::move(measured.cache_path);
  }
  choice.plan =
      ChoosePlan(options.compute_dtype, all_f32, SmallMatmulFast(),
                 choice.measurement ? &*choice.measurement : nullptr, options.batch_invariant);
  return choice;
}

unsigned Cores() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

const char* KvDTypeName(KvDType dtype) {
  switch (dtype) {
    case KvDType::kAuto:
      return "auto";
    case KvDType::kFloat32:
      return "f32";
    case KvDType::kBFloat16:
      return "bf16";
    case KvDType::kFloat16:
      return "f16";
  }
  return "?";
}

int KvDTypeBytes(KvDType dtype) {
  switch (dtype) {
    case KvDType::kAuto:
      return 0;
    case KvDType::kFloat32:
      return 4;
    case KvDType::kBFloat16:
    case KvDType::kFloat16:
      return 2;
  }
  return 0;
}

StatusOr<KvDType> ParseKvDType(const std::string& name) {
  if (name == "auto") return KvDType::kAuto;
  if (name == "f32" || name == "float32") return KvDType::kFloat32;
  if (name == "bf16" || name == "bfloat16") return KvDType::kBFloat16;
  if (name == "f16" || name == "float16") return KvDType::kFloat16;
  return InvalidArgument("KV dtype '" + name + "': expected auto, f32, bf16 or f16");
}

checkpoint::DType ProjectionDType(const ModelTensors& tensors) {
  if (!tensors.layers.empty()) {
    for (const checkpoint::TensorInfo* weight : tensors.layers.front().weights) {
      if (weight == nullptr || weight->shape.size() != 2) continue;
      // A quantized projection multiplies in F16 on the accelerator path
      // (quant_linear.h), whatever its packed dtype.
      return weight->quant ? checkpoint::DType::kF16 : weight->dtype;
    }
  }
  return checkpoint::DType::kF32;
}

KvDType ResolveKvDType(KvDType requested, bool accelerator_path,
                       checkpoint::DType projection_dtype) {
  if (requested != KvDType::kAuto) return requested;
  const int bytes = planner::DefaultKvDtypeBytes(
      accelerator_path, static_cast<int>(checkpoint::DTypeSize(projection_dtype)));
  if (bytes == 4) return KvDType::kFloat32;
  return projection_dtype == checkpoint::DType::kF16 ? KvDType::kFloat16 : KvDType::kBFloat16;
}

const char* ResidencyName(Residency residency) {
  return residency == Residency::kResident ? "resident" : "streaming";
}

Status CheckDevice(const std::string& device) {
  if (device == "cpu") return Status::Ok();
  if (!IsCudaDevice(device)) {
    return InvalidArgument("device '" + device + "': expected cpu, cuda or cuda:N");
  }
  if (!CudaAvailable()) {
    return Unimplemented("device '" + device + "': the linked libtorch has no CUDA or sees no GPU");
  }
  const int64_t gpus = CudaDeviceCount();
  const std::string index = device == "cuda" ? "0" : device.substr(5);
  if (index.size() > 4 || std::stoll(index) >= gpus) {
    return InvalidArgument("device '" + device + "': this machine has " + std::to_string(gpus) +
                           " GPU(s)");
  }
  return Status::Ok();
}

bool CudaAvailable() { return CudaDeviceCount() > 0; }

struct Engine::Impl {
  checkpoint::Checkpoint checkpoint;
  EngineOptions options;
  ModelConfig config;
  ModelTensors tensors;                      // points into `checkpoint`
  std::unique_ptr<MappedCheckpoint> mapped;  // the embedding's rows are read from it
  // The LM head's row slices (HeadSlices); the loader points into them.
  std::vector<checkpoint::TensorInfo> head_slices;
  std::unique_ptr<LayerLoader> loader;    // every layer, then the head's slices
  std::vector<LayerGroups> layer_groups;  // per decoder layer: its loader groups
  size_t head_group = 0;                  // the head's first loader group
  // Mixtures of experts: what decides whether a pass reads a sparse layer's
  // experts ahead of its routing (ReadExpertsAhead), measured as passes run:
  // the dense half's compute seconds per row, the loader's bytes per second.
  double dense_seconds_per_row = 0;
  double read_bytes_per_second = 0;
  // Rows routed to each expert, counted as passes run and kept in
  // compute_state_dir (expert_usage.h; `expert_usage_path`, empty: kept in
  // this process only): what a memory budget pins by.
  ExpertUsage expert_usage;
  std::string expert_usage_path;
  // The accelerator path (a CUDA device, or the CPU when the options ask):
  // each group the loader reads is staged into device memory and runs
  // through ATen's generic kernels. Unset on the CPU path.
  std::optional<at::Device> device;
  std::unique_ptr<DeviceStager> stager;
  size_t next_slot = 0;  // streaming: groups alternate between two slots
  size_t held_slot = 0;  // the acquired group's
  // Resident on a device: each group as staged by the first pass that
  // acquires it (slot i holds group i), after which the loader skips it (an
  // expert slice no pass has routed to yet is still read when one does). Partial on a
  // device: the pinned groups as staged (slot 2 + i holds group i), which
  // the loader then skips.
  std::vector<std::optional<LoadedGroup>> resident_groups;
  // Partial residency (EngineOptions::memory_budget_bytes), fixed by the
  // first pass: per loader group, kept across passes; their bytes.
  std::vector<bool> pinned;
  uint64_t pinned_bytes = 0;
  // The host tier (EngineOptions::host_memory_budget_bytes), fixed by the
  // first pass: groups the loader keeps in host memory, staged every pass.
  std::vector<bool> host_pinned;
  uint64_t host_pinned_bytes = 0;
  // With EngineOptions::adaptive_split, the KV bytes the current pins leave
  // room for (Resplit); else the KV budget the plan was fixed with.
  uint64_t kv_split = 0;
  std::vector<float> inv_freq;
  std::vector<int64_t> eos;
  int64_t max_context = 0;
  std::string context_note;
  // From EngineOptions::activation_budget_bytes.
  int64_t micro_batch_rows = kMaxMicroBatchRows;
  int64_t max_score_bytes = kMaxAttentionScoreBytes;

  // The projection kernels (EngineOptions::compute_dtype); `plan` is what
  // host weights carry: null for float32 as before the choice.
  ComputeChoice compute;
  const KernelPlan* plan = nullptr;
  double layer_flops_per_token = 0;  // planner::LayerFlopsPerToken
  double head_flops_per_row = 0;     // planner::HeadFlopsPerRow
  // The quantized formats of the layers' projections (QuantFormatName),
  // which run the quantized kernel (quant_matmul.h) whatever `plan` says.
  std::vector<std::string> quant_formats;

  std::vector<std::unique_ptr<Sequence>> active;  // in the order added
  // Prefixes a pass kept for the next ones (EngineOptions::share_prefixes):
  // of each set of a trie's sequences that agree on their first
  // kMinKeptPrefixTokens tokens, the longest prompt prefix all of them
  // share, with its keys and values for every layer. A later sequence whose
  // prompt goes on past one starts its first pass after it instead of
  // computing it. Each is kept
  // only where KV room allows (PrefixRoom), dropped after two passes that
  // neither used it nor had a decoding sequence hold it, and whenever a
  // sequence joining needs its KV room (unless a sequence uses it:
  // KeptInUse). Its cache is the one its pass's going-on sequences share
  // (ShareKeptPaths), so keeping it costs nothing while they decode; the
  // going-on sequences that start after one hold its positions in that
  // cache too (ShareKept), which so lives while one of them does, kept or
  // not. Prefixes of one pass's trie share that cache.
  struct KeptPrefix {
    std::vector<TokenId> ids;
    std::shared_ptr<KVCache> cache;
    std::vector<int64_t> rows;  // its positions in `cache`, one per token of `ids`
    int64_t pass = 0;           // the pass that made it or last used it
  };
  std::vector<KeptPrefix> kept_prefixes;
  // The last pass's compute seconds per token computed and read bytes per
  // second, measured: what keeping a prefix out of pinned layers is priced
  // with (planner::KeepPrefixFromPins).
  double compute_seconds_per_token = 0;
  double pass_read_bytes_per_second = 0;
  std::vector<SequenceResult> finished;
  SequenceId next_id = 0;
  int64_t passes = 0;
  Status broken;  // set when a pass failed

  Weight View(const checkpoint::TensorInfo* tensor) const {
    if (tensor == nullptr) return {};
    return {tensor, mapped->Data(*tensor), std::nullopt};  // host memory
  }

  // The layer's weights in `loaded`, whose data follows PresentTensors(layer).
  // The router multiplies in float32, batch-invariantly when the plans are
  // (routing is a choice: a rounding must not flip it).
  LayerWeights LayerView(const LayerTensors& layer, const LoadedGroup& loaded) const {
    static const KernelPlan kRouterInvariant = [] {
      KernelPlan p;
      p.fill(ProjectionKernel::kF32Tile);
      return p;
    }();
    LayerWeights w;
    size_t next = 0;
    for (size_t i = 0; i < kLayerWeightCount; ++i) {
      if (layer.weights[i] != nullptr) {
        const bool router = i == static_cast<size_t>(LayerWeight::kRouter);
        const KernelPlan* p =
            router ? (options.batch_invariant ? &kRouterInvariant : nullptr) : plan;
        w[i] = {layer.weights[i], loaded.data[next++], device, p};
      }
    }
    return w;
  }

  // Expert `e` of `layer` in `loaded`, a slice group starting at expert `first`.
  ExpertWeights ExpertView(const LayerTensors& layer, int64_t e, int64_t first,
                           const LoadedGroup& loaded) const {
    const ExpertTensors& t = layer.experts[static_cast<size_t>(e)];
    const size_t at = static_cast<size_t>(e - first) * kExpertWeightCount;
    auto view = [&](ExpertWeight role) {
      const size_t r = static_cast<size_t>(role);
      return Weight{t.weights[r], loaded.data[at + r], device, plan};
    };
    return {view(ExpertWeight::kGate), view(ExpertWeight::kUp), view(ExpertWeight::kDown)};
  }

  // One pass's inputs: every feed's new tokens, packed row after row (a
  // decoding sequence's latest token; the trie of the sequences in their
  // first pass that begin alike).
  struct PassPlan {
    std::vector<int64_t> ids;
    std::vector<int64_t> logit_rows;   // the packed rows whose logits are needed
    std::vector<int64_t> first_logit;  // per sequence, its first entry in logit_rows
    std::vector<int64_t> fed;          // per sequence, the tokens it adds to its cache
    PassRows rows;
    // The caches of the tries that several sequences share, for this pass.
    std::vector<std::unique_ptr<KVCache>> shared_caches;
  };
  // A feed of the next pass: a decoding sequence alone, or the sequences in
  // their first pass that begin with the same token (one trie; each alone
  // without EngineOptions::share_prefixes), or with the same kept prefix
  // (their trie after it). Indices into `active`.
  struct PassFeed {
    std::vector<size_t> members;
    int kept = -1;     // the kept prefix they start after; -1: none
    int64_t past = 0;  // its first positions they agree with
  };
  // The next pass's feeds, in the order of each one's first sequence.
  std::vector<PassFeed> PassFeeds() const;
  // Which feed a sequence in its first pass joins: the kept prefix whose
  // first positions it agrees with longest, kMinKeptPrefixTokens or more
  // and short of its whole prompt (*kept, *past; keyed by both), else its
  // first token.
  int64_t FeedKey(const std::vector<TokenId>& prompt, int* kept, int64_t* past) const;
  // A prompt prefix a pass keeps for the next ones: its tokens and its rows
  // in the pass's trie, which the feed's shared cache then holds
  // (ShareKeptPaths); the kept prefix is that cache.
  struct Keeping {
    std::vector<TokenId> ids;
    std::vector<int64_t> rows;
  };
  // The prompt prefixes this pass keeps of the trie of `members` (laid out
  // as `trie`): for each set of two or more members that agree on their
  // first kMinKeptPrefixTokens tokens, the prefix all of them share, when
  // not kept already and PrefixRoom allows (nothing more for a set of which
  // a member goes on past its first pass: it holds those positions anyway).
  std::vector<Keeping> PrefixesToKeep(const std::vector<size_t>& members,
                                      const PassTrie& trie) const;
  // Whether `bytes` more of kept prefixes fit beside the sequences' KV.
  bool PrefixRoom(int64_t tokens, uint64_t bytes) const;
  // Bytes of the kept prefixes no sequence past its first pass holds (those
  // that one holds are counted by KvBytesInUse).
  uint64_t KeptPrefixBytes() const;
  // The caches sequences past their first pass share (KVCache::shared).
  std::set<const KVCache*> SharedCaches() const;
  // Whether kept prefix `k` is held by a sequence past its first pass, or
  // will be by one waiting for it or by `joining` (FeedKey picks it).
  bool KeptInUse(size_t k, const SequenceRequest* joining) const;
  // Drops the kept prefixes no feed of pass `pass` or the one before used or
  // made, and no sequence decoding in them held.
  void DropUnusedPrefixes(int64_t pass);

  Status Validate(const SequenceRequest& r) const;
  Status ValidateTokens(const std::vector<TokenId>& ids) const;
  Status ValidateLabels(const SequenceRequest& r) const;
  StatusOr<PassStats> RunPass();
  PassPlan PlanPass(PassStats* stats);
  // Waits for loader group `index`, counting its bytes and I/O time; on the
  // accelerator path, stages it (its data then points to device memory).
  StatusOr<LoadedGroup> Acquire(size_t index, PassStats* stats);
  // Gives group `index` back once the work using it is queued.
  void Release(size_t index);
  // Embedding and every decoder layer: the final hidden states.
  StatusOr<at::Tensor> RunLayers(const PassPlan& plan, PassStats* stats);
  // Sparse layer `layer` whose dense part is `dense`, acquired: the
  // attention half, the routing, then the routed experts' slices.
  Status RunSparseLayer(int64_t layer, const LoadedGroup& dense, bool read_ahead,
                        const PassPlan& plan, at::Tensor& hidden, PassStats* stats);
  // Whether this pass reads its sparse layers' experts ahead of the routing
  // (planner::ReadExpertsAhead at the pass's rows).
  bool ReadExpertsAhead(int64_t rows) const;
  // Otherwise: tells the loader which experts a pass of `rows` rows likely
  // routes to, for it to read while the rows route.
  void GuessRoutedExperts(int64_t rows);
  // Final norm and LM head at `rows` of `hidden`: [rows, vocab] logits.
  StatusOr<at::Tensor> RunHead(const at::Tensor& hidden, const std::vector<int64_t>& rows,
                               PassStats* stats);
  // Samples the next token of `s` from its logits row and decides whether it finished.
  void Advance(Sequence& s, const float* logits);
  // Scores the labels of `s` from its `rows` logits rows and finishes it.
  void Classify(Sequence& s, const at::Tensor& rows);
  // Moves finished sequences from `active` to `finished`.
  void RetireFinished();
  // The sequence `id` in flight, or null.
  Sequence* Find(SequenceId id) const;
  // KV bytes the sequences in flight reserve, with `joining` added when not
  // null: each one's own positions, and each cache they share once (the
  // prompt positions two or more going-on sequences of a first pass hold,
  // ShareKeptPaths; a kept prefix they started after, ShareKept); for those
  // still to run their first pass, as PassFeeds will group them.
  uint64_t KvBytesInUse(const SequenceRequest* joining = nullptr) const;
  // Tokens the next pass computes; with `joining` added when not null.
  int64_t NextPassTokens(const SequenceRequest* joining = nullptr) const;
  // Sets up the accelerator path: the device and the stager's slots (two the size of the largest
  // group; one per group when resident).
  Status OpenStager();
  // At the first pass: the pass plan of EngineOptions::memory_budget_bytes
  // (which groups to pin), or the resident figure.
  Status FixPassPlan(const PassPlan& plan);
  // The host tier of the accelerator path, once the device's pins are fixed.
  Status FixHostTier(const std::vector<uint64_t>& group_bytes);
  // EngineOptions::adaptive_split, once the plan is fixed: pins what the
  // memory budget leaves after the working set and `kv` bytes of KV,
  // unpinning (freeing) and pinning groups between passes.
  Status Resplit(uint64_t kv);
  // Every loader group's tensor bytes.
  std::vector<uint64_t> GroupBytes() const;
  // The groups a pin budget of `budget` keeps: planner::ChoosePinnedGroups;
  // for a mixture of experts, every group a pass always reads first, then
  // the expert slices the measured routing uses most (ChooseExpertAwarePins).
  std::vector<bool> ChoosePins(const std::vector<uint64_t>& group_bytes, uint64_t budget) const;
  // The activations the first pass `plan` needs (run's plan): its
  // micro-batch temporaries, score blocks (both bounded as in
  // planner::ActivationWorkingSetBytes), hidden states and logits.
  uint64_t FirstPassActivationBytes(const PassPlan& plan) const;
  // The pass's compute figures (PassStats::compute_dtype, projection_kernels, projection_flops).
  void ReportCompute(PassStats* stats) const;
};

void Engine::Impl::ReportCompute(PassStats* stats) const {
  stats->projection_flops = planner::PassFlops(layer_flops_per_token, head_flops_per_row,
                                               stats->tokens, stats->logit_rows);
  if (device) {
    stats->compute_dtype = stats->projection_kernels = "accelerator";
    return;
  }
  // The row counts the projections ran at: full micro-batches, the last
  // one's remainder, the LM head's rows.
  std::vector<int64_t> rows = {std::min(stats->tokens, micro_batch_rows),
                               stats->tokens % micro_batch_rows, stats->logit_rows};
  bool bf16 = false, f32 = false;
  std::vector<ProjectionKernel> ran;
  for (int64_t r : rows) {
    if (r <= 0) continue;
    const ProjectionKernel k = compute.KernelFor(r);
    (IsBf16Kernel(k) ? bf16 : f32) = true;
    if (std::find(ran.begin(), ran.end(), k) == ran.end()) ran.push_back(k);
  }
  std::sort(ran.begin(), ran.end());
  for (ProjectionKernel k : ran) {
    stats->projection_kernels += (stats->projection_kernels.empty() ? "" : "+");
    stats->projection_kernels += ProjectionKernelName(k);
  }
  // Quantized projections multiply in float32 on the instruction set active now.
  for (const std::string& format : quant_formats) {
    stats->projection_kernels += "+" + format + "-" + IsaName(ActiveIsa());
    f32 = true;
  }
  stats->compute_dtype = bf16 && f32 ? "mixed" : (bf16 ? "bf16" : "f32");
}

uint64_t Engine::Impl::FirstPassActivationBytes(const PassPlan& plan) const {
  const uint64_t tokens = plan.ids.size();
  const uint64_t rows = std::min<uint64_t>(tokens, static_cast<uint64_t>(micro_batch_rows));
  uint64_t scores = 0;
  for (const SequenceRows& r : plan.rows.sequences) {
    const uint64_t queries = static_cast<uint64_t>(std::min(r.count, micro_batch_rows));
    scores = std::max(scores, static_cast<uint64_t>(config.num_heads) * queries *
                                  static_cast<uint64_t>(r.cache->capacity()) * sizeof(float));
  }
  scores = std::min(scores, static_cast<uint64_t>(max_score_bytes));
  const uint64_t hidden = tokens * static_cast<uint64_t>(config.hidden_size) * sizeof(float);
  // float32 logits, and a classification's log-softmax in double beside them.
  const uint64_t logits =
      plan.logit_rows.size() * static_cast<uint64_t>(config.vocab_size) * 3 * sizeof(float);
  return rows * ActivationBytesPerRow(config) + 2 * scores + hidden + logits;
}

std::vector<uint64_t> Engine::Impl::GroupBytes() const {
  std::vector<uint64_t> group_bytes;
  for (size_t g = 0; g < loader->groups(); ++g) {
    group_bytes.push_back(loader->group_tensor_bytes(g));
  }
  return group_bytes;
}

std::vector<bool> Engine::Impl::ChoosePins(const std::vector<uint64_t>& group_bytes,
                                           uint64_t budget) const {
  if (!config.is_moe()) {
    return planner::ChoosePinnedGroups(group_bytes, budget, options.pin_placement);
  }
  std::vector<bool> always_read(group_bytes.size(), true);
  std::vector<uint64_t> use(group_bytes.size(), 0);
  for (size_t layer = 0; layer < layer_groups.size(); ++layer) {
    const LayerGroups& where = layer_groups[layer];
    for (size_t s = 0; s < where.slices.size(); ++s) {
      const size_t group = where.dense + 1 + s;
      always_read[group] = false;
      for (int64_t e = where.slices[s].first; e < where.slices[s].end; ++e) {
        use[group] += expert_usage[layer][static_cast<size_t>(e)];
      }
    }
  }
  return ChooseExpertAwarePins(group_bytes, always_read, use, budget, options.pin_placement);
}

Status Engine::Impl::FixPassPlan(const PassPlan& plan) {
  const std::vector<uint64_t> group_bytes = GroupBytes();
  if (options.residency == Residency::kResident) {
    pinned.assign(group_bytes.size(), true);
    pinned_bytes = planner::PinnedBytes(group_bytes, pinned);
    return Status::Ok();
  }
  if (options.memory_budget_bytes == 0) return FixHostTier(group_bytes);
  const uint64_t buffers =
      planner::StreamBufferBytes(group_bytes, {}, options.prefetch, loader->deferred_groups());
  uint64_t activations, kv;
  if (options.kv_budget_bytes > 0) {
    activations = planner::ActivationWorkingSetBytes(config, options.activation_budget_bytes);
    kv = options.adaptive_split ? KvBytesInUse() : options.kv_budget_bytes;
  } else {
    activations = FirstPassActivationBytes(plan);
    kv = KvBytesInUse();
    options.kv_budget_bytes = std::max<uint64_t>(kv, 1);  // later sequences must fit it
  }
  const uint64_t working_set = buffers + activations + kv;
  // An adaptive split's KV ceiling is the caller's (the worker sized it from
  // its own footprint figure): more than the budget leaves pins nothing, as
  // a worker streamed everything before it split, rather than failing.
  if (working_set > options.memory_budget_bytes && !options.adaptive_split) {
    return ResourceExhausted("memory budget of " + std::to_string(options.memory_budget_bytes) +
                             " bytes is less than the pass's working set of " +
                             std::to_string(working_set) + " bytes (stream buffers " +
                             std::to_string(buffers) + ", activations " +
                             std::to_string(activations) + ", KV " + std::to_string(kv) + ")");
  }
  kv_split = kv;
  pinned = ChoosePins(
      group_bytes, planner::PinBudgetBytes(options.memory_budget_bytes, buffers, activations, kv));
  pinned_bytes = planner::PinnedBytes(group_bytes, pinned);
  if (!stager) return pinned_bytes == 0 ? Status::Ok() : loader->SetPinned(pinned);
  if (pinned_bytes == 0 && !options.adaptive_split) return FixHostTier(group_bytes);
  // The device keeps the pinned groups: two stream slots, then one per group
  // (allocated when first staged into; with an adaptive split any group may
  // be pinned later).
  std::vector<uint64_t> slots(2, 0);
  for (size_t g = 0; g < loader->groups(); ++g) {
    slots[0] = std::max(slots[0], loader->buffer_bytes(g));
    slots.push_back(pinned[g] || options.adaptive_split ? loader->buffer_bytes(g) : 0);
  }
  slots[1] = slots[0];
  resident_groups.assign(loader->groups(), std::nullopt);
  stager.reset();
  NS_RETURN_IF_ERROR(Guarded([&]() -> Status {
    stager = std::make_unique<DeviceStager>(*device, std::move(slots));
    return Status::Ok();
  }));
  return FixHostTier(group_bytes);
}

Status Engine::Impl::FixHostTier(const std::vector<uint64_t>& group_bytes) {
  const uint64_t budget = options.host_memory_budget_bytes;
  if (budget == 0 || !stager || options.residency == Residency::kResident) return Status::Ok();
  // The loader's stream buffers are host memory too: the tier keeps groups
  // in what they leave.
  const uint64_t buffers =
      planner::StreamBufferBytes(group_bytes, pinned, options.prefetch, loader->deferred_groups());
  if (buffers > budget) {
    return ResourceExhausted("host memory budget of " + std::to_string(budget) +
                             " bytes is less than the loader's stream buffers of " +
                             std::to_string(buffers) + " bytes");
  }
  host_pinned = planner::ChooseHostTierGroups(group_bytes, pinned, budget, options.prefetch,
                                              options.pin_placement, loader->deferred_groups());
  host_pinned_bytes = planner::PinnedBytes(group_bytes, host_pinned);
  return host_pinned_bytes == 0 ? Status::Ok() : loader->SetPinned(host_pinned);
}

Status Engine::Impl::Resplit(uint64_t kv) {
  if (options.residency == Residency::kResident || options.memory_budget_bytes == 0) {
    return Status::Ok();
  }
  const std::vector<uint64_t> group_bytes = GroupBytes();
  const uint64_t buffers =
      planner::StreamBufferBytes(group_bytes, {}, options.prefetch, loader->deferred_groups());
  const uint64_t activations =
      planner::ActivationWorkingSetBytes(config, options.activation_budget_bytes);
  std::vector<bool> next = ChoosePins(
      group_bytes, planner::PinBudgetBytes(options.memory_budget_bytes, buffers, activations, kv));
  kv_split = kv;
  if (next == pinned) return Status::Ok();
  if (stager) {
    // Groups the device gives up: their slots freed now, the loader reads
    // them again. Newly pinned ones are kept when next staged (Acquire).
    for (size_t g = 0; g < next.size(); ++g) {
      if (!pinned[g] || next[g]) continue;
      if (resident_groups[g]) {
        resident_groups[g].reset();
        NS_RETURN_IF_ERROR(Guarded([&]() -> Status {
          stager->Free(2 + g);
          return Status::Ok();
        }));
        loader->Unskip(g);
      }
    }
    pinned = std::move(next);
    pinned_bytes = planner::PinnedBytes(group_bytes, pinned);
    if (options.host_memory_budget_bytes == 0) return Status::Ok();
    host_pinned = planner::ChooseHostTierGroups(group_bytes, pinned,
                                                options.host_memory_budget_bytes, options.prefetch,
                                                options.pin_placement, loader->deferred_groups());
    host_pinned_bytes = planner::PinnedBytes(group_bytes, host_pinned);
    return loader->SetPinned(host_pinned);
  }
  NS_RETURN_IF_ERROR(loader->SetPinned(next));
  pinned = std::move(next);
  pinned_bytes = planner::PinnedBytes(group_bytes, pinned);
  return Status::Ok();
}

Status Engine::Impl::OpenStager() {
  device = IsCudaDevice(options.device) ? at::Device(options.device) : at::Device(at::kCPU);
  std::vector<uint64_t> slots;
  uint64_t largest = 0;
  for (size_t g = 0; g < loader->groups(); ++g) {
    slots.push_back(loader->buffer_bytes(g));
    largest = std::max(largest, slots.back());
  }
  if (options.residency == Residency::kResident) {
    resident_groups.resize(slots.size());
  } else {
    slots = {largest, largest};
  }
  return Guarded([&]() -> Status {
    stager = std::make_unique<DeviceStager>(*device, std::move(slots));
    return Status::Ok();
  });
}

Status Engine::Impl::Validate(const SequenceRequest& r) const {
  if (r.prompt.empty()) return InvalidArgument("empty prompt");
  const int64_t length = static_cast<int64_t>(r.prompt.size());
  if (length > max_context) {
    return InvalidArgument("prompt of " + std::to_string(length) +
                           " tokens is longer than the context of " + std::to_string(max_context) +
                           " tokens" + context_note);
  }
  NS_RETURN_IF_ERROR(ValidateTokens(r.prompt));
  if (r.max_new_tokens < 0) return InvalidArgument("max_new_tokens must be >= 0");
  if (r.top_logprobs < 0 || r.top_logprobs > 20) {
    return InvalidArgument("top_logprobs must be in 0..20");
  }
  if (r.top_logprobs > 0 && !r.logprobs) {
    return InvalidArgument("top_logprobs needs logprobs");
  }
  NS_RETURN_IF_ERROR(ValidateSamplingParams(r.sampling));
  return ValidateLabels(r);
}

Status Engine::Impl::ValidateTokens(const std::vector<TokenId>& ids) const {
  for (TokenId id : ids) {
    if (id < 0 || id >= config.vocab_size) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(config.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

Status Engine::Impl::ValidateLabels(const SequenceRequest& r) const {
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  for (size_t j = 0; j < r.labels.size(); ++j) {
    const std::vector<TokenId>& label = r.labels[j];
    const std::string name = "label " + std::to_string(j);
    if (label.empty()) return InvalidArgument(name + " is empty");
    NS_RETURN_IF_ERROR(ValidateTokens(label).Prefixed(name));
    const int64_t length = prompt + static_cast<int64_t>(label.size());
    if (length > max_context) {
      return InvalidArgument("prompt of " + std::to_string(prompt) + " tokens + " + name + " of " +
                             std::to_string(label.size()) +
                             " tokens is longer than the context of " +
                             std::to_string(max_context) + " tokens" + context_note);
    }
  }
  return Status::Ok();
}

void Engine::Impl::Classify(Sequence& s, const at::Tensor& rows) {
  s.labels = ScoreLabels(s.request.labels, at::log_softmax(rows.to(at::kDouble), 1), &s.best_label);
  if (s.request.return_last_logits) {
    const float* first = rows.data_ptr<float>();
    s.last_logits.assign(first, first + config.vocab_size);
  }
  s.finished = FinishReason::kLength;
}

void Engine::Impl::Advance(Sequence& s, const float* logits) {
  if (s.generated.empty() && s.request.return_last_logits) {
    s.last_logits.assign(logits, logits + config.vocab_size);
  }
  if (s.request.max_new_tokens == 0) {
    s.finished = FinishReason::kLength;
    return;
  }
  TokenId token = s.sampler.Sample(logits, config.vocab_size);
  s.generated.push_back(token);
  if (s.request.logprobs) {
    s.logprobs.push_back(LogprobsOf(logits, config.vocab_size, token, s.request.top_logprobs));
  }
  const auto& stops = s.request.stop_ids;
  bool stop = std::find(stops.begin(), stops.end(), token) != stops.end() ||
              (!s.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end());
  const int64_t length = static_cast<int64_t>(s.request.prompt.size() + s.generated.size());
  if (stop) {
    s.finished = FinishReason::kStop;
  } else if (static_cast<int64_t>(s.generated.size()) >= s.request.max_new_tokens ||
             length >= max_context) {
    s.finished = FinishReason::kLength;
  }
}

using planner::kMinKeptPrefixTokens;

int64_t Engine::Impl::FeedKey(const std::vector<TokenId>& prompt, int* kept, int64_t* past) const {
  *kept = -1;
  *past = 0;
  for (size_t k = 0; k < kept_prefixes.size(); ++k) {
    const std::vector<TokenId>& ids = kept_prefixes[k].ids;
    // At least one token of the prompt is computed: its logits are needed.
    const size_t most = std::min(ids.size(), prompt.size() - 1);
    const int64_t agree =
        std::mismatch(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(most), prompt.begin())
            .first -
        ids.begin();
    if (agree >= kMinKeptPrefixTokens && agree > *past) {
      *kept = static_cast<int>(k);
      *past = agree;
    }
  }
  if (*kept < 0) return prompt.front();
  return -1 - ((static_cast<int64_t>(*kept) << 32) + *past);
}

std::vector<Engine::Impl::PassFeed> Engine::Impl::PassFeeds() const {
  std::vector<PassFeed> feeds;
  std::unordered_map<int64_t, size_t> by_key;  // FeedKey -> its feed in `feeds`
  for (size_t i = 0; i < active.size(); ++i) {
    const Sequence& s = *active[i];
    if (s.cached > 0 || !options.share_prefixes) {
      feeds.push_back({{i}, -1, 0});
      continue;
    }
    int kept = -1;
    int64_t past = 0;
    auto [it, made] = by_key.try_emplace(FeedKey(s.request.prompt, &kept, &past), feeds.size());
    if (made) feeds.push_back({{}, kept, past});
    feeds[it->second].members.push_back(i);
  }
  return feeds;
}

uint64_t Engine::Impl::KeptPrefixBytes() const {
  std::set<const KVCache*> counted = SharedCaches();  // held: counted by KvBytesInUse
  uint64_t bytes = 0;
  for (const KeptPrefix& k : kept_prefixes) {
    if (counted.insert(k.cache.get()).second) bytes += k.cache->bytes();
  }
  return bytes;
}

std::set<const KVCache*> Engine::Impl::SharedCaches() const {
  std::set<const KVCache*> shared;
  for (const std::unique_ptr<Sequence>& s : active) {
    if (s->cached > 0 && s->cache.shared() != nullptr) shared.insert(s->cache.shared());
  }
  return shared;
}

bool Engine::Impl::KeptInUse(size_t k, const SequenceRequest* joining) const {
  if (SharedCaches().count(kept_prefixes[k].cache.get()) > 0) return true;
  auto starts_after = [&](const SequenceRequest& r) {
    int kept = -1;
    int64_t past = 0;
    FeedKey(r.prompt, &kept, &past);
    return kept == static_cast<int>(k);
  };
  if (joining != nullptr && starts_after(*joining)) return true;
  for (const std::unique_ptr<Sequence>& s : active) {
    if (s->cached == 0 && options.share_prefixes && starts_after(s->request)) return true;
  }
  return false;
}

bool Engine::Impl::PrefixRoom(int64_t tokens, uint64_t bytes) const {
  const uint64_t taken = KvBytesInUse() + KeptPrefixBytes() + bytes;
  if (options.adaptive_split) {  // out of pinned layers: priced
    return taken <= options.kv_budget_bytes &&
           planner::KeepPrefixFromPins(tokens, bytes, compute_seconds_per_token,
                                       pass_read_bytes_per_second);
  }
  if (options.kv_budget_bytes > 0) return taken <= options.kv_budget_bytes;
  // No KV budget: none, or a memory budget's first pass (which fixes one).
  return options.memory_budget_bytes == 0;
}

std::vector<Engine::Impl::Keeping> Engine::Impl::PrefixesToKeep(const std::vector<size_t>& members,
                                                                const PassTrie& trie) const {
  // Trie rows are distinct prefixes: prompts agree while their rows do, so
  // the row at depth kMinKeptPrefixTokens - 1 names the set a prompt is in.
  const size_t least = static_cast<size_t>(kMinKeptPrefixTokens);
  std::map<int64_t, std::vector<size_t>> sets;  // of feeds (indices into members)
  for (size_t f = 0; f < members.size(); ++f) {
    const std::vector<int64_t>& rows = trie.prompt_rows[f];
    if (rows.size() >= least) sets[rows[least - 1]].push_back(f);
  }
  const uint64_t per_token = planner::KvBytesPerToken(config, KvDTypeBytes(options.kv_dtype));
  std::vector<Keeping> keeping;
  std::set<int64_t> charged;  // rows whose KV the prefixes kept so far add
  int64_t tokens = 0;
  for (const auto& [row, set] : sets) {
    if (set.size() < 2) continue;
    const std::vector<int64_t>& first = trie.prompt_rows[set[0]];
    size_t shared = first.size();
    for (size_t f : set) {
      const std::vector<int64_t>& prompt = trie.prompt_rows[f];
      size_t k = least;
      while (k < std::min(shared, prompt.size()) && prompt[k] == first[k]) ++k;
      shared = k;
    }
    const std::vector<TokenId>& prompt = active[members[set[0]]]->request.prompt;
    Keeping k{std::vector<TokenId>(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(shared)),
              std::vector<int64_t>(first.begin(), first.begin() + static_cast<ptrdiff_t>(shared))};
    const bool known = std::any_of(kept_prefixes.begin(), kept_prefixes.end(),
                                   [&](const KeptPrefix& kept) { return kept.ids == k.ids; });
    if (known) continue;
    const bool held = std::any_of(set.begin(), set.end(),
                                  [&](size_t f) { return !active[members[f]]->one_pass(); });
    std::set<int64_t> more = charged;
    if (!held) more.insert(k.rows.begin(), k.rows.end());
    if (!PrefixRoom(tokens + static_cast<int64_t>(shared), more.size() * per_token)) continue;
    charged = std::move(more);
    tokens += static_cast<int64_t>(shared);
    keeping.push_back(std::move(k));
  }
  return keeping;
}

void Engine::Impl::DropUnusedPrefixes(int64_t pass) {
  // Unused in this pass and the one before: jobs a scheduler sends after
  // seeing a kept prefix join a boundary late, so one idle pass is spared.
  // (A prefix decoding sequences hold costs nothing more while they do:
  // PlanPass marks it used.)
  kept_prefixes.erase(std::remove_if(kept_prefixes.begin(), kept_prefixes.end(),
                                     [pass](const KeptPrefix& k) { return k.pass < pass - 1; }),
                      kept_prefixes.end());
}

// The positions two or more of a feed's going-on sequences hold (a prefix
// of each one's path: a trie row's holders hold its ancestors too), and
// the rows `kept` (prefixes kept for later passes: PrefixesToKeep, each a
// prefix of its sequences' paths too), are kept once, in a cache they share
// (SequenceRows::shared, KVCache::Share), in row order; each sequence keeps
// only the rest of its path in its own.
void ShareKeptPaths(const ModelConfig& config, KvDType dtype, const std::set<int64_t>& kept,
                    SequenceRows& r) {
  std::map<int64_t, int> holders;
  for (const SequenceRows::Keep& keep : r.keeps) {
    for (int64_t row : keep.rows) ++holders[row];
  }
  auto shared = [&](int64_t row) { return kept.count(row) > 0 || holders[row] > 1; };
  std::set<int64_t> rows = kept;
  for (const auto& [row, n] : holders) {
    if (n > 1) rows.insert(row);
  }
  r.shared_rows.assign(rows.begin(), rows.end());
  if (r.shared_rows.empty()) return;
  r.shared = std::make_shared<KVCache>(config, static_cast<int64_t>(r.shared_rows.size()), dtype);
  for (SequenceRows::Keep& keep : r.keeps) {
    std::vector<int32_t> at;
    while (at.size() < keep.rows.size() && shared(keep.rows[at.size()])) {
      const int64_t row = keep.rows[at.size()];
      at.push_back(
          static_cast<int32_t>(std::lower_bound(r.shared_rows.begin(), r.shared_rows.end(), row) -
                               r.shared_rows.begin()));
    }
    if (at.empty()) continue;
    keep.rows.erase(keep.rows.begin(), keep.rows.begin() + static_cast<ptrdiff_t>(at.size()));
    keep.cache->Share(r.shared, std::move(at));
  }
  // A prompt all of whose positions are shared keeps nothing of its own yet.
  r.keeps.erase(std::remove_if(r.keeps.begin(), r.keeps.end(),
                               [](const SequenceRows::Keep& k) { return k.rows.empty(); }),
                r.keeps.end());
}

// Going-on sequences of a feed that starts after a kept prefix hold its
// first `past` positions (`rows` of its cache) in the kept prefix's cache
// itself (KVCache::Share), whatever pass they join in; each keeps only the
// rest of its path.
void ShareKept(const std::shared_ptr<KVCache>& kept, const std::vector<int64_t>& rows_of_kept,
               int64_t past, SequenceRows& r) {
  const std::vector<int32_t> rows(rows_of_kept.begin(),
                                  rows_of_kept.begin() + static_cast<ptrdiff_t>(past));
  for (SequenceRows::Keep& keep : r.keeps) {
    keep.rows.erase(keep.rows.begin(), keep.rows.begin() + past);
    keep.cache->Share(kept, rows);
  }
  r.keeps.erase(std::remove_if(r.keeps.begin(), r.keeps.end(),
                               [](const SequenceRows::Keep& k) { return k.rows.empty(); }),
                r.keeps.end());
}

// `rows` of a trie fed after `past` cached positions: at those positions.
std::vector<int64_t> AfterPast(int64_t past, const std::vector<int64_t>& rows) {
  std::vector<int64_t> positions(static_cast<size_t>(past));
  std::iota(positions.begin(), positions.end(), 0);
  for (int64_t row : rows) positions.push_back(past + row);
  return positions;
}

Engine::Impl::PassPlan Engine::Impl::PlanPass(PassStats* stats) {
  PassPlan plan;
  // As the feeds below group the sequences (before this pass keeps a prefix).
  stats->kv_bytes = KvBytesInUse();
  const std::set<const KVCache*> held = SharedCaches();
  for (KeptPrefix& k : kept_prefixes) {
    if (held.count(k.cache.get()) > 0) k.pass = stats->index;  // decoding sequences use it
  }
  std::vector<std::vector<int64_t>> logit_rows(active.size());
  plan.fed.resize(active.size());
  for (const PassFeed& feed : PassFeeds()) {
    const std::vector<size_t>& members = feed.members;
    SequenceRows r;
    r.begin = static_cast<int64_t>(plan.ids.size());
    Sequence& first = *active[members.front()];
    if (first.cached > 0) {  // a decoding sequence's latest token
      r.count = 1;
      r.past = first.cached;
      r.cache = &first.cache;
      plan.ids.push_back(first.generated.back());
      plan.rows.positions.push_back(r.past);
      logit_rows[members.front()] = {r.begin};
      plan.fed[members.front()] = 1;
      plan.rows.sequences.push_back(std::move(r));
      ++stats->fed_tokens;
      continue;
    }
    // The trie of their feeds, after the kept prefix they start from.
    KVCache* kept = nullptr;
    std::shared_ptr<KVCache> kept_cache;
    std::vector<int64_t> kept_rows;
    if (feed.kept >= 0) {
      KeptPrefix& k = kept_prefixes[static_cast<size_t>(feed.kept)];
      k.pass = stats->index;
      kept_cache = k.cache;
      kept = kept_cache.get();
      r.past = feed.past;
      kept_rows = k.rows;
    }
    std::vector<TrieFeed> feeds;
    for (size_t i : members) {
      TrieFeed f = active[i]->Feed();
      f.prompt.erase(f.prompt.begin(), f.prompt.begin() + r.past);
      feeds.push_back(std::move(f));
    }
    PassTrie trie = BuildPassTrie(feeds);
    r.count = static_cast<int64_t>(trie.ids.size());
    plan.ids.insert(plan.ids.end(), trie.ids.begin(), trie.ids.end());
    for (int64_t depth : trie.depth) plan.rows.positions.push_back(r.past + depth);
    stats->fed_tokens += trie.fed_tokens + r.past * static_cast<int64_t>(members.size());
    stats->shared_tokens += trie.shared_rows;
    stats->kept_prefix_tokens += r.past;
    for (size_t f = 0; f < members.size(); ++f) {
      std::vector<int64_t>& rows = logit_rows[members[f]] = LogitRows(trie, f);
      for (int64_t& row : rows) row += r.begin;
      Sequence& s = *active[members[f]];
      plan.fed[members[f]] = s.NextFeedSize();
      s.shared_prompt_tokens = r.past;
      for (int64_t row : trie.prompt_rows[f]) {
        s.shared_prompt_tokens += trie.holders[static_cast<size_t>(row)] > 1 ? 1 : 0;
      }
    }
    if (kept != nullptr) {  // the chains see the kept positions first
      for (TrieChain& chain : trie.chains) {
        const std::vector<int64_t> keys =
            AfterPast(r.past, std::vector<int64_t>(chain.keys.begin(), chain.keys.end()));
        chain.keys.assign(keys.begin(), keys.end());
        chain.depth += r.past;
      }
    }
    // One sequence whose feed is one chain from the start: its causal rows,
    // as a decode's.
    if (members.size() > 1 || trie.chains.size() > 1 || kept != nullptr) {
      r.chains = std::move(trie.chains);
    }
    if (members.size() == 1 && kept == nullptr) {
      r.cache = &first.cache;
      r.transient = first.one_pass();
    } else {  // the pass's own cache; those that go on keep their paths' keys
      r.cache =
          plan.shared_caches
              .emplace_back(std::make_unique<KVCache>(config, r.past + r.count, options.kv_dtype))
              .get();
      r.transient = true;
      r.prefix = kept;
      r.prefix_rows.assign(kept_rows.begin(), kept_rows.begin() + static_cast<ptrdiff_t>(r.past));
      for (size_t f = 0; f < members.size(); ++f) {
        Sequence& s = *active[members[f]];
        if (!s.one_pass()) r.keeps.push_back({&s.cache, AfterPast(r.past, trie.prompt_rows[f])});
      }
      if (kept != nullptr) {
        ShareKept(kept_cache, kept_rows, r.past, r);
      } else {
        std::vector<Keeping> keeping = PrefixesToKeep(members, trie);
        std::set<int64_t> rows;
        for (const Keeping& k : keeping) rows.insert(k.rows.begin(), k.rows.end());
        ShareKeptPaths(config, options.kv_dtype, rows, r);
        for (Keeping& k : keeping) {
          std::vector<int64_t> at;  // its rows' positions in the shared cache
          for (int64_t row : k.rows) {
            at.push_back(std::lower_bound(r.shared_rows.begin(), r.shared_rows.end(), row) -
                         r.shared_rows.begin());
          }
          kept_prefixes.push_back({std::move(k.ids), r.shared, std::move(at), stats->index});
        }
      }
    }
    plan.rows.sequences.push_back(std::move(r));
  }
  for (size_t i = 0; i < active.size(); ++i) {
    plan.first_logit.push_back(static_cast<int64_t>(plan.logit_rows.size()));
    plan.logit_rows.insert(plan.logit_rows.end(), logit_rows[i].begin(), logit_rows[i].end());
  }
  plan.rows.inv_freq = &inv_freq;
  plan.rows.device = device;
  plan.rows.micro_batch_rows = micro_batch_rows;
  plan.rows.max_score_bytes = max_score_bytes;
  plan.rows.batch_invariant = options.batch_invariant;
  stats->micro_batch_rows = micro_batch_rows;
  stats->sequences = static_cast<int64_t>(active.size());
  stats->tokens = static_cast<int64_t>(plan.ids.size());
  stats->logit_rows = static_cast<int64_t>(plan.logit_rows.size());
  plan.first_logit.push_back(stats->logit_rows);
  return plan;
}

StatusOr<LoadedGroup> Engine::Impl::Acquire(size_t index, PassStats* stats) {
  const bool resident = options.residency == Residency::kResident;
  // Slot of a group the device keeps: i when resident, 2 + i when pinned.
  const size_t kept_slot = resident ? index : 2 + index;
  if (!resident_groups.empty() && resident_groups[index]) {
    held_slot = kept_slot;
    return *resident_groups[index];
  }
  NS_ASSIGN_OR_RETURN(LoadedGroup group, loader->Acquire(index));
  stats->bytes_read += group.bytes_read;
  stats->io_seconds += group.wait_seconds;
  stats->load_seconds += group.load_seconds;
  if (!stager) return group;
  // Copy the group to the device; the host buffer goes back to the loader at
  // once, for the read after next.
  const bool keep = resident || (!pinned.empty() && pinned[index]);
  held_slot = keep ? kept_slot : next_slot++ % 2;
  const DeviceStager::Staged staged = stager->Stage(held_slot, group.base, group.bytes);
  stats->io_seconds += staged.copy_seconds;  // the slot wait is compute's
  for (const unsigned char*& data : group.data) data = staged.data + (data - group.base);
  group.base = staged.data;
  loader->Release(index);
  if (keep) {
    loader->Skip(index);  // the device has it for good
    LoadedGroup& kept = resident_groups[index].emplace(group);
    kept.bytes_read = 0;
    kept.units_read.clear();
    kept.wait_seconds = kept.load_seconds = 0;
  }
  return group;
}

void Engine::Impl::Release(size_t index) {
  if (stager) {
    stager->Release(held_slot);
  } else {
    loader->Release(index);
  }
}

StatusOr<at::Tensor> Engine::Impl::RunLayers(const PassPlan& plan, PassStats* stats) {
  Clock::time_point start = Clock::now();
  const uint64_t row_bytes = tensors.embedding->size / static_cast<uint64_t>(config.vocab_size);
  mapped->PrefetchRows(*tensors.embedding, plan.ids, row_bytes);
  at::Tensor hidden = Embed(config, View(tensors.embedding), plan.ids);
  if (options.residency == Residency::kStream) mapped->Release({tensors.embedding});
  stats->bytes_read += plan.ids.size() * row_bytes;
  stats->io_seconds += SecondsSince(start);
  stats->load_seconds += SecondsSince(start);
  if (device) hidden = hidden.to(*device);
  const bool read_ahead = ReadExpertsAhead(static_cast<int64_t>(plan.ids.size()));
  if (read_ahead) {  // every slice read in the order of groups, as a dense layer's weights
    for (const LayerGroups& where : layer_groups) {
      for (size_t s = 0; s < where.slices.size(); ++s) {
        const planner::ExpertSlice& slice = where.slices[s];
        loader->Decide(where.dense + 1 + s,
                       std::vector<bool>(static_cast<size_t>(slice.end - slice.first), true));
      }
    }
  } else if (config.is_moe()) {
    GuessRoutedExperts(static_cast<int64_t>(plan.ids.size()));
  }
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const LayerGroups& where = layer_groups[static_cast<size_t>(layer)];
    NS_ASSIGN_OR_RETURN(LoadedGroup loaded, Acquire(where.dense, stats));
    if (!where.slices.empty()) {
      NS_RETURN_IF_ERROR(RunSparseLayer(layer, loaded, read_ahead, plan, hidden, stats));
      continue;
    }
    start = Clock::now();
    RunDecoderLayer(config, LayerView(tensors.layers[static_cast<size_t>(layer)], loaded), layer,
                    hidden, plan.rows);
    Release(where.dense);
    stats->compute_seconds += SecondsSince(start);
  }
  return hidden;
}

bool Engine::Impl::ReadExpertsAhead(int64_t rows) const {
  if (!config.is_moe() || options.expert_reads == ExpertReads::kRouted) return false;
  if (options.expert_reads == ExpertReads::kAll) return true;
  if (options.residency == Residency::kResident) return false;
  uint64_t expert_bytes = 0;  // of the widest sparse layer
  for (const LayerTensors& layer : tensors.layers) {
    expert_bytes = std::max(expert_bytes, layer.bytes - layer.dense_bytes);
  }
  const double touched =
      planner::ExpectedExpertsTouched(config.moe.num_experts, config.moe.top_k, rows) /
      static_cast<double>(config.moe.num_experts);
  return planner::ReadExpertsAhead(touched, expert_bytes, read_bytes_per_second,
                                   dense_seconds_per_row * static_cast<double>(rows));
}

// Per expert slice, the experts this pass's rows will more likely route to
// than not (planner::ExpertTouchedProbability over the routing counted so
// far): the loader reads them while the disk would otherwise wait for the
// routing (LayerLoader::Guess). At uniform routing that is every expert from
// 6 rows on at top 8 of 64, none at 1 to 5.
void Engine::Impl::GuessRoutedExperts(int64_t rows) {
  const int64_t k = config.moe.top_k;
  for (size_t layer = 0; layer < layer_groups.size(); ++layer) {
    const std::vector<uint64_t>& usage = expert_usage[layer];
    uint64_t routings = 0;
    for (uint64_t n : usage) routings += n;
    const uint64_t seen_rows = k > 0 ? routings / static_cast<uint64_t>(k) : 0;
    const LayerGroups& where = layer_groups[layer];
    for (size_t s = 0; s < where.slices.size(); ++s) {
      const planner::ExpertSlice& slice = where.slices[s];
      std::vector<bool> likely;
      for (int64_t e = slice.first; e < slice.end; ++e) {
        likely.push_back(planner::ExpertTouchedProbability(config.moe.num_experts, k,
                                                           usage[static_cast<size_t>(e)], seen_rows,
                                                           rows) >= 0.5);
      }
      loader->Guess(where.dense + 1 + s, std::move(likely));
    }
  }
}

Status Engine::Impl::RunSparseLayer(int64_t layer, const LoadedGroup& dense, bool read_ahead,
                                    const PassPlan& plan, at::Tensor& hidden, PassStats* stats) {
  const LayerGroups& where = layer_groups[static_cast<size_t>(layer)];
  const LayerTensors& tensors_of_layer = tensors.layers[static_cast<size_t>(layer)];
  Clock::time_point start = Clock::now();
  const LayerWeights w = LayerView(tensors_of_layer, dense);
  RunAttentionHalf(config, w, layer, hidden, plan.rows);
  SparseMlp mlp(config, w, hidden, micro_batch_rows);
  // Each slice's routed experts (its units), decided before the dense part
  // goes back, so that the loader reads the first slice at once and each
  // next one while this one computes. A group the device keeps is kept
  // whole: later passes route elsewhere.
  std::vector<std::vector<bool>> units(where.slices.size());
  for (size_t s = 0; s < where.slices.size(); ++s) {
    const planner::ExpertSlice& slice = where.slices[s];
    const size_t group = where.dense + 1 + s;
    const auto first = mlp.routed().begin() + slice.first;
    units[s].assign(first, first + (slice.end - slice.first));
    const bool any = std::find(units[s].begin(), units[s].end(), true) != units[s].end();
    const bool in_memory =
        options.residency == Residency::kResident || (!pinned.empty() && pinned[group]);
    if (in_memory) stats->experts_pinned += slice.end - slice.first;
    const bool kept = stager && in_memory;
    if (any && kept) units[s].assign(units[s].size(), true);
    if (!any) units[s].clear();
    if (!read_ahead) loader->Decide(group, units[s]);
  }
  Release(where.dense);
  const double dense_seconds = SecondsSince(start);
  stats->compute_seconds += dense_seconds;
  const int64_t rows = hidden.size(0);
  if (rows > 0) {  // measured, for the next pass's ReadExpertsAhead
    dense_seconds_per_row = dense_seconds / static_cast<double>(rows);
  }
  std::vector<uint64_t>& usage = expert_usage[static_cast<size_t>(layer)];
  for (size_t e = 0; e < usage.size(); ++e) {
    usage[e] += static_cast<uint64_t>(mlp.rows_routed(static_cast<int64_t>(e)));
  }
  std::vector<int64_t> routed = mlp.RoutedExperts();
  stats->experts_total += config.moe.num_experts;
  stats->experts_routed += static_cast<int64_t>(routed.size());
  stats->routed_experts[static_cast<size_t>(layer)] = std::move(routed);
  std::vector<int64_t>& unrouted = stats->unrouted_experts_read[static_cast<size_t>(layer)];
  for (size_t s = 0; s < where.slices.size(); ++s) {
    const planner::ExpertSlice& slice = where.slices[s];
    const size_t group = where.dense + 1 + s;
    if (units[s].empty() && !read_ahead) continue;  // no row routes into it
    NS_ASSIGN_OR_RETURN(LoadedGroup loaded, Acquire(group, stats));
    for (size_t u = 0; u < loaded.units_read.size(); ++u) {
      if (!loaded.units_read[u]) continue;
      ++stats->experts_read;
      const int64_t expert = slice.first + static_cast<int64_t>(u);
      if (mlp.routed()[static_cast<size_t>(expert)]) continue;
      unrouted.push_back(expert);
      ++stats->experts_read_unrouted;
    }
    // A read begun on a guess waited for the routing: not the disk's speed.
    if (loaded.bytes_read > 0 && loaded.load_seconds > 0 && !loaded.guessed) {
      read_bytes_per_second = static_cast<double>(loaded.bytes_read) / loaded.load_seconds;
    }
    start = Clock::now();
    for (int64_t e = slice.first; e < slice.end; ++e) {
      if (mlp.routed()[static_cast<size_t>(e)]) {
        mlp.RunExpert(e, ExpertView(tensors_of_layer, e, slice.first, loaded));
      }
    }
    Release(group);
    stats->compute_seconds += SecondsSince(start);
  }
  start = Clock::now();
  mlp.Finish(hidden);
  stats->compute_seconds += SecondsSince(start);
  return Status::Ok();
}

StatusOr<at::Tensor> Engine::Impl::RunHead(const at::Tensor& hidden,
                                           const std::vector<int64_t>& rows, PassStats* stats) {
  const size_t first = head_group;
  NS_ASSIGN_OR_RETURN(LoadedGroup loaded, Acquire(first, stats));
  Clock::time_point start = Clock::now();
  const Weight norm = {tensors.final_norm, loaded.data[0], device, nullptr};
  const Weight norm_bias = tensors.final_norm_bias
                               ? Weight{tensors.final_norm_bias, loaded.data[2], device, nullptr}
                               : Weight{};
  const at::Tensor index = at::tensor(rows, at::TensorOptions().dtype(at::kLong));
  at::Tensor last = hidden.index_select(0, index.to(hidden.device()));
  const at::Tensor normed = Norm(last, config.norm, norm, norm_bias, config.norm_eps);
  at::Tensor logits = at::empty({normed.size(0), config.vocab_size}, normed.options());
  int64_t row = 0;
  for (size_t s = 0; s < head_slices.size(); ++s) {
    if (s > 0) {
      Release(first + s - 1);
      stats->compute_seconds += SecondsSince(start);
      NS_ASSIGN_OR_RETURN(loaded, Acquire(first + s, stats));
      start = Clock::now();
    }
    const checkpoint::TensorInfo& slice = head_slices[s];
    const Weight weight = {&slice, loaded.data[s == 0 ? 1 : 0], device, plan};
    // On a device the head multiplies in float32: logits rounded to BF16
    // would be off by up to half a BF16 step (0.03 at a logit of 8).
    logits.narrow(1, row, slice.shape[0])
        .copy_(device ? at::linear(normed, WeightAs(weight, at::kFloat)) : Linear(normed, weight));
    row += slice.shape[0];
  }
  Release(first + head_slices.size() - 1);
  logits = logits.to(at::Device(at::kCPU), at::kFloat);  // waits for the device's work
  stats->compute_seconds += SecondsSince(start);
  return logits;
}

void Engine::Impl::RetireFinished() {
  auto done = std::stable_partition(active.begin(), active.end(),
                                    [](const auto& s) { return !s->finished; });
  for (auto it = done; it != active.end(); ++it) {
    Sequence& s = **it;
    finished.push_back({s.id, std::move(s.request.prompt), std::move(s.generated), *s.finished,
                        std::move(s.last_logits), std::move(s.labels), s.best_label,
                        std::move(s.logprobs), s.shared_prompt_tokens});
  }
  active.erase(done, active.end());
}

Sequence* Engine::Impl::Find(SequenceId id) const {
  for (const std::unique_ptr<Sequence>& s : active) {
    if (s->id == id) return s.get();
  }
  return nullptr;
}

uint64_t Engine::Impl::KvBytesInUse(const SequenceRequest* joining) const {
  const uint64_t per_token = planner::KvBytesPerToken(config, KvDTypeBytes(options.kv_dtype));
  uint64_t bytes = 0;
  // Those still to run their first pass: their whole caches, less the
  // positions of a kept prefix they start after (held in its cache:
  // ShareKept; KeptPrefixBytes counts it) or, in a feed of their own, what
  // its going-on sequences will share (the trie of their prompts: one
  // position per distinct prefix).
  std::unordered_map<int64_t, std::vector<TrieFeed>> feeds;
  auto add = [&](const SequenceRequest& r) {
    bytes += static_cast<uint64_t>(CachePositions(r, max_context)) * per_token;
    if (!options.share_prefixes) return;
    int kept = -1;
    int64_t past = 0;
    const int64_t key = FeedKey(r.prompt, &kept, &past);
    if (kept >= 0) {
      bytes -= static_cast<uint64_t>(past) * per_token;
    } else {
      feeds[key].push_back({r.prompt, {}});
    }
  };
  for (const std::unique_ptr<Sequence>& s : active) {
    if (s->one_pass()) continue;
    if (s->cached == 0) {
      add(s->request);
    } else {
      bytes += s->cache.bytes();
    }
  }
  if (joining != nullptr &&
      !planner::EndsInFirstPass(joining->max_new_tokens, LabelTokenCounts(*joining))) {
    add(*joining);
  }
  for (const KVCache* cache : SharedCaches()) bytes += cache->bytes();
  for (const auto& [key, group] : feeds) {
    int64_t positions = 0;
    for (const TrieFeed& f : group) positions += static_cast<int64_t>(f.prompt.size());
    bytes -= static_cast<uint64_t>(positions - CountTrieRows(group)) * per_token;
  }
  return bytes;
}

int64_t Engine::Impl::NextPassTokens(const SequenceRequest* joining) const {
  // As PassFeeds groups them: a trie per feed, after its kept prefix.
  std::unordered_map<int64_t, std::vector<TrieFeed>> feeds;
  int64_t tokens = 0;
  auto add = [&](const SequenceRequest& r) {
    if (!options.share_prefixes) {
      tokens += CountTrieRows({{r.prompt, r.labels}});
      return;
    }
    int kept = -1;
    int64_t past = 0;
    const int64_t key = FeedKey(r.prompt, &kept, &past);
    TrieFeed f = {r.prompt, r.labels};
    f.prompt.erase(f.prompt.begin(), f.prompt.begin() + static_cast<ptrdiff_t>(past));
    feeds[key].push_back(std::move(f));
  };
  for (const std::unique_ptr<Sequence>& s : active) {
    if (s->cached > 0) {
      ++tokens;
    } else {
      add(s->request);
    }
  }
  if (joining != nullptr) add(*joining);
  for (const auto& [key, group] : feeds) tokens += CountTrieRows(group);
  return tokens;
}

StatusOr<PassStats> Engine::Impl::RunPass() {
  const Clock::time_point pass_start = Clock::now();
  PassStats stats;
  stats.index = passes++;
  if (config.is_moe()) {
    stats.routed_experts.resize(static_cast<size_t>(config.num_layers));
    stats.unrouted_experts_read.resize(static_cast<size_t>(config.num_layers));
  }
  stats.residency = options.residency;
  const PassPlan plan = PlanPass(&stats);
  if (stats.index == 0) {
    NS_RETURN_IF_ERROR(FixPassPlan(plan));
  } else if (options.adaptive_split) {
    // Sequences that finished free KV for pins; kept prefixes take theirs.
    NS_RETURN_IF_ERROR(Resplit(KvBytesInUse() + KeptPrefixBytes()));
  }
  stats.pinned_bytes = pinned_bytes;
  stats.host_pinned_bytes = host_pinned_bytes;
  ReportCompute(&stats);
  NS_ASSIGN_OR_RETURN(at::Tensor hidden, RunLayers(plan, &stats));
  NS_ASSIGN_OR_RETURN(at::Tensor logits, RunHead(hidden, plan.logit_rows, &stats));

  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < active.size(); ++i) {
    Sequence& s = *active[i];
    s.cached += plan.fed[i];
    const int64_t first = plan.first_logit[i];
    if (s.classifying()) {
      Classify(s, logits.narrow(0, first, plan.first_logit[i + 1] - first));
    } else {
      Advance(s, logits.data_ptr<float>() + first * config.vocab_size);
    }
  }
  RetireFinished();
  stats.compute_seconds += SecondsSince(start);
  stats.seconds = SecondsSince(pass_start);
  // Device kernels run asynchronously: what the host did not spend waiting
  // for weights, it spent waiting for (or launching) them.
  if (stager) stats.compute_seconds = std::max(0.0, stats.seconds - stats.io_seconds);
  if (!expert_usage_path.empty()) WriteExpertUsage(expert_usage_path, expert_usage);  // a hint
  DropUnusedPrefixes(stats.index);
  if (stats.tokens > 0) compute_seconds_per_token = stats.compute_seconds / stats.tokens;
  if (stats.load_seconds > 0 && stats.bytes_read > 0) {
    pass_read_bytes_per_second = static_cast<double>(stats.bytes_read) / stats.load_seconds;
  }
  return stats;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& dir,
                                               const EngineOptions& options) {
  NS_RETURN_IF_ERROR(ValidateOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  NS_ASSIGN_OR_RETURN(impl->checkpoint, checkpoint::ReadCheckpoint(dir));
  Status st = [&]() -> Status {
    NS_ASSIGN_OR_RETURN(impl->config, ParseModelConfig(impl->checkpoint.config));
    NS_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(impl->config.model_type));
    NS_ASSIGN_OR_RETURN(impl->tensors, BindTensors(*arch, impl->config, impl->checkpoint));
    NS_ASSIGN_OR_RETURN(impl->eos, EosTokenIds(impl->checkpoint, impl->config));
    return ResolveContext(impl->config, options, &impl->max_context, &impl->context_note);
  }();
  if (!st.ok()) return st.Prefixed(dir);
  NS_ASSIGN_OR_RETURN(impl->mapped, MappedCheckpoint::Open(impl->checkpoint));
  const uint64_t slice_bytes = options.expert_slice_bytes > 0 ? options.expert_slice_bytes
                                                              : planner::kDefaultExpertSliceBytes;
  impl->head_slices = HeadSlices(impl->tensors, slice_bytes);
  const bool staged = IsCudaDevice(options.device) || options.accelerator_path_on_cpu;
  StreamPlan stream = StreamedGroups(impl->tensors, impl->head_slices, slice_bytes);
  impl->layer_groups = std::move(stream.layers);
  impl->head_group = stream.head;
  if (impl->config.is_moe()) {
    for (int64_t layer = 0; layer < impl->config.num_layers; ++layer) {
      impl->expert_usage.emplace_back(
          impl->config.IsSparseLayer(layer) ? impl->config.moe.num_experts : 0, 0);
    }
    if (!options.compute_state_dir.empty()) {
      impl->expert_usage_path = ExpertUsagePath(options.compute_state_dir, impl->checkpoint.dir);
      std::optional<ExpertUsage> kept = ReadExpertUsage(
          impl->expert_usage_path, impl->config.num_layers, impl->config.moe.num_experts);
      bool same_shape = kept.has_value();  // sparse layers where this config has them
      for (size_t layer = 0; same_shape && layer < kept->size(); ++layer) {
        same_shape = (*kept)[layer].size() == impl->expert_usage[layer].size();
      }
      if (same_shape) impl->expert_usage = std::move(*kept);
    }
  }
  const LayerLoaderOptions loader_options = LoaderOptions(options, staged, stream);
  NS_ASSIGN_OR_RETURN(
      impl->loader, LayerLoader::Open(impl->checkpoint, std::move(stream.groups), loader_options));
  if (staged) NS_RETURN_IF_ERROR(impl->OpenStager());
  impl->options.kv_dtype = ResolveKvDType(options.kv_dtype, staged, ProjectionDType(impl->tensors));
  impl->inv_freq = RopeInverseFrequencies(impl->config.rope);
  impl->micro_batch_rows = MicroBatchRows(impl->config, options.activation_budget_bytes);
  if (options.activation_budget_bytes > 0) {
    impl->max_score_bytes = static_cast<int64_t>(std::min<uint64_t>(
        options.activation_budget_bytes, static_cast<uint64_t>(kMaxAttentionScoreBytes)));
  }
  SetComputeThreads(options.threads > 0 ? options.threads : static_cast<int>(Cores()));
  impl->layer_flops_per_token = planner::LayerFlopsPerToken(impl->checkpoint);
  impl->head_flops_per_row = planner::HeadFlopsPerRow(impl->checkpoint);
  for (const LayerTensors& layer : impl->tensors.layers) {
    for (const checkpoint::TensorInfo* t : AllTensors(layer)) {
      if (!t->quant) continue;
      const std::string name = checkpoint::QuantFormatName(t->quant->format);
      auto& formats = impl->quant_formats;
      if (std::find(formats.begin(), formats.end(), name) == formats.end()) formats.push_back(name);
    }
  }
  if (staged) {
    impl->compute.requested = options.compute_dtype;
  } else {
    NS_ASSIGN_OR_RETURN(impl->compute,
                        ChooseCompute(ProjectionShapes(impl->tensors, impl->head_slices), options,
                                      /*always_measure=*/false));
    // Without a plan the projections run float32 as before the plans
    // (kernels.h): what a non-invariant float32 choice means.
    if (options.batch_invariant || impl->compute.measurement ||
        IsBf16Kernel(impl->compute.plan[0])) {
      impl->plan = &impl->compute.plan;
    }
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

StatusOr<SequenceId> Engine::Add(SequenceRequest request) {
  if (!impl_->broken.ok()) return impl_->broken;
  NS_RETURN_IF_ERROR(impl_->Validate(request));
  const uint64_t budget = impl_->options.kv_budget_bytes;
  // What the request adds: its cache, less the prompt positions it will
  // share with a sequence waiting for its first pass (KvBytesInUse).
  uint64_t in_use = impl_->KvBytesInUse();
  uint64_t need = impl_->KvBytesInUse(&request) - in_use;
  // Kept prefixes give their room to a sequence that needs it, oldest first,
  // but for those a sequence holds or will hold (KeptInUse).
  auto& kept = impl_->kept_prefixes;
  while (budget > 0 && in_use + impl_->KeptPrefixBytes() + need > budget) {
    size_t k = 0;
    while (k < kept.size() && impl_->KeptInUse(k, &request)) ++k;
    if (k == kept.size()) break;
    kept.erase(kept.begin() + static_cast<ptrdiff_t>(k));
    in_use = impl_->KvBytesInUse();  // feeds may group otherwise without it
    need = impl_->KvBytesInUse(&request) - in_use;
  }
  if (budget > 0 && in_use + impl_->KeptPrefixBytes() + need > budget) {
    return ResourceExhausted("sequence needs " + std::to_string(need) + " KV bytes; " +
                             std::to_string(in_use) + " of the budget of " +
                             std::to_string(budget) + " are in use");
  }
  // What the request adds to the next pass: its trie rows that no
  // sequence waiting for its first pass already holds. Counted only against
  // a budget, which also bounds the count's cost (the tokens queued).
  const int64_t pass_budget = impl_->options.pass_token_budget;
  if (pass_budget > 0) {
    const int64_t queued = impl_->NextPassTokens();
    const int64_t tokens = impl_->NextPassTokens(&request) - queued;
    if (queued > 0 && queued + tokens > pass_budget) {
      return ResourceExhausted("sequence feeds " + std::to_string(tokens) + " tokens; " +
                               std::to_string(queued) + " of the next pass's budget of " +
                               std::to_string(pass_budget) + " tokens are taken");
    }
  }
  const uint64_t taken = in_use + impl_->KeptPrefixBytes() + need;
  if (impl_->options.adaptive_split && impl_->passes > 0 && taken > impl_->kv_split) {
    NS_RETURN_IF_ERROR(impl_->Resplit(taken));  // groups give way before the cache grows
  }
  const int64_t capacity = CachePositions(request, impl_->max_context);
  SequenceId id = impl_->next_id++;
  return Guarded([&]() -> StatusOr<SequenceId> {
    impl_->active.push_back(std::make_unique<Sequence>(id, std::move(request), impl_->config,
                                                       capacity, impl_->options.kv_dtype));
    return id;
  });
}

StatusOr<PassStats> Engine::Step() {
  if (!impl_->broken.ok()) return impl_->broken;
  if (impl_->active.empty()) return FailedPrecondition("no sequences in flight");
  StatusOr<PassStats> stats = Guarded([this] { return impl_->RunPass(); });
  if (!stats.ok()) {
    impl_->broken = stats.status();
  } else if (impl_->options.on_pass) {
    impl_->options.on_pass(*stats);
  }
  return stats;
}

uint64_t Engine::KvBytesFor(const SequenceRequest& request) const {
  if (planner::EndsInFirstPass(request.max_new_tokens, LabelTokenCounts(request))) return 0;
  return static_cast<uint64_t>(CachePositions(request, impl_->max_context)) *
         planner::KvBytesPerToken(impl_->config, KvDTypeBytes(impl_->options.kv_dtype));
}

int64_t Engine::FirstPassTokens(const SequenceRequest& request) {
  return planner::FirstPassTokens(static_cast<int64_t>(request.prompt.size()),
                                  LabelTokenCounts(request));
}

int64_t Engine::next_pass_tokens() const { return impl_->NextPassTokens(); }

std::vector<std::vector<TokenId>> Engine::kept_prefixes() const {
  std::vector<std::vector<TokenId>> ids;
  for (const Impl::KeptPrefix& k : impl_->kept_prefixes) ids.push_back(k.ids);
  return ids;
}

uint64_t Engine::kv_bytes_in_use() const { return impl_->KvBytesInUse(); }

StatusOr<std::vector<TokenId>> Engine::Generated(SequenceId id) const {
  const Sequence* s = impl_->Find(id);
  if (s == nullptr) return NotFound("sequence " + std::to_string(id) + " is not in flight");
  return s->generated;
}

Status Engine::Finish(SequenceId id, FinishReason reason) {
  Sequence* s = impl_->Find(id);
  if (s == nullptr) return NotFound("sequence " + std::to_string(id) + " is not in flight");
  s->finished = reason;
  impl_->RetireFinished();
  return Status::Ok();
}

Status Engine::Cancel(SequenceId id) {
  std::vector<std::unique_ptr<Sequence>>& active = impl_->active;
  auto it = std::find_if(active.begin(), active.end(), [id](const auto& s) { return s->id == id; });
  if (it == active.end()) return NotFound("sequence " + std::to_string(id) + " is not in flight");
  active.erase(it);
  return Status::Ok();
}

std::vector<SequenceResult> Engine::TakeFinished() {
  std::vector<SequenceResult> out = std::move(impl_->finished);
  impl_->finished.clear();
  std::sort(out.begin(), out.end(),
            [](const SequenceResult& a, const SequenceResult& b) { return a.id < b.id; });
  return out;
}

int64_t Engine::active() const { return static_cast<int64_t>(impl_->active.size()); }
const ModelConfig& Engine::config() const { return impl_->config; }
int64_t Engine::max_context() const { return impl_->max_context; }
int64_t Engine::micro_batch_rows() const { return impl_->micro_batch_rows; }
KvDType Engine::kv_dtype() const { return impl_->options.kv_dtype; }
uint64_t Engine::pinned_bytes() const { return impl_->pinned_bytes; }
uint64_t Engine::host_pinned_bytes() const { return impl_->host_pinned_bytes; }
const std::vector<int64_t>& Engine::eos_token_ids() const { return impl_->eos; }
const ComputeChoice& Engine::compute() const { return impl_->compute; }

StatusOr<ComputeChoice> MeasureCompute(const std::string& dir, const EngineOptions& options) {
  NS_RETURN_IF_ERROR(ValidateOptions(options));
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint checkpoint, checkpoint::ReadCheckpoint(dir));
  Status st = Status::Ok();
  ModelTensors tensors;
  st = [&]() -> Status {
    NS_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(checkpoint.config));
    NS_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(config.model_type));
    NS_ASSIGN_OR_RETURN(tensors, BindTensors(*arch, config, checkpoint));
    return Status::Ok();
  }();
  if (!st.ok()) return st.Prefixed(dir);
  SetComputeThreads(options.threads > 0 ? options.threads : static_cast<int>(Cores()));
  return Guarded([&]() -> StatusOr<ComputeChoice> {
    return ChooseCompute(ProjectionShapes(tensors, HeadSlices(tensors, ExpertSliceBytes(options))),
                         options,
                         /*always_measure=*/true);
  });
}

}  // namespace nightshift::engine
