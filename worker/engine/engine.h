// The engine: runs sequences through a checkpoint streamed one layer at a
// time.
//
// A pass (Step) walks every layer once: the embedding gathers the rows of the
// tokens in flight from the mapped file; each layer is read by I/O threads
// into one of two reused buffers (the next layer while this one computes, see
// layer_loader.h), every sequence runs through it, and its buffer is reused;
// the LM head, read in row slices no larger than a layer, runs only at the
// rows whose next token is needed. Resident memory is two layers plus
// activations and KV cache, whatever the checkpoint's size: each layer runs
// the pass's rows in micro-batches bounded by the activation budget, so what
// grows with the tokens in a pass is only their hidden states and KV cache. New sequences' prompts
// ride the same pass as the others' decode steps (continuous batching at pass boundaries), so a
// pass costs about one read of the checkpoint whatever rides in it.
//
// A classification sequence (one with labels) scores every label in its one
// pass: the prompt and all labels' tokens ride as one tree, each label
// attending to the prompt and its own earlier tokens only, and the LM head
// runs only at the rows that predict label tokens. The sequences in their
// first pass that begin alike share one such tree (pass_trie.h): a prefix
// they share is computed once (EngineOptions::share_prefixes).
//
//   NS_ASSIGN_OR_RETURN(auto engine, Engine::Open(dir));
//   NS_ASSIGN_OR_RETURN(SequenceId id, engine->Add(request));
//   while (engine->active() > 0) {
//     NS_ASSIGN_OR_RETURN(PassStats stats, engine->Step());
//     for (SequenceResult& r : engine->TakeFinished()) ...
//   }
//
// On a CUDA device (the accelerator path) each group the loader reads into
// page-locked host memory is copied to one of two device buffers on a side
// stream while the GPU computes the previous group, and the layer runs
// through ATen's kernels: projections in the weights' dtype (BF16 or F16,
// accumulating in float32), activations, norms, attention, the KV cache and
// the logits in float32.
//
// This header is libtorch-free, so callers (the CLI, the worker) compile
// without ATen. The CPU computes in float32, or runs its projections in BF16
// where that measured faster (EngineOptions::compute_dtype,
// compute_choice.h). An Engine is not thread-safe: one thread drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/engine/compute_choice.h"
#include "worker/engine/model_config.h"
#include "worker/engine/sampler.h"

namespace nightshift::engine {

using TokenId = int32_t;
using SequenceId = int64_t;

struct SequenceRequest {
  std::vector<TokenId> prompt;  // at least one token, each < vocab_size
  int64_t max_new_tokens = 16;  // >= 0; 0 runs the prompt only (for last_logits)
  SamplingParams sampling;      // greedy by default
  // Generation stops after any of these tokens (which is kept in the output),
  // as it does after the model's EOS ids unless `ignore_eos`.
  std::vector<TokenId> stop_ids;
  bool ignore_eos = false;
  // Return the full-vocabulary logits at the last prompt position.
  bool return_last_logits = false;
  // Return the log-probability of each generated token (log-softmax of the
  // model's logits, before temperature) and of the `top_logprobs` most likely
  // tokens at that step (0..20).
  bool logprobs = false;
  int top_logprobs = 0;
  // Classification: when non-empty, the sequence scores each label as a
  // continuation of the prompt in one pass and generates nothing
  // (max_new_tokens, sampling and stop ids are not used). Each label is at
  // least one token, each < vocab_size, tokenised as the continuation of the
  // prompt (e.g. with its leading space); prompt + the longest label must fit
  // the context. The cache holds prompt + every label's tokens.
  std::vector<std::vector<TokenId>> labels;
};

enum class FinishReason {
  kLength,  // max_new_tokens generated, the context is full, or labels scored
  kStop,    // an EOS or stop id was generated
};
// "length" or "stop".
const char* FinishReasonName(FinishReason reason);

// One label's score given the prompt.
struct LabelScore {
  std::vector<TokenId> ids;            // the tokens scored, as requested
  std::vector<double> token_logprobs;  // log P(ids[k] | prompt, ids[0..k)), full vocabulary
  double logprob = 0;                  // log P(ids | prompt): the sum of token_logprobs
  double probability = 0;              // exp(logprob) renormalised over the request's labels
};

// One generated token's log-probability and the step's most likely tokens.
struct TokenLogprob {
  TokenId token = 0;
  double logprob = 0;
  std::vector<std::pair<TokenId, double>> top;  // most likely first; top_logprobs entries
};

struct SequenceResult {
  SequenceId id = 0;
  std::vector<TokenId> prompt;
  std::vector<TokenId> generated;
  FinishReason finish_reason = FinishReason::kLength;
  std::vector<float> last_logits;      // only when requested
  std::vector<LabelScore> labels;      // a classification sequence's, in request order
  int64_t best_label = -1;             // index of the most likely label (first on ties); -1: none
  std::vector<TokenLogprob> logprobs;  // one per generated token, when requested
  // Of its prompt, the tokens not computed for it alone: computed once with
  // other sequences of its first pass that begin alike, or kept from an
  // earlier pass (OpenAI's usage.prompt_tokens_details.cached_tokens).
  int64_t shared_prompt_tokens = 0;
};

// The KV cache's dtype. BF16 and F16 halve its bytes (twice the sequences in
// a KV budget); attention still runs in float32 on what it reads back.
// kAuto, the default: float32 on the CPU path, the projections' 16-bit dtype
// on the accelerator path (planner::DefaultKvDtypeBytes; ResolveKvDType).
enum class KvDType { kAuto, kFloat32, kBFloat16, kFloat16 };
// "auto", "f32", "bf16" or "f16".
const char* KvDTypeName(KvDType dtype);
// 4 or 2 (0 for kAuto, which Open resolves first).
int KvDTypeBytes(KvDType dtype);
// "auto", "f32" / "float32", "bf16" / "bfloat16" or "f16" / "float16";
// InvalidArgument otherwise.
StatusOr<KvDType> ParseKvDType(const std::string& name);
// What `requested` means for an engine whose projection weights are stored
// as `projection_dtype`: itself unless kAuto.
KvDType ResolveKvDType(KvDType requested, bool accelerator_path,
                       checkpoint::DType projection_dtype);
struct ModelTensors;  // architecture.h
// The stored dtype of the first decoder layer's first projection weight (F16
// for a quantized one: its dequantised dtype on the accelerator path).
checkpoint::DType ProjectionDType(const ModelTensors& tensors);

// How the engine holds the checkpoint's layers.
enum class Residency {
  kStream,    // every pass reads each layer and releases its memory after use
  kResident,  // each layer stays in memory after its first load (the checkpoint must fit);
              // later passes read only the embedding rows of the tokens fed
};
// "streaming" or "resident".
const char* ResidencyName(Residency residency);

enum class ExpertReads { kAuto, kRouted, kAll };

// What one pass did, for progress reports, metrics and the ETA.
struct PassStats {
  int64_t index = 0;   // 0 for the engine's first pass
  double seconds = 0;  // wall time of the pass
  // Checkpoint bytes the pass read from the files: every tensor but the
  // embedding (each layer, the final norm and LM head) plus the embedding
  // rows of the tokens fed; resident, after the first pass, only those rows.
  uint64_t bytes_read = 0;
  // Of `seconds`, the compute thread waiting for weights (on a device, also
  // for their copy to it).
  double io_seconds = 0;
  // Summed over the layers read: from a layer's first read starting to its
  // last finishing. Reads overlap compute (and each other) when prefetching,
  // so this can exceed io_seconds and even `seconds`.
  double load_seconds = 0;
  // On a device, whose kernels run asynchronously: seconds - io_seconds.
  double compute_seconds = 0;
  int64_t sequences = 0;  // sequences in the pass
  // Tokens the pass computed: one per decoding sequence, and the rows of the
  // tries of the sequences in their first pass (pass_trie.h: a prefix that
  // several sequences share, or two labels begin with, is computed once).
  int64_t tokens = 0;
  // Tokens the sequences fed (prompts and labels + one per decoding
  // sequence): what the pass computes without sharing.
  int64_t fed_tokens = 0;
  // Of `tokens`, those computed once for two or more sequences.
  int64_t shared_tokens = 0;
  // Of `fed_tokens`, prompt tokens not computed at all: a prefix an earlier
  // pass kept (its keys and values) for the sequences starting after it.
  int64_t kept_prefix_tokens = 0;
  int64_t logit_rows = 0;  // rows the LM head ran on
  uint64_t kv_bytes = 0;   // KV cache reserved by the sequences in flight
  // Rows each layer ran at once (Engine::micro_batch_rows).
  int64_t micro_batch_rows = 0;
  // Bytes of the groups kept in memory across passes, as stored (the pinned
  // groups of EngineOptions::memory_budget_bytes; every group when
  // resident). Passes after the first read only the rest: bytes_read is then
  // about StreamedBytesPerPass(checkpoint, pinned_bytes) less the embedding
  // rows not fed.
  uint64_t pinned_bytes = 0;
  // On the accelerator path, bytes of the groups the host tier keeps
  // (EngineOptions::host_memory_budget_bytes): copied to the device every
  // pass, read from disk only by the first, so later passes' bytes_read
  // leave them out too.
  uint64_t host_pinned_bytes = 0;
  Residency residency = Residency::kStream;
  // What the pass's projections ran: "f32", "bf16" or "mixed" (some row
  // counts in each; see Engine::compute), and the kernels by name
  // (ProjectionKernelName, '+'-joined: its micro-batches' and the LM head's,
  // then each quantized format's kernel with the instruction set it ran on,
  // e.g. "awq-avx512", which computes in float32);
  // "accelerator" on the accelerator path, which multiplies in the weights'
  // dtype (MatmulDtype).
  std::string compute_dtype = "f32";
  std::string projection_kernels;
  // FLOPs of the pass's projections: every layer's at the tokens fed, the
  // LM head's at logit_rows (planner::PassFlops).
  double projection_flops = 0;
  // Mixtures of experts, summed over the sparse layers: the experts there
  // are, those the pass's rows routed to, and those whose bytes the pass
  // read from the files (routed ones not kept in memory, every expert of a
  // slice read whole ahead of the routing, and those read ahead on a guess
  // at it: LayerLoader::Guess). Of experts_read, those no row routed to. 0
  // for a dense model.
  int64_t experts_total = 0;
  int64_t experts_routed = 0;
  int64_t experts_read = 0;
  int64_t experts_read_unrouted = 0;
  // Of experts_total, those in slices kept in memory across passes (pinned
  // under a memory budget, or every one when resident): never read again.
  int64_t experts_pinned = 0;
  // Per decoder layer, the experts its rows routed to, ascending, and those
  // read that no row routed to (experts_read_unrouted), ascending per slice
  // (empty for a dense layer).
  std::vector<std::vector<int64_t>> routed_experts;
  std::vector<std::vector<int64_t>> unrouted_experts_read;
};

struct EngineOptions {
  // The longest sequence (prompt + generated tokens) the engine runs. 0: the
  // model's max_position_embeddings, or its sliding window when that is
  // shorter. An explicit value above max_position_embeddings is refused, and
  // so is one longer than a sliding window (windowed attention is not
  // implemented; below the window it equals full attention).
  int64_t max_context = 0;
  // Compute threads; 0: one per core. Open sets the process-wide count (see
  // SetComputeThreads in kernels.h: ATen and OpenBLAS then run one thread and
  // the engine splits its projections itself).
  int threads = 0;
  Residency residency = Residency::kStream;
  // Read the next layer (after the last one, the next pass's first) on the
  // I/O threads while this one computes. false: each layer is read when it
  // is needed, the compute thread waiting for it (and one layer's buffer
  // instead of two).
  bool prefetch = true;
  // Parallel reads (I/O threads, up to 128 MB each) in flight while loading;
  // 0: the engine's default, 4. At most 64.
  int read_streams = 0;
  // Read with O_DIRECT where the filesystem allows it (else, and when false,
  // through the page cache, which is dropped after each read): no copy out
  // of the cache, whose CPU time a compute-bound pass shares. The worker
  // reads the way its disk measured fastest (worker/daemon/read_bandwidth.h).
  bool direct_reads = false;
  // KV cache bytes the sequences in flight may reserve together; 0: no limit
  // (with a memory budget: what the sequences in flight at the first pass
  // reserve, see memory_budget_bytes). A sequence that ends in its first
  // pass (planner::EndsInFirstPass: labels, or at most one new token)
  // reserves none: it holds each layer's keys and values only while that
  // layer runs.
  uint64_t kv_budget_bytes = 0;
  // Tokens one pass may feed (prompts and labels of new sequences, one per
  // decoding sequence); 0: no limit. Their hidden states stay resident for
  // the whole pass (planner::PassTokenBytes each). A sequence that does not
  // fit is refused (Add), unless the next pass would feed nothing else.
  int64_t pass_token_budget = 0;
  // The KV cache's dtype (KvBytesFor and the worker's advert follow it).
  KvDType kv_dtype = KvDType::kAuto;
  // Partial residency. The pass plan's memory: stream buffers, pinned groups,
  // activations and KV (not code and runtime: the planner's fixed runtime
  // allowance). With kStream and a budget, the first pass fixes the plan:
  // what the budget leaves after the working set (planner::PinBudgetBytes:
  // the stream buffers, planner::StreamBufferBytes of every group; the
  // activations; the KV budget) pins groups (planner::ChoosePinnedGroups
  // with `pin_placement`), kept as stored (BF16/F16, never widened) after
  // their first read, and later passes stream only the rest. Activations
  // are planner::ActivationWorkingSetBytes when kv_budget_bytes is set (a worker: any
  // batch may join later); without it (`nightshift run`: every sequence is
  // in the first pass) the KV budget becomes what the sequences in flight
  // then reserve (Add refuses more later) and the activations what that
  // first pass needs (FirstPassActivationBytes). Step fails with
  // ResourceExhausted when the working set alone exceeds the budget. On the
  // accelerator path the budget is the device's: pinned groups stay in
  // device memory. 0: no budget; every group is streamed.
  uint64_t memory_budget_bytes = 0;
  // The accelerator path's second tier: host memory (page-locked on a CUDA
  // device) for the groups the device does not keep. Beyond the loader's
  // stream buffers (planner::StreamBufferBytes of the groups not on the
  // device), the first pass picks groups that fit (ChoosePinnedGroups with
  // `pin_placement`) and the loader keeps them as stored after their first
  // read: later passes copy them to the device without reading the disk.
  // GPU memory first (memory_budget_bytes), then this, then disk. 0: none.
  // Refused on the CPU path, whose pinned groups are host memory already
  // (memory_budget_bytes); ignored when resident.
  uint64_t host_memory_budget_bytes = 0;
  planner::PinPlacement pin_placement = planner::PinPlacement::kSpread;
  // With memory_budget_bytes and kv_budget_bytes (a worker without
  // --kv-budget): the KV budget is a ceiling, and the split of the memory
  // budget between the KV cache and pinned groups follows the sequences in
  // flight instead of being fixed by the first pass. Each pass pins what the
  // budget leaves after the working set and the KV those sequences reserve
  // (a group newly pinned is kept from its next read, which the pass makes
  // anyway); a sequence added beyond that first unpins the groups its KV
  // needs (their memory is freed before its cache grows; they are streamed
  // again from the next pass). Jobs per pass are then the sequences the
  // scheduler gave (it sizes batches against the ceiling) and each pass
  // streams the least the memory allows for them: the split that maximises
  // jobs per second for the work there is (planner::PlanPinSplit's choice).
  // A working set and KV above the budget pin nothing (every group
  // streamed) instead of failing the pass: the ceiling is the caller's.
  bool adaptive_split = false;
  // Bytes of float32 temporaries one micro-batch of a layer may use. Each
  // layer runs the pass's rows in micro-batches of R rows through the same
  // loaded weights, R = min(256, budget / the temporaries of one row, from
  // hidden, q/kv widths and intermediate size), at least 1; attention's score
  // blocks are then also kept under min(64 MiB, budget). 0: R = 256 and
  // 64 MiB score blocks. Peak memory grows with the pass's tokens only
  // through their hidden states (4 x hidden bytes each) and the KV cache.
  uint64_t activation_budget_bytes = 0;
  // "cpu", or "cuda" / "cuda:N" when the linked libtorch has CUDA and sees
  // that GPU. Resident on a GPU keeps every layer in GPU memory.
  std::string device = "cpu";
  // For tests: run the CPU through the accelerator path a CUDA device takes
  // (each group copied into device-side buffers, ATen's generic kernels, BF16
  // projections in BF16; F16 ones in float32, since libtorch's CPU kernels
  // have no F16 matmul), so that path is checked without a GPU.
  bool accelerator_path_on_cpu = false;
  // What the CPU path's projections compute in (compute_choice.h): kAuto
  // times the kernels on this model's projection shapes at Open (once per
  // CPU, thread count and shapes: cached in compute_state_dir, and in the
  // process) and runs the fastest per row bucket. kBFloat16 runs every
  // projection of BF16 and F16 weights in BF16; kFloat32 never does. F32
  // weights stay float32 under all three, as on the accelerator path (see
  // ChoosePlan). Ignored on the accelerator path.
  ComputeDType compute_dtype = ComputeDType::kFloat32;
  // Batch invariance (ChoosePlan): the projections run one kernel at every
  // row count, one whose sums over the inputs are in the same order
  // whatever else rides the pass (quantized weights always do), so a
  // sequence's logits and tokens are bitwise the same alone or in any
  // batch, any micro-batch split, any compute threads. false: the fastest
  // measured kernel per row count (f32-small, OpenBLAS, oneDNN), whose
  // numerics then move with the pass's rows. Ignored on the accelerator
  // path.
  bool batch_invariant = true;
  // Sequences in their first pass that begin with the same token share one
  // trie (pass_trie.h): each distinct prefix of their prompts and labels is
  // computed once, and each sequence gets bitwise what it gets alone under
  // batch_invariant (within the usual tolerance otherwise). Of each set of
  // two or more such sequences that agree on their first 32 prompt tokens,
  // the prompt prefix all of them share is also kept for the next passes
  // where the KV budget has room for it (with adaptive_split: where the
  // compute it saves outweighs streaming its bytes more,
  // planner::KeepPrefixFromPins), so that sequences joining later with the
  // same instruction start after it; it is dropped after two passes that
  // neither use it nor have a decoding sequence hold it, or when a joining
  // sequence needs the room. false: every sequence computes its whole feed
  // (for comparisons).
  bool share_prefixes = true;
  // Mixtures of experts: the most bytes of experts streamed as one group (a
  // slice of whole experts; planner::ExpertSlices). 0:
  // planner::kDefaultExpertSliceBytes.
  uint64_t expert_slice_bytes = 0;
  // Which experts a pass reads: kAuto decides per pass between reading a
  // sparse layer's slices ahead of its routing (as a dense layer's weights)
  // and reading only the routed experts once routed (planner::
  // ReadExpertsAhead); kRouted always waits for the routing, kAll always
  // reads every expert (for comparisons).
  ExpertReads expert_reads = ExpertReads::kAuto;
  // Where kAuto's measurement is cached (compute-<hash>.json); "" keeps it
  // in this process only.
  std::string compute_state_dir;
  // Called at the end of every pass, on the thread calling Step, with the
  // figures Step returns (before it returns).
  std::function<void(const PassStats&)> on_pass;
};

// Micro-batch rows when the activation budget does not force fewer.
inline constexpr int64_t kMaxMicroBatchRows = 256;

// An upper bound on the float32 temporaries one row of a pass needs while a
// layer runs it: 4 bytes x (8 x hidden for normed copies, residual sums and
// projections back to hidden; 6 x q and 6 x kv width for q/k/v, their
// rotated copies and the attention output; 3 x intermediate for the MLP).
// Attention scores are bounded separately (EngineOptions::activation_budget_bytes).
uint64_t ActivationBytesPerRow(const ModelConfig& config);

// The micro-batch rows an activation budget of `budget_bytes` allows:
// min(kMaxMicroBatchRows, budget / ActivationBytesPerRow), at least 1.
// 0 (no budget given): kMaxMicroBatchRows.
int64_t MicroBatchRows(const ModelConfig& config, uint64_t budget_bytes);

// The compute choice Engine::Open makes for the checkpoint in `dir` under
// `options` (compute_dtype, compute_state_dir, threads, which it sets
// process-wide as Open does), except that the projection kernels are
// always measured (cached as Open's measurement), so that their measured
// rate prices a pass whatever runs: the worker's advert of seconds per pass.
// Errors: Open's for the checkpoint, MeasureProjections' (compute_measure.h).
StatusOr<ComputeChoice> MeasureCompute(const std::string& dir, const EngineOptions& options);

// Whether the linked libtorch was built with CUDA and sees a GPU.
bool CudaAvailable();

// OK when Open accepts `device` on this machine; otherwise the error Open
// would return for it (see Open).
Status CheckDevice(const std::string& device);

class Engine {
 public:
  // Reads and validates the checkpoint in `dir` (see ReadCheckpoint), finds
  // its architecture, checks every tensor against it and maps the files.
  // Errors: the metadata reader's; Unimplemented for an unsupported
  // model_type, rope type, dtype or a context longer than the sliding window;
  // DataLoss for a missing config field, bad config values (zero heads,
  // heads not divisible by KV heads), missing, unexpected or misshapen
  // tensors; InvalidArgument for a bad option (negative max_context or
  // threads, read_streams outside 0..64, a device other than cpu, cuda or
  // cuda:N, a GPU index the machine does not have); Unimplemented for a CUDA
  // device when the linked libtorch has no CUDA or sees no GPU.
  static StatusOr<std::unique_ptr<Engine>> Open(const std::string& dir,
                                                const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a sequence for the next pass. InvalidArgument for an empty prompt,
  // a prompt longer than the context (never truncated), a token id outside the
  // vocabulary, a negative max_new_tokens or bad sampling parameters; for a
  // classification sequence, an empty label, a label token outside the
  // vocabulary, or prompt + a label longer than the context.
  // ResourceExhausted when its KV bytes (KvBytesFor, less the prompt
  // positions it will share with a going-on sequence waiting for its first
  // pass: kv_bytes_in_use) do not fit the KV budget left by the sequences in
  // flight (kept prefixes give way first), or the
  // tokens it adds to the next pass (its trie rows that no sequence waiting
  // for its first pass holds already) do not fit the pass-token budget left
  // by the next pass's other tokens (next_pass_tokens), unless there are
  // none.
  StatusOr<SequenceId> Add(SequenceRequest request);

  // The KV cache bytes `request` reserves while in flight, alone:
  // planner::KvPositions of its prompt, max_new_tokens and labels (a
  // generation's clamped to the context) x planner::KvBytesPerToken of the
  // config in float32 (planner/model_facts.h; the worker's advert and the
  // scheduler's sizing use the same two functions); 0 for a sequence that
  // ends in its first pass (planner::ReservedKvPositions). Does not validate it.
  uint64_t KvBytesFor(const SequenceRequest& request) const;
  // Tokens `request` feeds in its first pass: prompt and labels.
  static int64_t FirstPassTokens(const SequenceRequest& request);
  // Tokens the next pass computes for the sequences in flight: the trie rows
  // of the prompts (and labels) of those not yet run, a prefix they share
  // once and none of one an earlier pass kept, and one per decoding
  // sequence.
  int64_t next_pass_tokens() const;
  // The prompt prefixes kept for the next pass (EngineOptions::
  // share_prefixes): a joining sequence whose prompt agrees with one on
  // planner::kMinKeptPrefixTokens or more (short of its whole prompt)
  // computes only the rest.
  std::vector<std::vector<TokenId>> kept_prefixes() const;
  // KV bytes reserved by the sequences in flight. Going-on sequences whose
  // prompts met in one first pass hold the positions two or more of them
  // share once, in a cache they share (released with the last of them), and
  // those that started after a kept prefix hold it in its cache; so this is
  // each one's own positions plus each cache they share once; for those
  // still to run their first pass, what that pass will leave (a kept
  // prefix they will hold is counted as kept until then).
  uint64_t kv_bytes_in_use() const;

  // The tokens sequence `id` generated so far. NotFound when it is not in
  // flight.
  StatusOr<std::vector<TokenId>> Generated(SequenceId id) const;
  // Ends sequence `id` now with `reason` (e.g. when the caller matched a stop
  // string); its result comes with the next TakeFinished. NotFound when it is
  // not in flight.
  Status Finish(SequenceId id, FinishReason reason);
  // Drops sequence `id` without a result, freeing its KV budget. NotFound
  // when it is not in flight.
  Status Cancel(SequenceId id);

  // Runs one pass over all layers for every sequence in flight and returns
  // its figures. FailedPrecondition when nothing is in flight. Any other
  // failure (e.g. out of memory) leaves the engine unusable: this and every
  // later call return that error.
  StatusOr<PassStats> Step();

  // Sequences that finished since the last call, in the order they were added.
  std::vector<SequenceResult> TakeFinished();

  // Sequences added and not yet finished.
  int64_t active() const;
  const ModelConfig& config() const;
  int64_t max_context() const;
  // The rows each layer runs at once (see EngineOptions::activation_budget_bytes).
  int64_t micro_batch_rows() const;
  // The KV cache's dtype, EngineOptions::kv_dtype resolved (never kAuto).
  KvDType kv_dtype() const;
  // Bytes of the groups kept in memory across passes (PassStats::pinned_bytes);
  // 0 before the first pass fixes the plan.
  uint64_t pinned_bytes() const;
  // Bytes of the groups the host tier keeps (PassStats::host_pinned_bytes).
  uint64_t host_pinned_bytes() const;
  // generation_config.json's eos_token_id when present, else config.json's.
  const std::vector<int64_t>& eos_token_ids() const;
  // The projection kernels chosen at Open, with the measurement behind them
  // (kAuto on 16-bit weights only).
  const ComputeChoice& compute() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nightshift::engine
