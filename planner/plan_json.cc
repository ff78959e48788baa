#include "planner/plan_json.h"

#include <cmath>

namespace nightshift::planner {
namespace {

using nlohmann::ordered_json;

ordered_json Number(double x) { return std::isfinite(x) ? ordered_json(x) : ordered_json(); }

template <typename T>
ordered_json Optional(const std::optional<T>& x) {
  if (!x) return ordered_json();
  if constexpr (std::is_floating_point_v<T>) return Number(*x);
  return ordered_json(*x);
}

}  // namespace

ordered_json PlanJson(const PlanResult& p) {
  ordered_json j;
  j["model"] = p.id.empty() ? ordered_json() : ordered_json(p.id);
  j["resident_gb"] = Optional(p.resident_gb);
  j["checkpoint_gb"] = Optional(p.checkpoint_gb);
  if (p.pass_read_gb) j["pass_read_gb"] = Number(*p.pass_read_gb);
  j["layers"] = Optional(p.layers);
  j["layers_estimated"] = p.layers_estimated;
  j["prefetching"] = p.prefetching;
  j["context_k"] = p.context_k;
  j["kv_cache_gb"] = p.kv_cache_gb;
  j["activation_gb"] = p.activation_gb;
  j["disk"] = {{"peak_gb", Number(p.disk.peak_gb)}, {"steady_gb", Number(p.disk.steady_gb)}};
  j["disk_free_gb"] = Optional(p.disk_free_gb);
  j["disk_read_gbs"] = Optional(p.disk_read_gbs);
  j["disk_fits"] = p.disk_fits;
  j["est_tokens_per_s"] = Optional(p.est_tokens_per_s);
  j["seconds_per_token"] = Optional(p.seconds_per_token);
  j["seconds_per_pass"] = Optional(p.seconds_per_pass);
  j["time_to_first_token_s"] = Optional(p.time_to_first_token_s);
  j["answer_tokens"] = p.answer_tokens;
  j["answer_seconds"] = Optional(p.answer_seconds);
  j["answer_human"] = p.answer_human;
  j["effective_tps"] = Optional(p.effective_tps);
  j["batch"] = p.batch;
  j["prompt_tokens"] = p.prompt_tokens;
  j["prompt_is_free"] = p.prompt_is_free;
  j["fits"] = p.fits;
  j["usable"] = p.usable;
  j["blockers"] = p.blockers;
  j["warnings"] = p.warnings;
  if (p.size_b > 0) j["size_b"] = p.size_b;
  if (!p.kind.empty()) j["kind"] = p.kind;
  if (p.score) j["score"] = *p.score;
  return j;
}

ordered_json DecisionJson(const Decision& d) {
  ordered_json j;
  j["activate"] = d.activate;
  j["request"] = StreamingRequestName(d.request);
  j["trigger"] = TriggerName(d.trigger);
  j["reason"] = d.reason;
  j["engine_available"] = d.engine_available;
  j["runtime"] = d.runtime ? ordered_json(RuntimeName(*d.runtime)) : ordered_json();
  j["blockers"] = d.blockers;
  j["caveats"] = d.caveats;
  return j;
}

ordered_json ComparisonJson(const Comparison& c) {
  ordered_json j;
  j["resident_seconds"] = Optional(c.resident_seconds);
  j["streamed_seconds"] = Optional(c.streamed_seconds);
  j["slowdown"] = Optional(c.slowdown);
  j["verdict"] = c.verdict;
  j["resident_whole_gb"] = Number(c.resident_whole_gb);
  j["resident_fits"] = c.resident_fits;
  j["streamed_runs"] = c.streamed_runs;
  return j;
}

}  // namespace nightshift::planner
