#include "scheduler/metrics.h"

#include "scheduler/sqlite.h"

namespace nightshift::scheduler {

namespace names = metrics::names;

SchedulerMetrics::SchedulerMetrics(prometheus::Registry& registry)
    : submitted_(registry, names::kJobsSubmittedTotal),
      finished_(registry, names::kJobsFinishedTotal),
      queue_seconds_(registry, names::kJobQueueSeconds),
      end_to_end_seconds_(registry, names::kJobEndToEndSeconds),
      retries_(registry, names::kJobRetriesTotal),
      lease_expirations_(registry, names::kLeaseExpirationsTotal),
      results_refused_(registry, names::kResultsRefusedTotal),
      jobs_(registry, names::kJobs),
      etas_(registry, names::kSubmissionEtaSeconds),
      eta_errors_(registry, names::kEtaRelativeErrorRatio),
      workers_attached_(
          metrics::CatalogueFamily<prometheus::Gauge>(registry, names::kWorkersAttached).With({})),
      submit_seconds_(
          metrics::CatalogueFamily<prometheus::Histogram>(registry, names::kSubmitDurationSeconds)
              .With({})),
      disk_full_(
          metrics::CatalogueFamily<prometheus::Counter>(registry, names::kSchedulerDiskFullTotal)
              .With({})),
      http_timeouts_(
          metrics::CatalogueFamily<prometheus::Counter>(registry, names::kHttpClientTimeoutsTotal)
              .With({})) {}

void SchedulerMetrics::JobsSubmitted(const std::string& model, int64_t jobs) {
  submitted_.With({{"model", model}}).Increment(static_cast<double>(jobs));
}

void SchedulerMetrics::JobLeased(const std::string& model, double queue_seconds) {
  queue_seconds_.With({{"model", model}}).Observe(queue_seconds);
}

void SchedulerMetrics::JobFinished(const std::string& model, JobState state,
                                   double end_to_end_seconds) {
  if (!IsTerminal(state)) return;
  finished_.With({{"model", model}, {"outcome", JobStateName(state)}}).Increment();
  end_to_end_seconds_.With({{"model", model}}).Observe(end_to_end_seconds);
}

void SchedulerMetrics::LeaseExpired(const std::string& model, const std::string& worker) {
  lease_expirations_.With({{"model", model}, {"worker", worker}}).Increment();
}

void SchedulerMetrics::JobRetried(const std::string& model) {
  retries_.With({{"model", model}}).Increment();
}

void SchedulerMetrics::ResultRefused(const std::string& model, const std::string& worker) {
  results_refused_.With({{"model", model}, {"worker", worker}}).Increment();
}

void SchedulerMetrics::SubmitAnswered(double seconds) { submit_seconds_.Observe(seconds); }

void SchedulerMetrics::HttpClientTimedOut() { http_timeouts_.Increment(); }

void SchedulerMetrics::EtaError(const std::string& progress, double ratio) {
  eta_errors_.With({{"progress", progress}}).Observe(ratio);
}

void SchedulerMetrics::SetDiskFullTotal(int64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  const double more = static_cast<double>(total) - disk_full_.Value();
  if (more > 0) disk_full_.Increment(more);
}

void SchedulerMetrics::SetWorkersAttached(int64_t workers) {
  workers_attached_.Set(static_cast<double>(workers));
}

void SchedulerMetrics::SetJobCounts(const std::vector<JobCount>& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::pair<std::string, JobState>> now;
  for (const JobCount& c : counts) {
    jobs_.With({{"model", c.model}, {"state", JobStateName(c.state)}})
        .Set(static_cast<double>(c.jobs));
    now.insert({c.model, c.state});
  }
  for (const auto& [model, state] : counted_) {
    if (now.count({model, state}) == 0)
      jobs_.With({{"model", model}, {"state", JobStateName(state)}}).Set(0);
  }
  counted_.insert(now.begin(), now.end());
}

void SchedulerMetrics::SetEtas(const std::map<std::string, double>& eta_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& model : eta_models_) {
    if (eta_seconds.count(model) == 0) etas_.Remove(&etas_.With({{"model", model}}));
  }
  eta_models_.clear();
  for (const auto& [model, seconds] : eta_seconds) {
    etas_.With({{"model", model}}).Set(seconds);
    eta_models_.insert(model);
  }
}

// ---------------------------------------------------------------- JobCounter

JobCounter::JobCounter(std::unique_ptr<sqlite::Db> db) : db_(std::move(db)) {}

JobCounter::~JobCounter() = default;

StatusOr<std::unique_ptr<JobCounter>> JobCounter::Open(const std::string& path) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Db> db, sqlite::Db::Open(path, 5000));
  return std::unique_ptr<JobCounter>(new JobCounter(std::move(db)));
}

StatusOr<std::vector<JobCount>> JobCounter::Count() {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite::Query q(*db_, kCountSql);
  std::vector<JobCount> counts;
  while (q.Next()) {
    NS_ASSIGN_OR_RETURN(JobState state, ParseJobState(q.Text(1)));
    counts.push_back({q.Text(0), state, q.Int(2)});
  }
  NS_RETURN_IF_ERROR(q.status());
  return counts;
}

}  // namespace nightshift::scheduler
