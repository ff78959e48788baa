// The worker's Prometheus metrics: every worker family of the catalogue
// (common/metric_names.h), filled from the engine's per-pass figures and the
// batch's token counts, labelled by model, worker and mode.
//
//   auto registry = std::make_shared<metrics::Registry>();
//   WorkerMetrics m(registry, "gpu-box-1");
//   m.SetKvBudget(budget);
//   m.OnPass("llama", stats, pass.prompt_tokens, pass.generated_tokens, kv_in_use);
//
// Thread-safety: every method may be called from any thread (the registry's
// metrics are atomic); the registry is scraped concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "worker/engine/engine.h"

namespace nightshift::worker {

// "streaming" or "resident", the `mode` label value.
const char* ModeName(engine::Residency residency);

class WorkerMetrics {
 public:
  // Registers every worker family in `registry` (shared: the /metrics server
  // holds it too). Throws std::invalid_argument if the registry already holds
  // one of those names with another type (a programming error).
  WorkerMetrics(std::shared_ptr<metrics::Registry> registry, std::string worker_id);

  void SetReadBandwidth(double bytes_per_second);
  void SetKvBudget(uint64_t bytes);
  void SetKvInUse(uint64_t bytes);
  // One pass of `model`: duration, load/compute/io-wait seconds, bytes read,
  // throughput, sequences and tokens, the prompt and generated tokens it
  // accounted, and the KV cache in use after it.
  void OnPass(const std::string& model, const engine::PassStats& stats, int64_t prompt_tokens,
              int64_t generated_tokens, uint64_t kv_in_use);

  const std::shared_ptr<metrics::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<metrics::Registry> registry_;
  std::string worker_id_;
};

}  // namespace nightshift::worker
