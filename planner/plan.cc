#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "planner/round.h"

namespace nightshift::planner {
namespace {

std::optional<double> Finite(double x) {
  if (!std::isfinite(x)) return std::nullopt;
  return x;
}

void AddMemoryBlocker(const Sizing& sizing, const PlanOptions& options, PlanResult& plan) {
  if (!std::isfinite(sizing.resident_gb)) {
    plan.blockers.push_back(
        "the resident footprint cannot be sized: the parameter count is unknown (and a "
        "mixture-of-experts model also needs its declared layer count)");
  } else if (options.budget_gb && !plan.fits) {
    plan.blockers.push_back("the resident footprint is " + FormatFixed(sizing.resident_gb, 1) +
                            " GB, more than the " + FormatFixed(*options.budget_gb, 1) +
                            " GB memory budget");
  }
}

void AddDiskBlocker(const PlanOptions& options, PlanResult& plan) {
  if (options.disk.free_gb && !plan.disk_fits && std::isfinite(plan.disk.peak_gb)) {
    plan.blockers.push_back("the checkpoint needs " + FormatFixed(plan.disk.steady_gb, 0) +
                            " GB of disk and only " + FormatFixed(*options.disk.free_gb, 0) +
                            " GB is free");
  }
}

void AddRateBlocker(PlanResult& plan) {
  if (!plan.est_tokens_per_s) {
    plan.blockers.push_back("the disk read bandwidth is unknown, so no rate can be estimated");
  } else if (*plan.est_tokens_per_s < kBatchFloorTokensPerSecond) {
    plan.blockers.push_back(PyRepr(*plan.est_tokens_per_s) + " tok/s (" +
                            PyRepr(plan.seconds_per_token.value_or(NAN)) +
                            " s/token) is under the " + PyRepr(kBatchFloorTokensPerSecond) +
                            " tok/s floor for batch work");
  }
}

void AddPromptWarning(PlanResult& plan) {
  if (plan.prompt_is_free) return;
  plan.warnings.push_back("a " + std::to_string(plan.prompt_tokens) + "-token prompt is past the " +
                          std::to_string(kPrefillIoBoundTokens) +
                          " tokens one pass reads at disk speed: the first pass takes longer "
                          "than shown (the decode figures stand)");
}

// Higher-is-better key shared by Rank's order and Pick's choice, so the top
// ranked row and the picked plan agree.
bool CapabilityLess(const PlanResult& a, const PlanResult& b) {
  double sa = a.score.value_or(0.0), sb = b.score.value_or(0.0);
  if (sa != sb) return sa < sb;
  return a.size_b < b.size_b;
}

bool KindMatches(const std::string& wanted, const std::string& kind) {
  if (wanted.empty()) return true;
  if (wanted == "llm") return kind == "llm" || kind == "vlm";
  return kind == wanted;
}

}  // namespace

Sizing HeuristicSizing(const ModelSpec& spec, bool prefetching, double context_k, int64_t batch) {
  Sizing s;
  LayerCount depth = CountLayers(spec);
  s.layers = depth.layers;
  s.layers_estimated = depth.estimated;
  s.checkpoint_gb = CheckpointGb(spec);
  s.resident_gb = FootprintGb(spec, prefetching, context_k, batch);
  s.activation_gb = kActivationGb;
  s.kv_cache_gb = KvCacheGb(depth.layers, context_k);
  s.disk = DiskRequiredGb(s.checkpoint_gb);
  return s;
}

PlanResult PlanSized(const Sizing& sizing, const PlanOptions& options) {
  PlanResult p;
  p.resident_gb = Finite(sizing.resident_gb);
  p.checkpoint_gb = Finite(sizing.checkpoint_gb);
  p.layers = sizing.layers;
  p.layers_estimated = sizing.layers_estimated;
  p.prefetching = options.prefetching;
  p.context_k = options.context_k;
  p.kv_cache_gb = sizing.kv_cache_gb;
  p.activation_gb = sizing.activation_gb;
  p.disk = sizing.disk;
  p.disk_free_gb = options.disk.free_gb;
  p.disk_read_gbs = options.disk.read_gbs;
  p.batch = std::max<int64_t>(1, options.batch);
  p.answer_tokens = options.new_tokens;
  p.prompt_tokens = options.prompt_tokens;
  p.prompt_is_free = options.prompt_tokens <= kPrefillIoBoundTokens;

  p.pass_read_gb = sizing.pass_read_gb;
  // What a pass reads: the checkpoint, or a mixture of experts' expected bytes.
  const double read_gb = sizing.pass_read_gb.value_or(sizing.checkpoint_gb);
  p.est_tokens_per_s = TokensPerSecond(read_gb, options.disk.read_gbs, options.prefetching);
  p.seconds_per_token = SecondsPerToken(p.est_tokens_per_s);
  GenerationRequest request{options.new_tokens, options.prompt_tokens, options.batch,
                            options.prefetching};
  if (auto t = EstimateGenerationTime(read_gb, options.disk.read_gbs, request)) {
    p.seconds_per_pass = t->seconds_per_pass;
    p.time_to_first_token_s = t->time_to_first_token_s;
    p.answer_seconds = t->total_seconds;
    p.effective_tps = t->effective_tps;
  }
  p.answer_human = HumanDuration(p.answer_seconds);

  p.fits = options.budget_gb && p.resident_gb && *p.resident_gb <= *options.budget_gb;
  p.disk_fits = options.disk.free_gb && std::isfinite(sizing.disk.peak_gb) &&
                sizing.disk.peak_gb <= *options.disk.free_gb;
  p.usable = p.fits && p.disk_fits && p.est_tokens_per_s &&
             *p.est_tokens_per_s >= kBatchFloorTokensPerSecond;

  AddMemoryBlocker(sizing, options, p);
  AddDiskBlocker(options, p);
  AddRateBlocker(p);
  AddPromptWarning(p);
  return p;
}

PlanResult Plan(const ModelSpec& spec, const PlanOptions& options) {
  PlanResult p = PlanSized(
      HeuristicSizing(spec, options.prefetching, options.context_k, options.batch), options);
  p.id = spec.id;
  p.kind = spec.kind;
  p.size_b = std::max(0.0, spec.size_b);
  p.score = spec.score;
  return p;
}

std::vector<PlanResult> Rank(const std::vector<ModelSpec>& entries, const RankOptions& options) {
  PlanOptions plan_options;
  plan_options.budget_gb = options.budget_gb;
  plan_options.disk = options.disk;
  plan_options.prefetching = options.prefetching;
  plan_options.batch = options.batch;
  plan_options.new_tokens = options.new_tokens;

  std::vector<PlanResult> plans;
  for (const ModelSpec& entry : entries) {
    if (!KindMatches(options.kind, entry.kind)) continue;
    PlanResult row = Plan(entry, plan_options);
    if (options.prefetching && !row.fits) {
      // Dropping prefetch halves the resident-layer term for ~15% of the
      // rate: worth it when it is the difference between running and not.
      PlanOptions serial_options = plan_options;
      serial_options.prefetching = false;
      PlanResult serial = Plan(entry, serial_options);
      if (serial.fits) row = std::move(serial);
    }
    plans.push_back(std::move(row));
  }
  std::stable_sort(plans.begin(), plans.end(), [](const PlanResult& a, const PlanResult& b) {
    if (a.usable != b.usable) return a.usable;
    return CapabilityLess(b, a);
  });
  return plans;
}

std::optional<PlanResult> Pick(const std::vector<PlanResult>& plans) {
  const PlanResult* best_usable = nullptr;
  const PlanResult* fastest = nullptr;
  for (const PlanResult& p : plans) {
    if (!p.fits || !p.disk_fits) continue;
    if (p.usable && (best_usable == nullptr || CapabilityLess(*best_usable, p))) best_usable = &p;
    if (fastest == nullptr ||
        p.est_tokens_per_s.value_or(0.0) > fastest->est_tokens_per_s.value_or(0.0)) {
      fastest = &p;
    }
  }
  if (best_usable != nullptr) return *best_usable;
  if (fastest != nullptr) return *fastest;
  return std::nullopt;
}

namespace {

std::string Verdict(const Comparison& c, const PlanResult& plan) {
  std::string tokens = std::to_string(plan.answer_tokens);
  std::string resident = HumanDuration(c.resident_seconds);
  std::string streamed = HumanDuration(c.streamed_seconds);
  if (!c.resident_fits && !c.streamed_runs) {
    return "This machine can run the model neither whole in memory nor streamed.";
  }
  if (!c.streamed_runs) {
    return "Streaming is not possible here, but the model fits whole in memory and answers " +
           tokens + " tokens in " + resident + ".";
  }
  if (!c.resident_fits) {
    return "The model does not fit whole in memory, so streaming is the only way to run it: " +
           tokens + " tokens take " + streamed + ".";
  }
  std::string wait = c.slowdown ? FormatFixed(*c.slowdown, 0) + "x the wait" : "an unknown wait";
  return "The model fits whole in memory, so streaming it only costs time (" + wait + ": " +
         streamed + " instead of " + resident + " for a " + tokens +
         "-token answer); run it resident.";
}

}  // namespace

Comparison CompareResident(const Sizing& sizing, const PlanResult& plan, const PlanOptions& options,
                           double mem_bw_gbs) {
  Comparison c;
  double batch = static_cast<double>(std::max<int64_t>(1, options.batch));
  c.resident_whole_gb =
      PyRound(sizing.checkpoint_gb + sizing.activation_gb + sizing.kv_cache_gb * batch, 6);
  c.resident_fits = options.budget_gb && std::isfinite(c.resident_whole_gb) &&
                    c.resident_whole_gb <= *options.budget_gb;
  if (c.resident_fits && mem_bw_gbs > 0) {
    double seconds_per_token = sizing.checkpoint_gb / (mem_bw_gbs * kResidentDecodeEfficiency);
    c.resident_seconds = PyRound(
        static_cast<double>(std::max<int64_t>(1, plan.answer_tokens)) * seconds_per_token, 1);
  }
  c.streamed_runs = plan.fits && plan.disk_fits && plan.answer_seconds.has_value();
  if (c.streamed_runs) c.streamed_seconds = plan.answer_seconds;
  if (c.resident_seconds && c.streamed_seconds && *c.resident_seconds > 0) {
    c.slowdown = PyRound(*c.streamed_seconds / *c.resident_seconds, 1);
  }
  c.verdict = Verdict(c, plan);
  return c;
}

}  // namespace nightshift::planner
