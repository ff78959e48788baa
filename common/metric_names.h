// The catalogue of every nightshift metric family: name, type, help, label
// names and histogram buckets. The scheduler and the worker register their
// metrics from here and nowhere else; the dashboard test checks every panel
// query against it.
//
// Conventions: names are nightshift_<what>_<unit> in base units (_seconds,
// _bytes), counters end in _total. Labels are only `model`, `worker` and the
// fixed enums `state`, `outcome` and `mode` (never job or submission ids, which
// would grow without bound).
//
//   auto registry = std::make_shared<metrics::Registry>();
//   metrics::CatalogueFamily<metrics::Histogram> passes(*registry,
//                                                        metrics::names::kPassDurationSeconds);
//   metrics::Histogram& h = passes.With({{"model", m}, {"worker", w}, {"mode", "streaming"}});
//   h.Observe(stats.seconds);  // keep `h`; With takes a lock
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"

namespace nightshift::metrics {

// Which process exports a family.
enum class Exporter { kScheduler, kWorker };

struct MetricDef {
  std::string_view name;
  MetricType type;
  std::string_view help;
  std::vector<std::string> labels;  // label names, in the order documented
  std::vector<double> buckets;      // histograms only
  Exporter exporter;
};

namespace names {
// Worker: per pass of the streamed executor (engine PassStats) and its budget.
inline constexpr std::string_view kPassDurationSeconds = "nightshift_pass_duration_seconds";
inline constexpr std::string_view kLayerLoadSecondsTotal = "nightshift_layer_load_seconds_total";
inline constexpr std::string_view kLayerComputeSecondsTotal =
    "nightshift_layer_compute_seconds_total";
inline constexpr std::string_view kIoWaitSecondsTotal = "nightshift_io_wait_seconds_total";
inline constexpr std::string_view kCheckpointReadBytesTotal =
    "nightshift_checkpoint_read_bytes_total";
inline constexpr std::string_view kReadThroughputBytesPerSecond =
    "nightshift_read_throughput_bytes_per_second";
inline constexpr std::string_view kReadBandwidthBytesPerSecond =
    "nightshift_read_bandwidth_bytes_per_second";
inline constexpr std::string_view kPassSequences = "nightshift_pass_sequences";
inline constexpr std::string_view kPassTokens = "nightshift_pass_tokens";
inline constexpr std::string_view kPromptTokensTotal = "nightshift_prompt_tokens_total";
inline constexpr std::string_view kGeneratedTokensTotal = "nightshift_generated_tokens_total";
inline constexpr std::string_view kKvBudgetBytes = "nightshift_kv_budget_bytes";
inline constexpr std::string_view kKvInUseBytes = "nightshift_kv_in_use_bytes";
// Scheduler: the queue, leases, results and ETAs.
inline constexpr std::string_view kJobs = "nightshift_jobs";
inline constexpr std::string_view kJobsSubmittedTotal = "nightshift_jobs_submitted_total";
inline constexpr std::string_view kJobsFinishedTotal = "nightshift_jobs_finished_total";
inline constexpr std::string_view kJobQueueSeconds = "nightshift_job_queue_seconds";
inline constexpr std::string_view kJobEndToEndSeconds = "nightshift_job_end_to_end_seconds";
inline constexpr std::string_view kJobRetriesTotal = "nightshift_job_retries_total";
inline constexpr std::string_view kLeaseExpirationsTotal = "nightshift_lease_expirations_total";
inline constexpr std::string_view kResultsRefusedTotal = "nightshift_results_refused_total";
inline constexpr std::string_view kWorkersAttached = "nightshift_workers_attached";
inline constexpr std::string_view kSubmissionEtaSeconds = "nightshift_submission_eta_seconds";
inline constexpr std::string_view kSubmitDurationSeconds = "nightshift_submit_duration_seconds";
}  // namespace names

// Every family, in a fixed order. Never empty; names are unique.
const std::vector<MetricDef>& Catalogue();

// The family named `name`, or nullptr.
const MetricDef* FindMetric(std::string_view name);

// The values a fixed-enum label may take ("state", "outcome", "mode"); an
// empty list for free labels ("model", "worker").
const std::vector<std::string>& AllowedLabelValues(std::string_view label);

// Registers every family `exporter` exports, so each appears (HELP and TYPE)
// before its first sample. std::invalid_argument if `registry` holds one of
// these names with another type or help.
void RegisterAll(Registry& registry, Exporter exporter);

// A family registered from the catalogue. Thread-safe; cheap to copy; valid as
// long as the registry it was made with.
template <typename T>
class CatalogueFamily {
 public:
  // Registers (or finds) the family `name` in `registry`. std::invalid_argument
  // if `name` is not in the catalogue or is not of T's type.
  CatalogueFamily(Registry& registry, std::string_view name);

  // The metric for `labels`, created on first use (a histogram with the
  // catalogue's buckets). std::invalid_argument unless the label names are
  // exactly the catalogue's and every enum label has an allowed value. Takes
  // the family's lock: keep the reference on hot paths.
  T& With(const Labels& labels);
  // Drops a metric (e.g. of a worker that left); see Family::Remove.
  void Remove(T* metric) { family_->Remove(metric); }

  const MetricDef& def() const { return *def_; }

 private:
  const MetricDef* def_;
  Family<T>* family_;
};

// Throws std::invalid_argument unless `labels` fit `def` (see With).
void CheckCatalogueLabels(const MetricDef& def, const Labels& labels);
// Throws std::invalid_argument unless `name` is a catalogue family of `type`.
const MetricDef& CatalogueDef(std::string_view name, MetricType type);

template <typename T>
CatalogueFamily<T>::CatalogueFamily(Registry& registry, std::string_view name)
    : def_(&CatalogueDef(name, T::kType)),
      family_(&registry.AddFamily<T>(std::string(def_->name), std::string(def_->help))) {}

template <typename T>
T& CatalogueFamily<T>::With(const Labels& labels) {
  CheckCatalogueLabels(*def_, labels);
  if constexpr (T::kType == MetricType::kHistogram) {
    return family_->Add(labels, def_->buckets);
  } else {
    return family_->Add(labels);
  }
}

}  // namespace nightshift::metrics
