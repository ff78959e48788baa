// The scheduler's Prometheus metrics: the Exporter::kScheduler families of
// common/metric_names.h on a prometheus-cpp registry, filled by plain calls
// from the domain core (Scheduler, through SchedulerOptions::metrics) and the
// gRPC service, and refreshed at each scrape (the MetricsServer's
// before_scrape hook, common/metrics_http.h) from the scheduler's live state
// and the database (JobCounter).
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   SchedulerMetrics metrics(*registry);
//   options.metrics = &metrics;  // the Scheduler fills the event counters
//   ... at each scrape: metrics.SetJobCounts(counter->Count()), SetWorkersAttached,
//   SetEtas(scheduler.Gauges().eta_seconds) ...
//
// Labels are only the catalogue's: model, worker, state, outcome, progress (never job or
// submission ids).
//
// Thread-safety: every method of SchedulerMetrics may be called from any
// thread. JobCounter serialises its calls on a mutex of its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/metric_names.h"
#include "common/status.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

namespace sqlite {
class Db;
}  // namespace sqlite

// How many jobs of one model are in one state.
struct JobCount {
  std::string model;
  JobState state = JobState::kQueued;
  int64_t jobs = 0;
};

class SchedulerMetrics {
 public:
  // Builds every scheduler family of the catalogue in `registry` (a family
  // shows in a scrape once it has a series). `registry` is not owned and must
  // outlive this object. std::invalid_argument when the registry holds one of
  // the names with another type.
  explicit SchedulerMetrics(prometheus::Registry& registry);
  SchedulerMetrics(const SchedulerMetrics&) = delete;
  SchedulerMetrics& operator=(const SchedulerMetrics&) = delete;

  // ---- events (counters and histograms)

  // SubmitJobs stored `jobs` new jobs of `model` (not for a replay).
  void JobsSubmitted(const std::string& model, int64_t jobs);
  // A job was leased for the first time, `queue_seconds` after its
  // submission (a lease after a lost lease or a hand-back is not observed).
  void JobLeased(const std::string& model, double queue_seconds);
  // A job reached `state` (succeeded, failed or cancelled; other states are
  // ignored) `end_to_end_seconds` after its submission.
  void JobFinished(const std::string& model, JobState state, double end_to_end_seconds);
  // A batch of `worker` lost its lease (it expired, or the worker re-attached
  // without it).
  void LeaseExpired(const std::string& model, const std::string& worker);
  // A job went back to the queue because its lease was lost.
  void JobRetried(const std::string& model);
  // A result from `worker` was refused (a duplicate, or its lease was no
  // longer current).
  void ResultRefused(const std::string& model, const std::string& worker);
  // One SubmitJobs call was answered (whatever its outcome) in `seconds`.
  void SubmitAnswered(double seconds);
  // The Batch API closed a stalled client's connection (http_server.h).
  void HttpClientTimedOut();
  // A submission ended; the ETA it showed at `progress` percent done was off
  // by `ratio` ((shown - actual) / actual).
  void EtaError(const std::string& progress, double ratio);

  // ---- gauges, refreshed at each scrape

  void SetWorkersAttached(int64_t workers);
  // Brings nightshift_scheduler_disk_full_total up to `total`, the process's
  // DiskFullCount() (scheduler/disk_full.h); a smaller total is ignored.
  void SetDiskFullTotal(int64_t total);
  // Sets nightshift_jobs{model,state} from `counts`; every pair reported
  // before and absent now is set to 0.
  void SetJobCounts(const std::vector<JobCount>& counts);
  // Sets nightshift_submission_eta_seconds{model} for each model of
  // `eta_seconds`; the series of models absent from it are removed (no
  // remaining work, or its ETA is unknown).
  void SetEtas(const std::map<std::string, double>& eta_seconds);

 private:
  metrics::CatalogueFamily<prometheus::Counter> submitted_;
  metrics::CatalogueFamily<prometheus::Counter> finished_;
  metrics::CatalogueFamily<prometheus::Histogram> queue_seconds_;
  metrics::CatalogueFamily<prometheus::Histogram> end_to_end_seconds_;
  metrics::CatalogueFamily<prometheus::Counter> retries_;
  metrics::CatalogueFamily<prometheus::Counter> lease_expirations_;
  metrics::CatalogueFamily<prometheus::Counter> results_refused_;
  metrics::CatalogueFamily<prometheus::Gauge> jobs_;
  metrics::CatalogueFamily<prometheus::Gauge> etas_;
  metrics::CatalogueFamily<prometheus::Histogram> eta_errors_;
  prometheus::Gauge& workers_attached_;
  prometheus::Histogram& submit_seconds_;
  prometheus::Counter& disk_full_;
  prometheus::Counter& http_timeouts_;

  std::mutex mu_;  // guards the label sets below
  std::set<std::pair<std::string, JobState>> counted_;
  std::set<std::string> eta_models_;
};

// Counts the jobs of the scheduler's database by model and state, on a
// connection of its own: a scrape never waits for the store's lock, and in
// WAL mode the read does not block the store's writes.
class JobCounter {
 public:
  // Opens the database file the Store created (Unavailable when it cannot
  // be opened, DataLoss when it is not a database).
  static StatusOr<std::unique_ptr<JobCounter>> Open(const std::string& path);
  ~JobCounter();
  JobCounter(const JobCounter&) = delete;
  JobCounter& operator=(const JobCounter&) = delete;

  // Every (model, state) pair with at least one job, or the database error.
  // Reads the jobs_model_state index (migrations/0002), not the job rows.
  StatusOr<std::vector<JobCount>> Count();
  // Count's query.
  static constexpr const char* kCountSql =
      "SELECT model, state, COUNT(*) FROM jobs GROUP BY model, state";

 private:
  explicit JobCounter(std::unique_ptr<sqlite::Db> db);
  std::mutex mu_;
  std::unique_ptr<sqlite::Db> db_;
};

}  // namespace nightshift::scheduler
