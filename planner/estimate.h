// The streaming arithmetic: what it costs to run a model by streaming its
// checkpoint through memory one layer at a time.
//
// A pass walks every layer once: it reads the whole checkpoint from disk,
// whatever number of tokens rides through it. Generating N tokens costs N
// passes (the first comes out of the pass that reads the prompt); B sequences
// generated together share every pass. Memory holds the layer being computed
// (and the next one, when it is prefetched), the activations of the pass, and
// the KV cache of every sequence for every layer.
//
// These are the catalog estimates, from a parameter count and a stored dtype
// alone. planner/exact.h computes the same quantities from a real
// checkpoint's shapes; planner/plan.h combines either into a plan.
//
// Units: GB is 10^9 bytes, except the KV term, which keeps the heuristic's
// MiB-per-layer-per-1024-tokens constant (see KvCacheGb). Every function is
// pure and thread-safe; numbers are rounded like Python's round() (see
// planner/round.h) to the decimals each comment names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nightshift::planner {

// How much bigger the biggest streamed unit is than the average layer: the
// embedding (and an untied LM head) is vocab x hidden, which with a
// 128k-152k vocabulary outweighs one decoder layer (Llama-3-70B: 1.76 GB per
// layer on average, 2.1 GB of embedding).
inline constexpr double kPeakLayerRatio = 1.25;
// Layers held at once: the one computing and, with prefetch, the next one
// being read.
inline constexpr double kResidentLayersPrefetch = 2.0;
inline constexpr double kResidentLayersSerial = 1.0;
// Flat allowance for activations and runtime buffers in the catalog estimate.
inline constexpr double kActivationGb = 0.5;
// KV cache per decoder layer per 1024 tokens of context, in MiB: K and V x 8
// KV heads x 128 head dim x 1024 tokens x 2 bytes, the grouped-query shape of
// current open-weight families.
inline constexpr double kKvMibPerLayerPerK = 4.0;
// Context the KV term is priced at when the caller names none, in units of
// 1024 tokens.
inline constexpr double kDefaultContextK = 4.0;
inline constexpr int kTokensPerK = 1024;
// Fraction of the raw read bandwidth a pass achieves: per-file opens, parsing
// and the compute tail that does not overlap the next read cost the rest.
inline constexpr double kStreamEfficiencyPrefetch = 0.85;
inline constexpr double kStreamEfficiencySerial = 0.70;
// Prompt length past which a pass stops being bound by the disk alone: the
// per-layer compute over that many tokens starts to rival the read.
inline constexpr int64_t kPrefillIoBoundTokens = 4096;
// The slowest rate still worth offering as a batch job: one token per 100 s.
inline constexpr double kBatchFloorTokensPerSecond = 0.01;
// Share of each memory pool a streamed model may take: VRAM keeps 8% for the
// driver and the framework; unified memory is capped the way the OS caps GPU
// use of it; a machine with neither (CPU only) keeps 20% of its RAM for the
// OS and the rest of the box (the seed leaves this case undefined).
inline constexpr double kVramShare = 0.92;
inline constexpr double kUnifiedShare = 0.66;
inline constexpr double kRamOnlyShare = 0.80;

// Bytes per parameter of a checkpoint stored as `dtype`: fp32/f32 4,
// fp16/f16 and bf16 2, fp8, int8 and q8 1, q4 and int4 0.5. Case and
// surrounding blanks are ignored. An unknown name is InvalidArgument naming
// it and the accepted ones; never a silent default.
StatusOr<double> BytesPerParam(std::string_view dtype);

// A model as a catalog describes it.
struct ModelSpec {
  std::string id;                // label only
  std::string kind;              // "llm", "vlm" or empty; only Rank's kind filter reads it
  double size_b = 0;             // parameters in billions; <= 0 means unknown
  int layers = 0;                // declared decoder depth; 0 means not declared
  bool moe = false;              // mixture of experts
  double bytes_per_param = 2.0;  // from BytesPerParam; bf16 unless the catalog says otherwise
  std::optional<double> score;   // benchmark score; unscored when absent
};

struct LayerCount {
  std::optional<int> layers;  // unknown when absent
  bool estimated = false;     // interpolated rather than declared
};

// Decoder depth: the declared one; else, for a dense model of known size, a
// log-size interpolation between published depths (1B:16, 3B:28, 7B:32,
// 8B:32, 13B:40, 14B:48, 27B:62, 32B:64, 70B:80, 120B:96, 405B:126; clamped
// at both ends; rounded half to even). A mixture-of-experts model without a
// declared depth is unknown: its depth does not follow its size
// (DeepSeek-V3: 671B in 61 layers).
LayerCount CountLayers(const ModelSpec& spec);

// Checkpoint size in GB (size_b x bytes_per_param, 3 decimals); +infinity
// when the size is unknown, so an unsized model never looks free.
double CheckpointGb(const ModelSpec& spec);

// KV cache of one sequence in GB at `context_k` x 1024 tokens:
// layers x 4 MiB x context_k / 1024 (3 decimals). 0 when `layers` is unknown
// or 0: the unknown depth is reported upstream instead.
double KvCacheGb(std::optional<int> layers, double context_k = kDefaultContextK);

// Disk a streamed model needs: the checkpoint itself, read in place (nothing
// is copied or converted), so peak and steady are the same figure.
struct DiskRequired {
  double peak_gb = 0;
  double steady_gb = 0;
};
// Both figures are `checkpoint_gb` rounded to 1 decimal, or +infinity.
DiskRequired DiskRequiredGb(double checkpoint_gb);

// kStreamEfficiencyPrefetch or kStreamEfficiencySerial.
double StreamEfficiency(bool prefetching);

// Seconds for one pass: checkpoint_gb / read_gbs / StreamEfficiency (3
// decimals, and at least 0.001 so that a tiny checkpoint never reads as an
// infinitely fast one). Unknown (nullopt) when the bandwidth is unknown or
// not positive, or the checkpoint size is not finite and positive.
std::optional<double> SecondsPerPass(double checkpoint_gb, std::optional<double> read_gbs,
                                     bool prefetching);

struct GenerationRequest {
  int64_t new_tokens = 128;   // per sequence; at least 1 is assumed
  int64_t prompt_tokens = 0;  // rides the first pass; costs no extra pass
  int64_t batch = 1;          // sequences sharing every pass; at least 1 is assumed
  bool prefetching = true;
};

struct GenerationTime {
  double seconds_per_pass = 0;
  int64_t passes = 0;                // = new_tokens
  double time_to_first_token_s = 0;  // one pass, whatever the prompt length
  double total_seconds = 0;          // passes x seconds_per_pass (1 decimal)
  double decode_tps = 0;             // one sequence: 1 / seconds_per_pass (3 decimals)
  double effective_tps = 0;          // new_tokens x batch / total (3 decimals)
  int64_t tokens_delivered = 0;      // new_tokens x batch
  int64_t prompt_tokens = 0;
  bool prompt_is_free = true;  // prompt_tokens <= kPrefillIoBoundTokens
  int64_t batch = 1;
};

// End-to-end time of one streamed generation; unknown when SecondsPerPass is.
// Past kPrefillIoBoundTokens of prompt, prompt_is_free is false: the first
// pass then takes longer than reported (the decode figures stand).
std::optional<GenerationTime> EstimateGenerationTime(double checkpoint_gb,
                                                     std::optional<double> read_gbs,
                                                     const GenerationRequest& request);

// A duration as a person says it: "0.4 s" under 1 s, "42 s" under 90 s,
// "3 min" under 90 min, "2.0 h" under 48 h, else "2.3 days"; "?" when unknown.
std::string HumanDuration(std::optional<double> seconds);

// Decode rate of one sequence, 1 / SecondsPerPass (3 decimals); unknown when
// SecondsPerPass is.
std::optional<double> TokensPerSecond(double checkpoint_gb, std::optional<double> read_gbs,
                                      bool prefetching);

// 1 / tps (1 decimal); unknown when tps is unknown or not positive.
std::optional<double> SecondsPerToken(std::optional<double> tps);

// The memory a machine offers, in GB; absent pools are unknown.
struct MemoryPools {
  std::optional<double> vram_gb;
  std::optional<double> unified_gb;
  std::optional<double> ram_gb;
};

// Memory budget for a streamed model (3 decimals): unified memory x 0.66 when
// the machine has it, else VRAM x 0.92, else RAM x 0.80; then capped by
// `available_ram_gb` (RAM free right now) when given. Unknown when no pool is
// given.
std::optional<double> BudgetGb(const MemoryPools& pools,
                               std::optional<double> available_ram_gb = std::nullopt);

// Resident memory of a streamed model in the catalog estimate (1 decimal):
//   kPeakLayerRatio x CheckpointGb / layers   (the largest streamed unit)
//     x 2 with prefetch, x 1 without
//   + kActivationGb
//   + KvCacheGb(layers, context_k) x batch.
// +infinity when the size or the depth is unknown. 6.1 GB for 70B bf16 in 80
// layers at 4k context, batch 1, with prefetch.
double FootprintGb(const ModelSpec& spec, bool prefetching, double context_k, int64_t batch);

}  // namespace nightshift::planner
