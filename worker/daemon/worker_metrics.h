// The worker's Prometheus metrics: every worker family of the catalogue
// (common/metric_names.h) on a prometheus-cpp registry, filled from the
// engine's per-pass figures and the batch's token counts, labelled by model,
// worker and mode.
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   WorkerMetrics m(registry, "gpu-box-1");
//   m.SetKvBudget(budget);
//   m.OnPass("llama", stats, pass.prompt_tokens, pass.generated_tokens, kv_in_use);
//
// Thread-safety: every method may be called from any thread (prometheus-cpp's
// metrics are thread-safe); the registry is scraped concurrently.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/metric_names.h"
#include "worker/engine/engine.h"

namespace nightshift::worker {

// "streaming" or "resident", the `mode` label value.
const char* ModeName(engine::Residency residency);

class WorkerMetrics {
 public:
  // Builds every worker family in `registry` (shared: the /metrics server
  // holds it too), with the per-worker gauges (read bandwidth, KV budget and
  // KV in use) at 0. Throws std::invalid_argument if the registry already
  // holds one of those names with another type (a programming error).
  WorkerMetrics(std::shared_ptr<prometheus::Registry> registry, std::string worker_id);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  void SetReadBandwidth(double bytes_per_second);
  void SetKvBudget(uint64_t bytes);
  void SetKvInUse(uint64_t bytes);
  // One pass of `model`: duration, load/compute/io-wait seconds, bytes read,
  // throughput, sequences and tokens, the prompt and generated tokens it
  // accounted, what its projections computed in and their FLOPs, the KV
  // cache in use after it and, for a mixture of experts, the experts it
  // routed to, read and kept pinned.
  void OnPass(const std::string& model, const engine::PassStats& stats, int64_t prompt_tokens,
              int64_t generated_tokens, uint64_t kv_in_use);

  // A pass of `model` failed reading its checkpoint (counted).
  void OnCheckpointReadError(const std::string& model);
  // Whether `model` is unhealthy now (its gauge 1) or not (0).
  void SetModelUnhealthy(const std::string& model, bool unhealthy);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::string worker_id_;
  metrics::CatalogueFamily<prometheus::Histogram> pass_seconds_;
  metrics::CatalogueFamily<prometheus::Counter> load_seconds_;
  metrics::CatalogueFamily<prometheus::Counter> compute_seconds_;
  metrics::CatalogueFamily<prometheus::Counter> io_wait_seconds_;
  metrics::CatalogueFamily<prometheus::Counter> read_bytes_;
  metrics::CatalogueFamily<prometheus::Gauge> read_throughput_;
  metrics::CatalogueFamily<prometheus::Histogram> pass_sequences_;
  metrics::CatalogueFamily<prometheus::Histogram> pass_tokens_;
  metrics::CatalogueFamily<prometheus::Counter> prompt_tokens_;
  metrics::CatalogueFamily<prometheus::Counter> tokens_computed_;
  metrics::CatalogueFamily<prometheus::Counter> shared_prefix_tokens_;
  metrics::CatalogueFamily<prometheus::Counter> generated_tokens_;
  metrics::CatalogueFamily<prometheus::Counter> passes_by_compute_;
  metrics::CatalogueFamily<prometheus::Counter> projection_flops_;
  metrics::CatalogueFamily<prometheus::Gauge> pinned_bytes_;
  metrics::CatalogueFamily<prometheus::Counter> read_errors_;
  metrics::CatalogueFamily<prometheus::Gauge> model_unhealthy_;
  metrics::CatalogueFamily<prometheus::Counter> experts_routed_;
  metrics::CatalogueFamily<prometheus::Counter> experts_read_;
  metrics::CatalogueFamily<prometheus::Gauge> experts_pinned_;
  prometheus::Gauge& read_bandwidth_;
  prometheus::Gauge& kv_budget_;
  prometheus::Gauge& kv_in_use_;
};

}  // namespace nightshift::worker
