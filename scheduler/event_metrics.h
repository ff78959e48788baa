// The scheduler's events as metrics: jobs submitted, leased for the first
// time, finished, leases lost, results refused, the errors of the ETAs shown. Turns the core's job
// changes into SchedulerMetrics calls, looking up what a change does not carry (a job's model and
// times) in the store.
//
// Every method is a no-op without metrics. Thread-safety: as the Fleet it
// reads (the Scheduler calls it with its mutex held); SchedulerMetrics and
// the store are thread-safe themselves.
#pragma once

#include <string>
#include <vector>

#include "scheduler/eta_tracker.h"
#include "scheduler/fleet.h"
#include "scheduler/store.h"

namespace nightshift::scheduler {

class SchedulerMetrics;

class EventMetrics {
 public:
  // Neither is owned; both must outlive this object. `metrics` may be null.
  EventMetrics(Store* store, SchedulerMetrics* metrics) : store_(store), metrics_(metrics) {}

  // A new (not replayed) submission stored these jobs.
  void Submitted(const std::vector<NewJob>& jobs);
  // `job` was just leased; its queue time ends at its first lease only (a
  // lease after a lost one or a hand-back is not observed again).
  void Leased(const Job& job);
  // The changes that reached a terminal state.
  void Finished(const std::vector<JobChange>& changes);
  // Batches of `fleet` whose lease was lost, and their jobs queued again.
  // Call before the fleet forgets them.
  void LostLeases(const std::vector<JobChange>& changes, const Fleet& fleet);
  // Jobs of `fleet`'s batches a worker handed back because they could not
  // run there: those queued again count as retries. Call before the fleet
  // forgets them.
  void Retried(const std::vector<JobChange>& changes, const Fleet& fleet);
  // The errors of the ETAs a submission that just ended showed.
  void EtaErrors(const std::vector<EtaError>& errors);
  // Results of `worker_id` the store refused (duplicates and late ones).
  void Refused(const std::string& worker_id, const std::vector<JobResult>& results,
               const std::vector<ResultOutcome>& outcomes);

 private:
  Store* store_;
  SchedulerMetrics* metrics_;
};

}  // namespace nightshift::scheduler
