#include "planner/estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "planner/round.h"

namespace nightshift::planner {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// The smallest pass time at 3 decimals: what keeps rates finite.
constexpr double kMinSecondsPerPass = 0.001;

struct DTypeBytes {
  const char* name;
  double bytes;
};

constexpr DTypeBytes kDTypes[] = {
    {"fp32", 4.0}, {"f32", 4.0},  {"fp16", 2.0}, {"f16", 2.0}, {"bf16", 2.0},
    {"fp8", 1.0},  {"int8", 1.0}, {"q8", 1.0},   {"q4", 0.5},  {"int4", 0.5},
};

struct DepthPoint {
  double size_b;
  int layers;
};

// Published num_hidden_layers of a reference dense checkpoint at each size.
constexpr DepthPoint kDepthBySize[] = {
    {1.0, 16},  {3.0, 28},  {7.0, 32},  {8.0, 32},   {13.0, 40},   {14.0, 48},
    {27.0, 62}, {32.0, 64}, {70.0, 80}, {120.0, 96}, {405.0, 126},
};

std::string Normalized(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  std::string out(text.substr(begin, end - begin));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int InterpolateDepth(double size_b) {
  const DepthPoint* first = std::begin(kDepthBySize);
  const DepthPoint* last = std::end(kDepthBySize) - 1;
  if (size_b <= first->size_b) return first->layers;
  if (size_b >= last->size_b) return last->layers;
  const DepthPoint* hi = first + 1;
  while (hi->size_b < size_b) ++hi;
  const DepthPoint* lo = hi - 1;
  // Depth tracks width, and width tracks the logarithm of the parameter count.
  double position =
      (std::log(size_b) - std::log(lo->size_b)) / (std::log(hi->size_b) - std::log(lo->size_b));
  return static_cast<int>(PyRound(lo->layers + position * (hi->layers - lo->layers), 0));
}

}  // namespace

StatusOr<double> BytesPerParam(std::string_view dtype) {
  std::string key = Normalized(dtype);
  for (const DTypeBytes& d : kDTypes) {
    if (key == d.name) return d.bytes;
  }
  return InvalidArgument("unknown dtype '" + std::string(dtype) +
                         "' (expected fp32, f32, fp16, f16, bf16, fp8, int8, q8, q4 or int4)");
}

LayerCount CountLayers(const ModelSpec& spec) {
  if (spec.layers > 0) return {spec.layers, false};
  if (spec.moe || spec.size_b <= 0) return {std::nullopt, false};
  return {InterpolateDepth(spec.size_b), true};
}

double CheckpointGb(const ModelSpec& spec) {
  if (spec.size_b <= 0) return kInfinity;
  return PyRound(spec.size_b * spec.bytes_per_param, 3);
}

double KvCacheGb(std::optional<int> layers, double context_k) {
  if (!layers || *layers <= 0) return 0.0;
  return PyRound(*layers * kKvMibPerLayerPerK * context_k / 1024.0, 3);
}

DiskRequired DiskRequiredGb(double checkpoint_gb) {
  if (!std::isfinite(checkpoint_gb)) return {kInfinity, kInfinity};
  double size = PyRound(checkpoint_gb, 1);
  return {size, size};
}

double StreamEfficiency(bool prefetching) {
  return prefetching ? kStreamEfficiencyPrefetch : kStreamEfficiencySerial;
}

std::optional<double> SecondsPerPass(double checkpoint_gb, std::optional<double> read_gbs,
                                     bool prefetching) {
  if (!read_gbs || !(*read_gbs > 0)) return std::nullopt;
  if (!std::isfinite(checkpoint_gb) || checkpoint_gb <= 0) return std::nullopt;
  return std::max(kMinSecondsPerPass,
                  PyRound(checkpoint_gb / *read_gbs / StreamEfficiency(prefetching), 3));
}

std::optional<GenerationTime> EstimateGenerationTime(double checkpoint_gb,
                                                     std::optional<double> read_gbs,
                                                     const GenerationRequest& request) {
  std::optional<double> per_pass = SecondsPerPass(checkpoint_gb, read_gbs, request.prefetching);
  if (!per_pass) return std::nullopt;
  GenerationTime t;
  t.seconds_per_pass = *per_pass;
  t.batch = std::max<int64_t>(1, request.batch);
  // The pass that reads the prompt emits the first token; every later token
  // needs its own pass.
  t.passes = std::max<int64_t>(1, request.new_tokens);
  t.time_to_first_token_s = *per_pass;
  double total = *per_pass * static_cast<double>(t.passes);
  t.total_seconds = PyRound(total, 1);
  t.decode_tps = PyRound(1.0 / *per_pass, 3);
  t.tokens_delivered = t.passes * t.batch;
  t.effective_tps = PyRound(static_cast<double>(t.tokens_delivered) / total, 3);
  t.prompt_tokens = request.prompt_tokens;
  t.prompt_is_free = request.prompt_tokens <= kPrefillIoBoundTokens;
  return t;
}

std::string HumanDuration(std::optional<double> seconds) {
  if (!seconds) return "?";
  double s = *seconds;
  if (s < 1) return FormatFixed(s, 1) + " s";
  if (s < 90) return FormatFixed(s, 0) + " s";
  if (s < 5400) return FormatFixed(s / 60, 0) + " min";
  if (s < 172800) return FormatFixed(s / 3600, 1) + " h";
  return FormatFixed(s / 86400, 1) + " days";
}

std::optional<double> TokensPerSecond(double checkpoint_gb, std::optional<double> read_gbs,
                                      bool prefetching) {
  std::optional<double> per_pass = SecondsPerPass(checkpoint_gb, read_gbs, prefetching);
  if (!per_pass) return std::nullopt;
  return PyRound(1.0 / *per_pass, 3);
}

std::optional<double> SecondsPerToken(std::optional<double> tps) {
  if (!tps || !(*tps > 0)) return std::nullopt;
  return PyRound(1.0 / *tps, 1);
}

std::optional<double> BudgetGb(const MemoryPools& pools, std::optional<double> available_ram_gb) {
  std::optional<double> budget;
  if (pools.unified_gb) {
    budget = *pools.unified_gb * kUnifiedShare;
  } else if (pools.vram_gb) {
    budget = *pools.vram_gb * kVramShare;
  } else if (pools.ram_gb) {
    budget = *pools.ram_gb * kRamOnlyShare;
  }
  if (!budget) return std::nullopt;
  if (available_ram_gb) budget = std::min(*budget, *available_ram_gb);
  return PyRound(*budget, 3);
}

double FootprintGb(const ModelSpec& spec, bool prefetching, double context_k, int64_t batch) {
  LayerCount depth = CountLayers(spec);
  double checkpoint = CheckpointGb(spec);
  if (!depth.layers || !std::isfinite(checkpoint)) return kInfinity;
  double largest_layer = kPeakLayerRatio * checkpoint / *depth.layers;
  double resident_layers = prefetching ? kResidentLayersPrefetch : kResidentLayersSerial;
  double kv = KvCacheGb(depth.layers, context_k) * static_cast<double>(std::max<int64_t>(1, batch));
  return PyRound(largest_layer * resident_layers + kActivationGb + kv, 1);
}

}  // namespace nightshift::planner
