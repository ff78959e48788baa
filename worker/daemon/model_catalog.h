// The models a worker serves: every checkpoint directory directly under its
// model roots, validated with the metadata reader and the architecture table,
// priced with the planner's exact figures and the measured read bandwidth,
// and placed (resident or streamed) by the streaming policy. What is not
// valid or does not fit is skipped with a reason for the log.
//
// A worker opens only checkpoints under its roots: a model name must be a
// plain directory name (no `/`, not `.` or `..`, not absolute), and the
// directory and every file the worker reads from it (safetensors, config,
// tokenizer files) must resolve, symlinks followed, to a path inside the
// root (ResolveModelDir, CheckInsideRoot).
//
// Thread-safety: free functions; a Catalog is immutable after ScanModelRoots
// and may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/exact.h"
#include "planner/model_facts.h"
#include "planner/policy.h"
#include "proto/types.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift::worker {

// The directory of model `name` under `root`, canonical (symlinks resolved).
// InvalidArgument for a name that is empty, absolute, `.`/`..` or contains
// `/` or a NUL byte, and when the directory resolves outside the root (a
// symlink escaping it); NotFound when it does not exist or is not a
// directory.
StatusOr<std::string> ResolveModelDir(const std::string& root, const std::string& name);

// OK when `path` exists and resolves (symlinks followed) to `root` or a path
// inside it; InvalidArgument naming both otherwise; NotFound when missing.
Status CheckInsideRoot(const std::string& root, const std::string& path);

struct ModelEntry;

// Checks again, when the worker opens `model`, what the scan checked of its
// paths: the name still resolves to the advertised directory inside the root,
// and config.json, generation_config.json and every weights file still
// resolve inside the root (nothing outside is read). InvalidArgument naming
// the path that escapes or moved; the metadata reader's errors when the
// checkpoint changed.
Status RecheckModelPaths(const ModelEntry& model);

struct CatalogOptions {
  std::vector<std::string> roots;
  // Parallel cold-read bandwidth of each root (same order as `roots`),
  // bytes per second; prices seconds per pass.
  std::vector<double> read_bytes_per_second;
  // Each root's one-stream figure of the same kind (ReadBandwidth::
  // one_read_bytes_per_second), same order; empty, or 0 for a root: the
  // figure above. It prices a checkpoint whose every streamed group fits in
  // one read (kDefaultReadChunkBytes): the loader reads one group at a time,
  // so such a checkpoint streams one read at a time whatever the streams.
  std::vector<double> one_read_bytes_per_second;
  uint64_t memory_budget_bytes = 0;
  // KV cache budget; 0 = what the memory budget leaves after the largest
  // footprint of the models advertised. Given (--kv-budget), a streamed
  // model pins what the memory budget leaves after its working set and this
  // (planner/model_facts.h, the figures the engine uses), unless streaming
  // is `always`. Without it the derived budget is a ceiling: the scheduler
  // leases up to it, and the engine keeps KV for the jobs in flight and pins
  // what that leaves, pass by pass (ModelEntry::adaptive_split). With an
  // unbounded queue, jobs per second (jobs per pass / seconds per pass) grows
  // with the KV share, so a full batch takes the ceiling; a short queue's
  // few jobs leave the rest to pins (planner::PlanPinSplit's choice either way).
  uint64_t kv_budget_bytes = 0;
  // Tokens one pass may feed; 0 = planner::DefaultPassTokenBudget of each model.
  int64_t pass_token_budget = 0;
  // Bytes of one KV element in the engine's cache (--kv-dtype: 4 or 2); 0
  // (auto): per model, planner::DefaultKvDtypeBytes on `device` (the
  // engine's ResolveKvDType).
  int kv_dtype_bytes = 0;
  planner::StreamingRequest streaming = planner::StreamingRequest::kAuto;
  planner::Device device = planner::Device::kCpu;
  // On a GPU, the host tier (EngineOptions::host_memory_budget_bytes): a
  // streamed model keeps what the device does not, within this, in host
  // memory, which a pass then does not read (planner::ChooseHostTierGroups).
  uint64_t host_memory_budget_bytes = 0;
};

// One advertised model.
struct ModelEntry {
  std::string root;              // canonical root it was found under
  std::string dir;               // canonical checkpoint directory
  bool resident = false;         // keep every layer after its first load (else stream)
  uint64_t footprint_bytes = 0;  // memory outside the KV cache in that mode
  // Partial residency: the engine's EngineOptions::memory_budget_bytes (0:
  // every group streamed) and the bytes it will pin with it, which a pass
  // then does not read (offer.checkpoint_bytes and seconds_per_pass count
  // only the streamed rest).
  uint64_t memory_budget_bytes = 0;
  uint64_t pinned_bytes = 0;
  // No --kv-budget: the KV budget is a ceiling and the engine's split
  // between KV and pinned groups follows the jobs in flight
  // (EngineOptions::adaptive_split); pinned_bytes is then 0, the split of a
  // full batch.
  bool adaptive_split = false;
  // The host tier on a GPU (EngineOptions::host_memory_budget_bytes, 0: none)
  // and the bytes it keeps, which a pass does not read either.
  uint64_t host_memory_budget_bytes = 0;
  uint64_t host_pinned_bytes = 0;
  // What prices the bytes a pass reads (AdvertPassBytes): the checkpoint's
  // facts (planner::MoeFactsOf) and the groups a pass does not read, pinned
  // or in the host tier (one flag per moe.group_bytes).
  planner::MoeFacts moe;
  std::vector<bool> unread_groups;
  api::ModelOffer offer;  // name, exact figures, tokenizer hash
  // What prices a pass's compute (PriceCompute): the root's read bandwidth,
  // the checkpoint's FLOPs (planner::LayerFlopsPerToken, HeadFlopsPerRow),
  // and once priced, the tokens the advert's pass feeds and the measured
  // rate at them (0: not measured; seconds_per_pass is then the read alone).
  double read_bytes_per_second = 0;
  double layer_flops_per_token = 0;
  double head_flops_per_row = 0;
  int64_t advert_pass_tokens = 0;
  double compute_flops_per_second = 0;
  api::TokenizerFiles tokenizer_files;  // empty when the model has no tokenizer.json
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null when none
};

struct SkippedModel {
  std::string name;
  std::string root;
  std::string reason;
};

struct Catalog {
  std::vector<ModelEntry> models;  // by root, then by name
  std::vector<SkippedModel> skipped;
  uint64_t kv_budget_bytes = 0;  // the options' or the derived one
  // The entry advertised as `name`, or nullptr. The first root wins when two
  // roots hold the same name (the second is skipped as a duplicate).
  const ModelEntry* Find(const std::string& name) const;
};

// Scans every root (its immediate subdirectories, hidden ones ignored).
// InvalidArgument when there is no root or the bandwidth list does not match
// the roots; NotFound when a root is not a directory. Problems with single
// checkpoints never fail the scan: they become SkippedModel entries.
StatusOr<Catalog> ScanModelRoots(const CatalogOptions& options);

// The read bandwidth a checkpoint streams at, from its streamed groups'
// bytes (planner::StreamedGroupBytes) and its root's figures: the loader
// reads one group at a time (worker/engine/layer_loader.h), so a checkpoint
// whose every group fits in one read (kDefaultReadChunkBytes) streams at
// `one_read_bytes_per_second` whatever the root's reads in flight; any other
// at `read_bytes_per_second`, as does every checkpoint when the one-read
// figure is unknown (<= 0).
double StreamReadBandwidth(const std::vector<uint64_t>& group_bytes, double read_bytes_per_second,
                           double one_read_bytes_per_second);

// The tokens the advert prices one pass at: a decode pass of as many
// sequences as `kv_budget_bytes` holds at the model's full context
// (offer.kv_bytes_per_token x offer.max_context_tokens each), at least 1 and
// at most the pass-token budget. (The scheduler's measured pass times take
// over once the model's batches run.)
int64_t AdvertPassTokens(const ModelEntry& entry, uint64_t kv_budget_bytes);

// The bytes the advert prices a pass of `rows` rows at:
// planner::ExpectedStreamedBytesPerPass of entry.moe with entry.unread_groups
// left out, which for a dense checkpoint is StreamedBytesPerPass less its
// pinned and host-tier bytes whatever the rows, and for a mixture of experts
// reads only the expert slices its rows are expected to touch.
uint64_t AdvertPassBytes(const ModelEntry& entry, int64_t rows);

// Prices entry's offer.seconds_per_pass with compute as well as the read:
// planner::PassSecondsWithCompute(offer.checkpoint_bytes,
// read_bytes_per_second, planner::PassFlops of AdvertPassTokens tokens, each
// also an LM-head row, `flops_per_second`), where `flops_per_second` is the
// engine's measured rate at those rows (engine::ComputeChoice::
// FlopsPerSecond); <= 0 leaves the read alone. A mixture of experts'
// offer.checkpoint_bytes is first set to AdvertPassBytes at those tokens.
// Records the tokens and the rate.
void PriceCompute(ModelEntry* entry, uint64_t kv_budget_bytes, double flops_per_second);

// The tokenizer files a scheduler needs from a checkpoint directory
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// chat_template.jinja, chat_template.json, whichever exist), each checked
// with CheckInsideRoot. Empty when there is no tokenizer.json.
StatusOr<api::TokenizerFiles> ReadTokenizerFiles(const std::string& root, const std::string& dir);

}  // namespace nightshift::worker
