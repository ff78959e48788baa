// JSON renderings of plans, decisions and comparisons, for `nightshift plan
// --json` and for anything else that reports them (the scheduler's API).
// Keys are the seed's plan keys; unknown values (and infinite sizes) are
// null. Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/policy.h"

namespace nightshift::planner {

// model (the id, null when empty), resident_gb, checkpoint_gb, layers,
// layers_estimated, prefetching, context_k, kv_cache_gb, activation_gb, disk
// {peak_gb, steady_gb}, disk_free_gb, disk_read_gbs, disk_fits,
// est_tokens_per_s, seconds_per_token, seconds_per_pass,
// time_to_first_token_s, answer_tokens, answer_seconds, answer_human,
// effective_tps, batch, prompt_tokens, prompt_is_free, fits, usable,
// blockers, warnings; plus pass_read_gb after checkpoint_gb for a mixture of
// experts, and size_b, kind and score when the plan came from a catalog
// entry that has them.
nlohmann::ordered_json PlanJson(const PlanResult& plan);

// activate, request, trigger, reason, engine_available, runtime, blockers,
// caveats.
nlohmann::ordered_json DecisionJson(const Decision& decision);

// resident_seconds, streamed_seconds, slowdown, verdict, resident_whole_gb,
// resident_fits, streamed_runs.
nlohmann::ordered_json ComparisonJson(const Comparison& comparison);

}  // namespace nightshift::planner
