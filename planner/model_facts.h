// One function for each fact about a model that more than one module needs:
// the engine (what it reserves and runs), the worker's advert (what it tells
// the scheduler) and the scheduler and planner (what they size and price).
// Each is defined here once; callers never re-derive them.
//
//   KV bytes per token   KvBytesPerToken: 2 (K and V) x layers x kv_heads x
//                        head_dim x the KV dtype's bytes
//   KV positions per job KvPositions: what one sequence keeps in the cache
//   max context          MaxContextTokens: max_position_embeddings, or the
//                        sliding window when shorter
//   streamed groups      StreamedGroupBytes: what the engine's loader reads
//                        as one unit (each layer, the head's row slices)
//   pinned groups        ChoosePinnedGroups: which groups a budget keeps
//   streamed bytes       StreamedBytesPerPass: what one pass reads;
//                        ExpectedStreamedBytesPerPass: the same for a
//                        mixture of experts at a pass's rows (MoeFacts)
//   seconds per pass     PassSeconds: streamed bytes / measured bandwidth;
//                        PassSecondsWithCompute: the larger of that and the
//                        pass's FLOPs (PassFlops) / the measured compute rate
//
// libtorch-free; builds in every configuration (ns_model_facts). Every
// function is pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/model_config.h"

namespace nightshift::planner {

// The KV cache's dtype when none is named (`--kv-dtype auto`, the default):
// on the CPU path float32 (kEngineKvDtypeBytes); on the accelerator path the
// projections' 16-bit dtype (BF16 or F16 weights: 2 bytes, half the bytes
// per token, twice the jobs in a KV budget), float32 for float32 weights.
// The worker advertises KV bytes in the dtype its engine uses, so that the
// scheduler's sizing and the engine's admission agree. PassTokenBytes prices
// a pass's transient K/V in float32.
inline constexpr int kEngineKvDtypeBytes = 4;
int DefaultKvDtypeBytes(bool accelerator_path, int projection_dtype_bytes);

// K and V of one token across all layers: 2 x layers x kv_heads x head_dim x
// kv_dtype_bytes. 0 when any factor is not positive.
uint64_t KvBytesPerToken(int64_t layers, int64_t kv_heads, int64_t head_dim, int kv_dtype_bytes);
// The same for a parsed config.json (num_layers, num_kv_heads, head_dim).
uint64_t KvBytesPerToken(const checkpoint::ModelConfig& config, int kv_dtype_bytes);

// KV cache positions one job's sequence holds. Generation (`label_tokens`
// empty): the prompt and max_new_tokens - 1, since the last generated token
// is never fed back (prompt + max(max_new_tokens - 1, 0)). Classification:
// the prompt and every label's tokens (`label_tokens` holds each label's
// token count), all riding the one sequence. The engine clamps a
// generation's figure to its context afterwards (generation stops there);
// the scheduler refuses a job whose figure exceeds the context.
int64_t KvPositions(int64_t prompt_tokens, int64_t max_new_tokens,
                    const std::vector<int64_t>& label_tokens);

// Whether a job's sequence ends inside its first pass: a classification
// (every label is scored in the pass that feeds the prompt) or a generation
// of at most one token (the pass that feeds the prompt samples it, and it is
// never fed back). Such a sequence keeps layer l's keys and values only
// while layer l runs: it reserves no KV budget, only rows of its pass.
bool EndsInFirstPass(int64_t max_new_tokens, const std::vector<int64_t>& label_tokens);

// The KV positions a job holds across passes, what the KV budget is charged:
// KvPositions, or 0 when it ends in its first pass.
int64_t ReservedKvPositions(int64_t prompt_tokens, int64_t max_new_tokens,
                            const std::vector<int64_t>& label_tokens);

// Tokens a job feeds in its first pass: its prompt and every label's tokens.
int64_t FirstPassTokens(int64_t prompt_tokens, const std::vector<int64_t>& label_tokens);

// Tokens a first pass of `batch` prompts of `prompt_tokens` computes when
// they begin with the same `shared_prefix_tokens` (<= prompt_tokens): the
// prefix once, then each prompt's own tokens (the engine's pass trie,
// worker/engine/pass_trie.h). shared_prefix_tokens 0: batch x prompt_tokens.
int64_t SharedFirstPassTokens(int64_t batch, int64_t prompt_tokens, int64_t shared_prefix_tokens);

// The shortest prompt prefix a pass keeps for the next ones (the engine's
// kept prefixes) and that a later prompt must agree with to start after one:
// a chat template alone makes every prompt of a model share about 24 tokens
// (Qwen2.5's default system turn), which is not worth the KV it would hold.
inline constexpr int64_t kMinKeptPrefixTokens = 32;

// Whether keeping a shared prefix's keys and values for the next pass pays
// when its memory comes out of pinned layers (an adaptive memory split):
// every later pass that uses it computes `prefix_tokens` fewer tokens (at
// the measured `compute_seconds_per_token`) and streams its `kv_bytes` more
// of the checkpoint (at the measured `read_bytes_per_second`). Without both
// measurements: false.
bool KeepPrefixFromPins(int64_t prefix_tokens, uint64_t kv_bytes, double compute_seconds_per_token,
                        double read_bytes_per_second);

// Bytes one token of a pass holds for the whole pass beyond the fixed
// activation budget: its hidden state, kept between layers (4 x hidden), and
// the keys and values of the running layer, which a sequence ending in the
// pass holds only then (2 x kv_heads x head_dim x 4). The pass-token budget
// is memory / this.
uint64_t PassTokenBytes(const checkpoint::ModelConfig& config);

// Memory a worker gives a pass's tokens when no --pass-token-budget is set;
// 64 MiB is 5,461 tokens of bench-1.7b (hidden 2048), 32,768 of a hidden-256
// model: a queue of long classification prompts fills a pass with dozens.
inline constexpr uint64_t kDefaultPassTokenMemory = 64ull << 20;

// kDefaultPassTokenMemory / PassTokenBytes(config), at least 1.
int64_t DefaultPassTokenBudget(const checkpoint::ModelConfig& config);

// The longest context the engine runs for `config` by default:
// max_position_embeddings, or the sliding window when that is shorter
// (sliding-window attention is not implemented; below the window it equals
// full attention). The worker advertises this as max_context_tokens.
int64_t MaxContextTokens(const checkpoint::ModelConfig& config);

// Rows per slice of an LM head of `rows` rows and `head_bytes` bytes:
// ceil(rows / slices). No slice may exceed `largest_layer_bytes` (the
// loader's buffers are sized to the largest group; 0: no such bound), and
// the head is cut into at least kMinHeadSlices slices of at least
// kMinHeadSliceBytes where it is that large: the head is a pass's last read,
// and the disk idles while its last slice computes. One slice of a 131 MB
// head left 6-9 ms of compute after the last read at one row and 38 ms at
// 256 (a Qwen3-MoE decode pass, AMD EPYC family 26, 2026-12-06). The engine
// slices its head with this; StreamedGroupBytes prices the same slices.
inline constexpr int64_t kMinHeadSlices = 4;
inline constexpr uint64_t kMinHeadSliceBytes = 16ull << 20;
int64_t HeadSliceRows(int64_t rows, uint64_t head_bytes, uint64_t largest_layer_bytes);

// The tensor bytes of each group the engine's layer loader reads as one unit,
// in pass order: every decoder layer (checkpoint::Checkpoint::layers), then
// the final norm (and its bias) with the LM head's first row slice, then each
// further slice (HeadSliceRows against the largest group before the head; a
// tied head is the embedding). A layer holding expert tensors
// (checkpoint::ExpertIndex >= 0) is its dense part (every other tensor of the
// layer) and then its expert slices (ExpertSlices at kDefaultExpertSliceBytes,
// the engine's; the overload below takes another size), expert e being every
// tensor of the layer whose ExpertIndex is e; a dense model's groups are its
// layers. The embedding is not a group: a pass reads only the rows of the
// tokens it feeds.
std::vector<uint64_t> StreamedGroupBytes(const checkpoint::Checkpoint& checkpoint);

// Mixtures of experts. A sparse layer streams as its dense part (attention,
// norms, router, shared expert) and then its experts in slices: runs of
// whole experts in index order of at most `slice_bytes` each (an expert
// larger than that is a slice of its own), so the loader's buffers are sized
// by a slice, never by a layer. As few slices as that allows, and as even
// as they can be: the largest is the smallest it can be with that many.
// (While one slice computes the next is read, so a small last slice read
// long before a large one ends leaves the disk idle: 64 experts of 9.4 MB
// at 256 MiB were 28, 28 and 8; they are 22, 22 and 20.) [first, end)
// expert indices per slice.
inline constexpr uint64_t kDefaultExpertSliceBytes = 256ull << 20;
struct ExpertSlice {
  int64_t first = 0;
  int64_t end = 0;
  uint64_t bytes = 0;
};
std::vector<ExpertSlice> ExpertSlices(const std::vector<uint64_t>& expert_bytes,
                                      uint64_t slice_bytes);
// The distinct experts `rows` tokens touch at a layer of `experts` when each
// routes to `top_k` of them uniformly: E x (1 - (1 - k/E)^B). Real routers
// are skewed, so this is an upper bound of the mean.
double ExpectedExpertsTouched(int64_t experts, int64_t top_k, int64_t rows);
// The chance that a pass of `rows` tokens routes at least one to an expert
// that took `routed` of the `seen_rows` tokens routed at its layer so far
// (each to `top_k` of `experts`): 1 - (1 - f)^B, f the expert's share of
// tokens, (routed + k) / (seen_rows + E): measured, starting from uniform
// routing's k/E as if E tokens had been seen. With nothing seen it is
// ExpectedExpertsTouched / E.
double ExpertTouchedProbability(int64_t experts, int64_t top_k, uint64_t routed, uint64_t seen_rows,
                                int64_t rows);
// Whether a pass reads a sparse layer's experts (`expert_bytes`) ahead of
// its routing, like a dense layer's weights, rather than once routed. Ahead
// costs the experts it touches not (1 - `touched_fraction` of the bytes at
// `read_bytes_per_second`); waiting for the routing leaves the disk idle
// while the layer's dense half computes (`routing_wait_seconds`). Without a
// measured read speed: false (read what is routed).
bool ReadExpertsAhead(double touched_fraction, uint64_t expert_bytes, double read_bytes_per_second,
                      double routing_wait_seconds);

// Where pinned groups sit in the pass.
enum class PinPlacement {
  kSpread,  // evenly through the pass (the default): every streamed read overlaps compute
  kHead,    // the first groups
  kTail,    // the last groups
};
// "spread", "head", "tail"; and back (InvalidArgument naming the word).
const char* PinPlacementName(PinPlacement placement);
StatusOr<PinPlacement> ParsePinPlacement(const std::string& word);

// The groups (of `group_bytes`, StreamedGroupBytes' order) kept resident
// across passes within `pin_budget_bytes`: candidates are taken in the order
// of `placement` (spread: bit-reversed positions, so every prefix of the
// order is spread evenly over the pass) and each is pinned when it still
// fits. Kept as stored (no widening), so a group costs its stored bytes.
// Returns one flag per group; none when the budget is 0.
std::vector<bool> ChoosePinnedGroups(const std::vector<uint64_t>& group_bytes,
                                     uint64_t pin_budget_bytes,
                                     PinPlacement placement = PinPlacement::kSpread);
// The bytes of the groups `pinned` marks.
uint64_t PinnedBytes(const std::vector<uint64_t>& group_bytes, const std::vector<bool>& pinned);
// The accelerator path's host tier: of the groups `device_pinned` leaves
// (empty: none pinned on the device), those kept in host memory within
// `host_budget_bytes` less the loader's stream buffers (StreamBufferBytes of
// the groups not on the device, `deferred` as there), chosen as
// ChoosePinnedGroups does among them. One flag per group; none when the
// buffers leave nothing.
std::vector<bool> ChooseHostTierGroups(const std::vector<uint64_t>& group_bytes,
                                       const std::vector<bool>& device_pinned,
                                       uint64_t host_budget_bytes, bool prefetch,
                                       PinPlacement placement = PinPlacement::kSpread,
                                       const std::vector<bool>& deferred = {});

// The float32 temporaries one row of a pass needs while a layer runs it: 4
// x (8 x hidden + 6 x q width + 6 x KV width + 3 x intermediate) bytes
// (engine::ActivationBytesPerRow, which explains the terms).
uint64_t ActivationBytesPerRow(const checkpoint::ModelConfig& config);
// The rows a layer runs at once under an activation budget: min(256, budget
// / ActivationBytesPerRow), at least 1; 256 without a budget (0).
int64_t MicroBatchRows(const checkpoint::ModelConfig& config, uint64_t activation_budget_bytes);

// The activation working set a memory budget reserves for any pass (the
// engine's EngineOptions::memory_budget_bytes, the worker's advert, `plan`):
// R rows' float32 temporaries, 4 x (8 x hidden + 6 x q width + 6 x KV width +
// 3 x intermediate) bytes each, with R = min(256, activation_budget / that),
// at least 1 (256 without a budget), plus twice the attention score blocks
// (the scores and their softmax), each min(64 MiB, activation_budget) (64 MiB
// without). The same figures as the engine's ActivationBytesPerRow,
// MicroBatchRows and score bound (engine.h; a test holds them equal). The
// pass's hidden states and logits come on top.
uint64_t ActivationWorkingSetBytes(const checkpoint::ModelConfig& config,
                                   uint64_t activation_budget_bytes);

// What a memory budget leaves for pinned groups after the working set:
// memory_budget - stream buffers - activations - KV budget, 0 when the
// working set alone takes it all (saturating). The planner's fixed runtime
// allowance (code, thread pools) is not part of any of these.
uint64_t PinBudgetBytes(uint64_t memory_budget, uint64_t stream_buffer_bytes,
                        uint64_t activation_bytes, uint64_t kv_budget_bytes);
// The groups a prefetch reads past a sparse layer's expert slices while
// those wait for the layer's routing (`deferred`: one flag per group, set for
// the expert slices): each group not deferred that follows one deferred
// group and precedes another, i.e. the dense part of a sparse layer after a
// sparse layer. The loader reads them into two look-ahead buffers of their
// own (one in use, one reading), so that the disk reads the next layer's
// attention while this one's attention and routing compute.
std::vector<bool> LookAheadGroups(const std::vector<bool>& deferred);
// The loader's stream buffers: the largest group not pinned, x 2 with
// prefetch (one computing, one reading), x 1 without; 0 when all are pinned.
// Plus LookAheadBufferBytes (`deferred` empty: a dense model, none).
uint64_t StreamBufferBytes(const std::vector<uint64_t>& group_bytes,
                           const std::vector<bool>& pinned, bool prefetch,
                           const std::vector<bool>& deferred = {});
// The look-ahead buffers: with prefetch, two of the largest LookAheadGroups
// group not pinned; 0 without.
uint64_t LookAheadBufferBytes(const std::vector<uint64_t>& group_bytes,
                              const std::vector<bool>& pinned, bool prefetch,
                              const std::vector<bool>& deferred);

// Checkpoint bytes one pass streams from disk: every tensor's bytes (the
// embedding is priced whole though a pass gathers only the rows it needs)
// less `pinned_bytes`, the groups kept resident (ChoosePinnedGroups /
// PinnedBytes), which later passes do not read; never less than the
// embedding, which is not a group (a tied head pinned is the embedding's
// copy: the rows fed are still read).
uint64_t StreamedBytesPerPass(const checkpoint::Checkpoint& checkpoint, uint64_t pinned_bytes = 0);
// The same from the checkpoint's tensor bytes and its embedding's:
// max(total_bytes - pinned_bytes, embedding_bytes).
uint64_t StreamedBytesPerPass(uint64_t total_bytes, uint64_t pinned_bytes,
                              uint64_t embedding_bytes);

// StreamedGroupBytes with expert slices of at most `expert_slice_bytes`.
std::vector<uint64_t> StreamedGroupBytes(const checkpoint::Checkpoint& checkpoint,
                                         uint64_t expert_slice_bytes);

// The chance that `rows` tokens, each routed to `top_k` distinct experts of
// `experts` uniformly, route at least one of them into a given run of
// `slice_experts` experts: 1 - (C(E - m, k) / C(E, k))^B. One expert (m = 1)
// is ExpectedExpertsTouched / E. 1 when top_k is unknown (<= 0) or covers
// the slice's complement (E - m < k); 0 for no rows or an empty slice.
double SliceTouchedProbability(int64_t experts, int64_t top_k, int64_t slice_experts, int64_t rows);

// What a checkpoint's mixture of experts costs a pass, from its tensors
// (StreamedGroupBytes' split: checkpoint::ExpertIndex) and its config's
// top_k (checkpoint::ParseModelShape's MoeConfig::top_k). Filled for a dense
// checkpoint too (no sparse layer, every byte dense), so that one function
// prices either (ExpectedStreamedBytesPerPass).
struct MoeFacts {
  int64_t sparse_layers = 0;  // decoder layers holding expert tensors
  int64_t experts = 0;        // experts of a sparse layer (the most any holds)
  // Experts each token runs (config num_experts_per_tok), at most `experts`;
  // `experts` when the config does not say (every expert then counts as
  // read and run).
  int64_t top_k = 0;
  uint64_t slice_bytes = kDefaultExpertSliceBytes;  // what the slices were cut at
  uint64_t total_bytes = 0;                         // every tensor (Checkpoint::total_bytes)
  uint64_t embedding_bytes = 0;                     // Checkpoint::embedding.bytes
  uint64_t dense_bytes = 0;                         // every tensor but the experts'
  uint64_t expert_bytes = 0;                        // every expert of every sparse layer
  uint64_t largest_expert_bytes = 0;                // one expert's tensors, the largest expert
  uint64_t widest_slice_bytes = 0;                  // the largest expert slice
  uint64_t total_parameters = 0;  // elements of every tensor (logical, when quantized)
  // What one token runs: every parameter but the experts', plus top_k of
  // each sparse layer's experts (top_k x the layer's expert elements / its
  // experts).
  uint64_t active_parameters = 0;
  // StreamedGroupBytes(checkpoint, slice_bytes), and the experts each group
  // holds (0: a dense group, always read).
  std::vector<uint64_t> group_bytes;
  std::vector<int64_t> group_experts;

  bool is_moe() const { return sparse_layers > 0; }
};
MoeFacts MoeFactsOf(const checkpoint::Checkpoint& checkpoint,
                    uint64_t slice_bytes = kDefaultExpertSliceBytes);
// One flag per group of facts.group_bytes, set for the expert slices: the
// groups the engine's loader defers until a pass routes its rows
// (StreamBufferBytes' `deferred`).
std::vector<bool> DeferredGroups(const MoeFacts& facts);

// The bytes one pass of `rows` tokens is expected to stream: the engine reads
// a sparse layer's dense part always and, of an expert slice not pinned,
// only the experts a token routes to (the loader reads a slice's routed
// experts alone: LayerLoader::Decide), so this is StreamedBytesPerPass(total,
// the bytes of the groups `pinned` marks (one flag per MoeFacts::group_bytes;
// empty: none), embedding) less each unpinned slice's bytes x the chance no
// token touches one expert (1 - SliceTouchedProbability with m = 1): the
// dense bytes streamed + per sparse layer ExpectedExpertsTouched x one
// expert's bytes, whatever the slice size. Uniform routing, so an upper bound
// of the mean. A pass the engine chooses to read whole slices ahead
// (planner::ReadExpertsAhead) reads more; it does so only where that is
// priced cheaper. Exactly StreamedBytesPerPass for a dense model; at least 1
// row is priced.
uint64_t ExpectedStreamedBytesPerPass(const MoeFacts& facts, int64_t rows,
                                      const std::vector<bool>& pinned = {});
// The same for a checkpoint: MoeFactsOf(checkpoint) at kDefaultExpertSliceBytes.
uint64_t ExpectedStreamedBytesPerPass(const checkpoint::Checkpoint& checkpoint, int64_t rows,
                                      const std::vector<bool>& pinned = {});

// Seconds one pass takes at `read_bytes_per_second`: streamed_bytes /
// read_bytes_per_second; 0 when the bandwidth is unknown (<= 0).
//
// No efficiency factor: the bandwidth is measured on the same disk with the
// same parallel reads the loader uses (worker/daemon/read_bandwidth.h), and
// the engine's passes measure 1.01-1.15x this figure, so a factor would only
// move the estimate away from what runs. The worker's advert, the
// scheduler's fallback and the ETA's prior use this. The seed's 0.85 / 0.70
// (kStreamEfficiencyPrefetch / kStreamEfficiencySerial) stays in
// `nightshift plan`'s generation-time model only (planner/estimate.h,
// catalogue and --model-dir alike): it prices a nominal disk speed the user
// names, with or without prefetching, and its figures are the seed's spec.
double PassSeconds(uint64_t streamed_bytes, double read_bytes_per_second);

// FLOPs of one token through every decoder layer's projections: 2 x the
// elements of each layer's matrices (2-D F32/F16/BF16 tensors, and quantized
// modules at their logical [out, in]; norms and biases are not counted, nor
// attention's scores, which grow with the context and are a few percent of
// a pass at these sizes). In a layer holding experts only the active ones
// count: its other matrices (attention, the router, a shared expert and its
// gate) and top_k / experts of its experts' (each token runs top_k of them;
// top_k from the config as MoeFacts reads it).
double LayerFlopsPerToken(const checkpoint::Checkpoint& checkpoint);
// FLOPs of one row through the LM head: 2 x its elements (the embedding's
// when tied).
double HeadFlopsPerRow(const checkpoint::Checkpoint& checkpoint);
// The projection FLOPs of a pass that feeds `tokens` and runs the LM head
// at `logit_rows`: tokens x layer + logit_rows x head.
double PassFlops(double layer_flops_per_token, double head_flops_per_row, int64_t tokens,
                 int64_t logit_rows);
double PassFlops(const checkpoint::Checkpoint& checkpoint, int64_t tokens, int64_t logit_rows);

// Seconds of a pass that streams `streamed_bytes` at `read_bytes_per_second`
// and multiplies `pass_flops` at `flops_per_second` (the engine's measured
// rate of the kernel it runs at the pass's rows, worker/engine/
// compute_choice.h): max(PassSeconds(streamed_bytes, read_bytes_per_second),
// pass_flops / flops_per_second). Reads and compute overlap (the loader
// prefetches the next layer while this one computes), so the slower of the
// two sets the pass: a compute-bound pass is priced as one. An unknown
// rate (<= 0) prices the read alone; an unknown bandwidth, the compute alone
// (0 when both are unknown).
double PassSecondsWithCompute(uint64_t streamed_bytes, double read_bytes_per_second,
                              double pass_flops, double flops_per_second);

}  // namespace nightshift::planner
