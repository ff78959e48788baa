#include "worker/daemon/worker_metrics.h"

namespace nightshift::worker {

namespace names = metrics::names;
using metrics::CatalogueFamily;
using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

namespace {

// The series {worker=`worker_id`} of the worker gauge `name`.
Gauge& WorkerGauge(prometheus::Registry& registry, std::string_view name,
                   const std::string& worker_id) {
  return CatalogueFamily<Gauge>(registry, name).With({{"worker", worker_id}});
}

}  // namespace

const char* ModeName(engine::Residency residency) {
  return residency == engine::Residency::kResident ? "resident" : "streaming";
}

WorkerMetrics::WorkerMetrics(std::shared_ptr<prometheus::Registry> registry, std::string worker_id)
    : registry_(std::move(registry)),
      worker_id_(std::move(worker_id)),
      pass_seconds_(*registry_, names::kPassDurationSeconds),
      load_seconds_(*registry_, names::kLayerLoadSecondsTotal),
      compute_seconds_(*registry_, names::kLayerComputeSecondsTotal),
      io_wait_seconds_(*registry_, names::kIoWaitSecondsTotal),
      read_bytes_(*registry_, names::kCheckpointReadBytesTotal),
      read_throughput_(*registry_, names::kReadThroughputBytesPerSecond),
      pass_sequences_(*registry_, names::kPassSequences),
      pass_tokens_(*registry_, names::kPassTokens),
      prompt_tokens_(*registry_, names::kPromptTokensTotal),
      tokens_computed_(*registry_, names::kPassTokensComputedTotal),
      shared_prefix_tokens_(*registry_, names::kSharedPrefixTokensTotal),
      generated_tokens_(*registry_, names::kGeneratedTokensTotal),
      passes_by_compute_(*registry_, names::kPassesByComputeTotal),
      projection_flops_(*registry_, names::kProjectionFlopsTotal),
      pinned_bytes_(*registry_, names::kPinnedBytes),
      read_errors_(*registry_, names::kCheckpointReadErrorsTotal),
      model_unhealthy_(*registry_, names::kModelUnhealthy),
      experts_routed_(*registry_, names::kExpertsRoutedTotal),
      experts_read_(*registry_, names::kExpertsReadTotal),
      experts_pinned_(*registry_, names::kExpertsPinned),
      read_bandwidth_(WorkerGauge(*registry_, names::kReadBandwidthBytesPerSecond, worker_id_)),
      kv_budget_(WorkerGauge(*registry_, names::kKvBudgetBytes, worker_id_)),
      kv_in_use_(WorkerGauge(*registry_, names::kKvInUseBytes, worker_id_)) {}

void WorkerMetrics::SetReadBandwidth(double bytes_per_second) {
  read_bandwidth_.Set(bytes_per_second);
}

void WorkerMetrics::SetKvBudget(uint64_t bytes) { kv_budget_.Set(static_cast<double>(bytes)); }

void WorkerMetrics::SetKvInUse(uint64_t bytes) { kv_in_use_.Set(static_cast<double>(bytes)); }

void WorkerMetrics::OnCheckpointReadError(const std::string& model) {
  read_errors_.With({{"model", model}, {"worker", worker_id_}}).Increment();
}

void WorkerMetrics::SetModelUnhealthy(const std::string& model, bool unhealthy) {
  model_unhealthy_.With({{"model", model}, {"worker", worker_id_}}).Set(unhealthy ? 1 : 0);
}

void WorkerMetrics::OnPass(const std::string& model, const engine::PassStats& stats,
                           int64_t prompt_tokens, int64_t generated_tokens, uint64_t kv_in_use) {
  const prometheus::Labels mw = {{"model", model}, {"worker", worker_id_}};
  prometheus::Labels mwm = mw;
  mwm["mode"] = ModeName(stats.residency);
  pass_seconds_.With(mwm).Observe(stats.seconds);
  load_seconds_.With(mw).Increment(stats.load_seconds);
  compute_seconds_.With(mw).Increment(stats.compute_seconds);
  io_wait_seconds_.With(mw).Increment(stats.io_seconds);
  read_bytes_.With(mw).Increment(static_cast<double>(stats.bytes_read));
  read_throughput_.With(mw).Set(stats.seconds > 0 ? stats.bytes_read / stats.seconds : 0);
  pass_sequences_.With(mw).Observe(static_cast<double>(stats.sequences));
  pass_tokens_.With(mw).Observe(static_cast<double>(stats.tokens));
  prompt_tokens_.With(mw).Increment(static_cast<double>(prompt_tokens));
  tokens_computed_.With(mw).Increment(static_cast<double>(stats.tokens));
  shared_prefix_tokens_.With(mw).Increment(static_cast<double>(stats.shared_tokens));
  generated_tokens_.With(mw).Increment(static_cast<double>(generated_tokens));
  prometheus::Labels mwc = mw;
  mwc["compute"] = stats.compute_dtype;
  passes_by_compute_.With(mwc).Increment();
  projection_flops_.With(mw).Increment(stats.projection_flops);
  pinned_bytes_.With(mw).Set(static_cast<double>(stats.pinned_bytes + stats.host_pinned_bytes));
  if (stats.experts_total > 0) {  // a mixture of experts
    experts_routed_.With(mw).Increment(static_cast<double>(stats.experts_routed));
    experts_read_.With(mw).Increment(static_cast<double>(stats.experts_read));
    experts_pinned_.With(mw).Set(static_cast<double>(stats.experts_pinned));
  }
  SetKvInUse(kv_in_use);
}

}  // namespace nightshift::worker
