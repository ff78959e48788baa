// A plan: everything known about streaming one model on one machine, and the
// choices built on plans (rank, pick, the resident-versus-streamed compare).
//
// A plan is computed from a Sizing (what the model costs in bytes), which
// comes either from the catalog estimate (HeuristicSizing, planner/estimate.h)
// or from a real checkpoint's shapes (ExactSizing, planner/exact.h), so both
// forms share one verdict logic. Every function is pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/estimate.h"

namespace nightshift::planner {

// What a model costs, independent of the machine. Unknown sizes are
// +infinity (never zero).
struct Sizing {
  double checkpoint_gb = 0;   // bytes one pass reads
  double resident_gb = 0;     // streamed footprint: resident layers + activations + KV x batch
  double activation_gb = 0;   // the activation term inside resident_gb
  double kv_cache_gb = 0;     // KV cache of one sequence at the planned context
  DiskRequired disk;          // disk the checkpoint needs
  std::optional<int> layers;  // decoder depth, unknown when absent
  bool layers_estimated = false;
  // What one pass is expected to read when that is less than the checkpoint
  // (a mixture of experts: a decode pass of the batch reads only the experts
  // its rows route to); unset: checkpoint_gb. Seconds per pass read this.
  std::optional<double> pass_read_gb;
};

// The catalog estimate: CheckpointGb, FootprintGb, KvCacheGb,
// DiskRequiredGb and CountLayers of `spec`; activation_gb = kActivationGb.
Sizing HeuristicSizing(const ModelSpec& spec, bool prefetching, double context_k, int64_t batch);

// The disk as measured (`nightshift disk-bench`) or declared.
struct DiskProfile {
  std::optional<double> read_gbs;  // sequential read bandwidth, GB/s
  std::optional<double> free_gb;   // free space where the checkpoint lives
};

struct PlanOptions {
  std::optional<double> budget_gb;  // memory budget (BudgetGb); no fit verdict when absent
  DiskProfile disk;
  bool prefetching = true;
  double context_k = kDefaultContextK;  // KV context, in units of 1024 tokens
  int64_t batch = 1;                    // sequences per pass
  int64_t new_tokens = 300;             // answer length answer_seconds is for
  int64_t prompt_tokens = 0;            // reported; free up to kPrefillIoBoundTokens
};

struct PlanResult {
  // Echoed from the ModelSpec (Plan) or left empty (PlanSized).
  std::string id;
  std::string kind;
  double size_b = 0;
  std::optional<double> score;

  std::optional<double> resident_gb;    // unknown when the footprint cannot be sized
  std::optional<double> checkpoint_gb;  // unknown when the size is unknown
  std::optional<double> pass_read_gb;   // Sizing::pass_read_gb: set for a mixture of experts
  std::optional<int> layers;
  bool layers_estimated = false;
  bool prefetching = true;
  double context_k = kDefaultContextK;
  double kv_cache_gb = 0;
  double activation_gb = 0;
  DiskRequired disk;
  std::optional<double> disk_free_gb;
  std::optional<double> disk_read_gbs;
  bool disk_fits = false;  // free space known and >= the checkpoint
  std::optional<double> est_tokens_per_s;
  std::optional<double> seconds_per_token;
  std::optional<double> seconds_per_pass;
  std::optional<double> time_to_first_token_s;
  int64_t answer_tokens = 0;
  std::optional<double> answer_seconds;  // for answer_tokens, all sequences together
  std::string answer_human;
  std::optional<double> effective_tps;
  int64_t batch = 1;
  int64_t prompt_tokens = 0;
  bool prompt_is_free = true;
  bool fits = false;    // budget known and resident_gb <= budget
  bool usable = false;  // fits AND disk_fits AND rate known and >= the batch floor
  // Why it would not work here, one sentence each, in this order: footprint
  // unknown / over budget; not enough disk; rate unknown / under the floor.
  std::vector<std::string> blockers;
  // Facts worth knowing that do not stop it (a prompt past the I/O-bound
  // length).
  std::vector<std::string> warnings;
};

// The plan for a model of the given sizing under `options`.
PlanResult PlanSized(const Sizing& sizing, const PlanOptions& options);

// The catalog plan: PlanSized(HeuristicSizing(spec, ...)) with the spec's id,
// kind, size and score copied in.
PlanResult Plan(const ModelSpec& spec, const PlanOptions& options);

struct RankOptions {
  double budget_gb = 0;
  DiskProfile disk;
  bool prefetching = true;
  // "llm" keeps llm and vlm entries (vision implies text), "vlm" keeps vlm
  // entries; empty keeps everything.
  std::string kind;
  int64_t batch = 1;
  int64_t new_tokens = 300;
};

// Plans every entry (filtered by kind) and orders them usable first, then by
// score (unscored = 0), then by size, larger first; ties keep input order.
// With prefetching on, an entry that does not fit is re-planned without
// prefetch (one resident layer instead of two) and that plan is kept when it
// fits.
std::vector<PlanResult> Rank(const std::vector<ModelSpec>& entries, const RankOptions& options);

// The streamed candidate to run: among plans that fit memory and disk, the
// usable one with the highest score (then size); when none is usable, the
// fastest one that fits (highest est_tokens_per_s). Unknown when nothing
// fits memory and disk. Ties go to the earlier plan.
std::optional<PlanResult> Pick(const std::vector<PlanResult>& plans);

// Fraction of the memory bandwidth a resident decode achieves: each token
// reads every weight once from memory, and llama.cpp-style engines reach
// 60-80% of the nominal bandwidth doing so; 0.7 is the middle.
inline constexpr double kResidentDecodeEfficiency = 0.7;

// The same model run whole in memory, beside the streamed plan.
struct Comparison {
  double resident_whole_gb = 0;            // checkpoint + activations + KV x batch (6 decimals)
  bool resident_fits = false;              // budget known and resident_whole_gb <= budget
  bool streamed_runs = false;              // the plan fits memory and disk and has a rate
  std::optional<double> resident_seconds;  // answer time resident (1 decimal)
  std::optional<double> streamed_seconds;  // the plan's answer_seconds
  std::optional<double> slowdown;          // streamed / resident (1 decimal)
  std::string verdict;                     // one sentence
};

// Compares streaming `plan` (made from `sizing` under `options`) with running
// the model resident, where a decode step reads every weight from memory at
// mem_bw_gbs x kResidentDecodeEfficiency. Resident times count decode only
// (prompt processing is ignored, which flatters the resident side); both
// sides deliver answer_tokens per sequence for the whole batch. The verdict
// covers the four cases: neither runs, only resident, only streamed, both.
Comparison CompareResident(const Sizing& sizing, const PlanResult& plan, const PlanOptions& options,
                           double mem_bw_gbs);

}  // namespace nightshift::planner
