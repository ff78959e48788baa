// The catalogue of every nightshift metric family: name, type, help, label
// names and histogram buckets. The scheduler and the worker build their
// prometheus-cpp families from here and nowhere else; the dashboard test
// checks every panel query against it.
//
// Conventions: names are nightshift_<what>_<unit> in base units (_seconds,
// _bytes), counters end in _total. Labels are only `model`, `worker` and the
// fixed enums `state`, `outcome`, `mode`, `compute` and `progress` (never job or
// submission ids, which would grow without bound).
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   metrics::CatalogueFamily<prometheus::Histogram> passes(*registry,
//                                                          metrics::names::kPassDurationSeconds);
//   prometheus::Histogram& h = passes.With({{"model", m}, {"worker", w}, {"mode", "streaming"}});
//   h.Observe(stats.seconds);  // keep `h`; With takes the family's lock
//
// prometheus-cpp exports a family once it has a series: a labelled family
// nothing was recorded in yet has no HELP or TYPE line in a scrape.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/metric_type.h>
#include <prometheus/registry.h>

#include <string>
#include <string_view>
#include <vector>

namespace nightshift::metrics {

// Which process exports a family.
enum class Exporter { kScheduler, kWorker };

struct MetricDef {
  std::string_view name;
  prometheus::MetricType type;
  std::string_view help;
  std::vector<std::string> labels;  // label names, in the order documented
  std::vector<double> buckets;      // histograms only: finite, strictly increasing
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
inline constexpr std::string_view kPassTokensComputedTotal =
    "nightshift_pass_tokens_computed_total";
inline constexpr std::string_view kSharedPrefixTokensTotal =
    "nightshift_shared_prefix_tokens_total";
inline constexpr std::string_view kGeneratedTokensTotal = "nightshift_generated_tokens_total";
inline constexpr std::string_view kKvBudgetBytes = "nightshift_kv_budget_bytes";
inline constexpr std::string_view kKvInUseBytes = "nightshift_kv_in_use_bytes";
inline constexpr std::string_view kPinnedBytes = "nightshift_pinned_bytes";
inline constexpr std::string_view kPassesByComputeTotal = "nightshift_passes_by_compute_total";
inline constexpr std::string_view kProjectionFlopsTotal = "nightshift_projection_flops_total";
inline constexpr std::string_view kCheckpointReadErrorsTotal =
    "nightshift_checkpoint_read_errors_total";
inline constexpr std::string_view kModelUnhealthy = "nightshift_model_unhealthy";
inline constexpr std::string_view kExpertsRoutedTotal = "nightshift_experts_routed_total";
inline constexpr std::string_view kExpertsReadTotal = "nightshift_experts_read_total";
inline constexpr std::string_view kExpertsPinned = "nightshift_experts_pinned";
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
inline constexpr std::string_view kSchedulerDiskFullTotal = "nightshift_scheduler_disk_full_total";
inline constexpr std::string_view kHttpClientTimeoutsTotal =
    "nightshift_http_client_timeouts_total";
inline constexpr std::string_view kEtaRelativeErrorRatio = "nightshift_eta_relative_error_ratio";
}  // namespace names

// Every family, in a fixed order. Never empty; names are unique.
const std::vector<MetricDef>& Catalogue();

// The family named `name`, or nullptr.
const MetricDef* FindMetric(std::string_view name);

// The values a fixed-enum label may take ("state", "outcome", "mode", "compute",
// "progress": the percent of a submission's jobs done); an
// empty list for free labels ("model", "worker").
const std::vector<std::string>& AllowedLabelValues(std::string_view label);

// "counter", "gauge", "histogram", ...: the spelling of the # TYPE line.
const char* MetricTypeName(prometheus::MetricType type);

// A prometheus-cpp family built from the catalogue. Thread-safe; cheap to
// copy; valid as long as the registry it was made with.
template <typename T>
class CatalogueFamily {
 public:
  // Builds (or finds) the family `name` in `registry`. std::invalid_argument
  // if `name` is not in the catalogue or is not of T's type, or if the
  // registry holds the name with another type.
  CatalogueFamily(prometheus::Registry& registry, std::string_view name);

  // The metric for `labels`, created on first use (a histogram with the
  // catalogue's buckets). std::invalid_argument unless the label names are
  // exactly the catalogue's and every enum label has an allowed value. Takes
  // the family's lock: keep the reference on hot paths.
  T& With(const prometheus::Labels& labels);
  // Drops a metric (e.g. of a model without an ETA): its series disappears
  // from the next scrape and `metric` must not be used afterwards.
  void Remove(T* metric) { family_->Remove(metric); }

  const MetricDef& def() const { return *def_; }

 private:
  const MetricDef* def_;
  prometheus::Family<T>* family_;
};

// Throws std::invalid_argument unless `labels` fit `def` (see With).
void CheckCatalogueLabels(const MetricDef& def, const prometheus::Labels& labels);
// Throws std::invalid_argument unless `name` is a catalogue family of `type`.
const MetricDef& CatalogueDef(std::string_view name, prometheus::MetricType type);

template <typename T>
CatalogueFamily<T>::CatalogueFamily(prometheus::Registry& registry, std::string_view name)
    : def_(&CatalogueDef(name, T::metric_type)),
      family_(&prometheus::detail::Builder<T>()
                   .Name(std::string(def_->name))
                   .Help(std::string(def_->help))
                   .Register(registry)) {}

template <typename T>
T& CatalogueFamily<T>::With(const prometheus::Labels& labels) {
  CheckCatalogueLabels(*def_, labels);
  if constexpr (T::metric_type == prometheus::MetricType::Histogram) {
    return family_->Add(labels, def_->buckets);
  } else {
    return family_->Add(labels);
  }
}

}  // namespace nightshift::metrics
