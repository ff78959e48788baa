#include "worker/daemon/worker_metrics.h"

#include "common/metric_names.h"

namespace nightshift::worker {

namespace names = metrics::names;
using metrics::CatalogueFamily;
using metrics::Counter;
using metrics::Gauge;
using metrics::Histogram;

const char* ModeName(engine::Residency residency) {
  return residency == engine::Residency::kResident ? "resident" : "streaming";
}

WorkerMetrics::WorkerMetrics(std::shared_ptr<metrics::Registry> registry, std::string worker_id)
    : registry_(std::move(registry)), worker_id_(std::move(worker_id)) {
  metrics::RegisterAll(*registry_, metrics::Exporter::kWorker);
}

void WorkerMetrics::SetReadBandwidth(double bytes_per_second) {
  CatalogueFamily<Gauge>(*registry_, names::kReadBandwidthBytesPerSecond)
      .With({{"worker", worker_id_}})
      .Set(bytes_per_second);
}

void WorkerMetrics::SetKvBudget(uint64_t bytes) {
  CatalogueFamily<Gauge>(*registry_, names::kKvBudgetBytes)
      .With({{"worker", worker_id_}})
      .Set(static_cast<double>(bytes));
}

void WorkerMetrics::SetKvInUse(uint64_t bytes) {
  CatalogueFamily<Gauge>(*registry_, names::kKvInUseBytes)
      .With({{"worker", worker_id_}})
      .Set(static_cast<double>(bytes));
}

void WorkerMetrics::OnPass(const std::string& model, const engine::PassStats& stats,
                           int64_t prompt_tokens, int64_t generated_tokens, uint64_t kv_in_use) {
  const metrics::Labels mw = {{"model", model}, {"worker", worker_id_}};
  metrics::Labels mwm = mw;
  mwm["mode"] = ModeName(stats.residency);
  metrics::Registry& r = *registry_;
  CatalogueFamily<Histogram>(r, names::kPassDurationSeconds).With(mwm).Observe(stats.seconds);
  CatalogueFamily<Counter>(r, names::kLayerLoadSecondsTotal).With(mw).Increment(stats.load_seconds);
  CatalogueFamily<Counter>(r, names::kLayerComputeSecondsTotal)
      .With(mw)
      .Increment(stats.compute_seconds);
  CatalogueFamily<Counter>(r, names::kIoWaitSecondsTotal).With(mw).Increment(stats.io_seconds);
  CatalogueFamily<Counter>(r, names::kCheckpointReadBytesTotal)
      .With(mw)
      .Increment(static_cast<double>(stats.bytes_read));
  CatalogueFamily<Gauge>(r, names::kReadThroughputBytesPerSecond)
      .With(mw)
      .Set(stats.seconds > 0 ? stats.bytes_read / stats.seconds : 0);
  CatalogueFamily<Histogram>(r, names::kPassSequences)
      .With(mw)
      .Observe(static_cast<double>(stats.sequences));
  CatalogueFamily<Histogram>(r, names::kPassTokens)
      .With(mw)
      .Observe(static_cast<double>(stats.tokens));
  CatalogueFamily<Counter>(r, names::kPromptTokensTotal)
      .With(mw)
      .Increment(static_cast<double>(prompt_tokens));
  CatalogueFamily<Counter>(r, names::kGeneratedTokensTotal)
      .With(mw)
      .Increment(static_cast<double>(generated_tokens));
  SetKvInUse(kv_in_use);
}

}  // namespace nightshift::worker
