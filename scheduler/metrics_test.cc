#include "scheduler/metrics.h"

#include <gtest/gtest.h>

#include <prometheus/metric_family.h>

#include <fstream>
#include <map>
#include <optional>

#include "common/metric_names.h"
#include "scheduler/disk_full.h"
#include "scheduler/scheduler.h"
#include "scheduler/sqlite.h"
#include "scheduler/test_util.h"

namespace nightshift::scheduler {
namespace {

namespace names = metrics::names;
using testing::Offer;
using testing::TempDir;
using testing::TokenJob;
using testing::Worker;

constexpr int64_t kLeaseMs = 10'000;

// Keeps what the scheduler sends to one worker.
class RecordingLink : public WorkerLink {
 public:
  void Send(WorkerCommand command) override { sent.push_back(std::move(command)); }
  void Close(const Status&) override {}
  // The batch of the n-th assignment.
  int64_t Batch(size_t n) const {
    size_t seen = 0;
    for (const WorkerCommand& c : sent) {
      if (c.kind == WorkerCommand::Kind::kAssign && seen++ == n) return c.batch_id;
    }
    ADD_FAILURE() << "no assignment " << n;
    return 0;
  }
  std::vector<WorkerCommand> sent;
};

// One series as a scrape reads it: a counter's or a gauge's value, a
// histogram's count and sum.
struct SampleValues {
  double value = 0;
  uint64_t count = 0;
  double sum = 0;
};

// The series of family `name` with exactly `labels`, if exported.
std::optional<SampleValues> Sample(const prometheus::Registry& registry, std::string_view name,
                                   const prometheus::Labels& labels) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      prometheus::Labels got;
      for (const prometheus::ClientMetric::Label& label : m.label) got[label.name] = label.value;
      if (got != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return SampleValues{m.counter.value, 0, 0};
        case prometheus::MetricType::Gauge:
          return SampleValues{m.gauge.value, 0, 0};
        case prometheus::MetricType::Histogram:
          return SampleValues{0, m.histogram.sample_count, m.histogram.sample_sum};
        default:
          ADD_FAILURE() << name << " is of a type the catalogue does not use";
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

class SchedulerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_.file("state.db"), &clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    SchedulerOptions options;
    options.lease_ms = kLeaseMs;
    options.heartbeat_ms = 1000;
    options.max_attempts = 2;
    options.tokenizer_cache_dir = dir_.file("tokenizers");
    options.metrics = &metrics_;
    options.allow_unknown_models = true;  // jobs are queued before their worker attaches
    scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
    ASSERT_TRUE(scheduler_->Start().ok());
  }

  SubmitReply Submit(std::vector<JobSpec> jobs, const std::string& idempotency_key = "") {
    SubmitRequest request;
    request.jobs = std::move(jobs);
    request.idempotency_key = idempotency_key;
    auto reply = scheduler_->Submit(std::move(request));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? *reply : SubmitReply{};
  }

  int64_t Attach(const std::string& id, RecordingLink* link, std::vector<int64_t> running = {}) {
    WorkerHello hello;
    hello.info = Worker(id, 1 << 20, {Offer("m")});
    hello.running_batches = std::move(running);
    auto session = scheduler_->Attach(hello, link);
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    return session.ok() ? *session : 0;
  }

  JobResult Done(int64_t batch_id, int64_t job_id, bool ok = true) {
    JobResult r;
    r.batch_id = batch_id;
    r.job_id = job_id;
    r.ok = ok;
    r.output.finish_reason = "length";
    r.error = ok ? "" : "out of memory";
    return r;
  }

  double Value(std::string_view name, const prometheus::Labels& labels) {
    auto sample = Sample(*registry_, name, labels);
    EXPECT_TRUE(sample.has_value()) << name << " has no sample with these labels";
    return sample ? sample->value : -1;
  }
  uint64_t Count(std::string_view name, const prometheus::Labels& labels) {
    auto sample = Sample(*registry_, name, labels);
    return sample ? sample->count : 0;
  }
  double Sum(std::string_view name, const prometheus::Labels& labels) {
    auto sample = Sample(*registry_, name, labels);
    return sample ? sample->sum : -1;
  }

  TempDir dir_;
  FakeClock clock_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  SchedulerMetrics metrics_{*registry_};
  std::unique_ptr<Store> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

// The names and types a scrape shows: every scheduler family of the
// catalogue once each has a series, and nothing else.
std::map<std::string, prometheus::MetricType> Exported(const prometheus::Registry& registry) {
  std::map<std::string, prometheus::MetricType> exported;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    EXPECT_TRUE(exported.emplace(family.name, family.type).second) << "twice: " << family.name;
  }
  return exported;
}

TEST_F(SchedulerMetricsTest, ExportsEverySchedulerFamilyOfTheCatalogueAndNothingElse) {
  // The unlabelled families have their series from the start.
  std::map<std::string, prometheus::MetricType> exported = Exported(*registry_);
  EXPECT_EQ(exported.count(std::string(names::kWorkersAttached)), 1u);
  EXPECT_EQ(exported.count(std::string(names::kSubmitDurationSeconds)), 1u);
  metrics_.JobsSubmitted("m", 1);
  metrics_.JobLeased("m", 1);
  metrics_.JobFinished("m", JobState::kSucceeded, 2);
  metrics_.LeaseExpired("m", "w1");
  metrics_.JobRetried("m");
  metrics_.ResultRefused("m", "w1");
  metrics_.SubmitAnswered(0.01);
  metrics_.SetWorkersAttached(1);
  metrics_.SetJobCounts({{"m", JobState::kQueued, 1}});
  metrics_.SetEtas({{"m", 5}});
  metrics_.EtaError("50", 0.1);
  exported = Exported(*registry_);
  for (const metrics::MetricDef& def : metrics::Catalogue()) {
    const auto it = exported.find(std::string(def.name));
    EXPECT_EQ(it != exported.end(), def.exporter == metrics::Exporter::kScheduler) << def.name;
    if (it != exported.end()) {
      EXPECT_EQ(it->second, def.type) << def.name;
    }
  }
  size_t scheduler_families = 0;
  for (const metrics::MetricDef& def : metrics::Catalogue()) {
    scheduler_families += def.exporter == metrics::Exporter::kScheduler;
  }
  EXPECT_EQ(exported.size(), scheduler_families);
}

TEST_F(SchedulerMetricsTest, SubmittedJobsAreCountedPerModelAndAReplayIsNot) {
  Submit({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "n")}, "key-1");
  EXPECT_EQ(Value(names::kJobsSubmittedTotal, {{"model", "m"}}), 2);
  EXPECT_EQ(Value(names::kJobsSubmittedTotal, {{"model", "n"}}), 1);
  SubmitReply replay =
      Submit({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "n")}, "key-1");
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(Value(names::kJobsSubmittedTotal, {{"model", "m"}}), 2);
}

TEST_F(SchedulerMetricsTest, QueueAndEndToEndSecondsAndOutcomesFollowEachJob) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  clock_.Advance(3'000);  // queued 3 s before a worker comes
  RecordingLink link;
  const int64_t session = Attach("w1", &link);
  EXPECT_EQ(Count(names::kJobQueueSeconds, {{"model", "m"}}), 2u);
  EXPECT_DOUBLE_EQ(Sum(names::kJobQueueSeconds, {{"model", "m"}}), 6.0);
  const int64_t batch = link.Batch(0);
  clock_.Advance(2'000);
  auto statuses = scheduler_->Results(
      "w1", session, {Done(batch, reply.job_ids[0]), Done(batch, reply.job_ids[1], false)});
  ASSERT_TRUE(statuses.ok());
  EXPECT_EQ(Value(names::kJobsFinishedTotal, {{"model", "m"}, {"outcome", "succeeded"}}), 1);
  EXPECT_EQ(Value(names::kJobsFinishedTotal, {{"model", "m"}, {"outcome", "failed"}}), 1);
  EXPECT_EQ(Count(names::kJobEndToEndSeconds, {{"model", "m"}}), 2u);
  EXPECT_DOUBLE_EQ(Sum(names::kJobEndToEndSeconds, {{"model", "m"}}), 2 * 5.0);
}

TEST_F(SchedulerMetricsTest, AHandedBackJobsQueueTimeEndsAtItsFirstLease) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  clock_.Advance(3'000);
  RecordingLink link;
  const int64_t session = Attach("w1", &link);
  EXPECT_EQ(Count(names::kJobQueueSeconds, {{"model", "m"}}), 2u);
  clock_.Advance(4'000);  // a draining worker hands the jobs back; another takes them
  ASSERT_TRUE(scheduler_->HandBack("w1", session, link.Batch(0), reply.job_ids, true).ok());
  RecordingLink other;
  Attach("w2", &other);
  other.Batch(0);  // the jobs went to w2 (a failure otherwise)
  EXPECT_EQ(Count(names::kJobQueueSeconds, {{"model", "m"}}), 2u);
  EXPECT_DOUBLE_EQ(Sum(names::kJobQueueSeconds, {{"model", "m"}}), 2 * 3.0);
}

TEST_F(SchedulerMetricsTest, ACancelledJobCountsAsCancelled) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m")});
  ASSERT_TRUE(scheduler_->CancelSubmission(reply.submission_id).ok());
  EXPECT_EQ(Value(names::kJobsFinishedTotal, {{"model", "m"}, {"outcome", "cancelled"}}), 3);
  EXPECT_EQ(Count(names::kJobEndToEndSeconds, {{"model", "m"}}), 3u);
}

TEST_F(SchedulerMetricsTest, ALeaseExpiryCountsTheExpirationAndTheRetries) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  RecordingLink link;
  const int64_t session = Attach("w1", &link);
  scheduler_->Detach("w1", session);
  clock_.Advance(kLeaseMs);
  scheduler_->Tick();
  EXPECT_EQ(Value(names::kLeaseExpirationsTotal, {{"model", "m"}, {"worker", "w1"}}), 1);
  EXPECT_EQ(Value(names::kJobRetriesTotal, {{"model", "m"}}), 2);
  // The second lost lease spends max_attempts (2): the jobs fail instead of a retry.
  RecordingLink again;
  const int64_t second = Attach("w1", &again);
  EXPECT_EQ(Count(names::kJobQueueSeconds, {{"model", "m"}}), 2u);  // a re-lease is not queue time
  scheduler_->Detach("w1", second);
  clock_.Advance(kLeaseMs);
  scheduler_->Tick();
  EXPECT_EQ(Value(names::kLeaseExpirationsTotal, {{"model", "m"}, {"worker", "w1"}}), 2);
  EXPECT_EQ(Value(names::kJobRetriesTotal, {{"model", "m"}}), 2);
  EXPECT_EQ(Value(names::kJobsFinishedTotal, {{"model", "m"}, {"outcome", "failed"}}), 2);
  EXPECT_EQ(scheduler_->GetJob(reply.job_ids[0])->job.state, JobState::kFailed);
}

TEST_F(SchedulerMetricsTest, AReattachWithoutItsBatchCountsAsALostLease) {
  Submit({TokenJob("a", "m")});
  RecordingLink link;
  const int64_t session = Attach("w1", &link);
  scheduler_->Detach("w1", session);
  RecordingLink again;
  Attach("w1", &again);  // it no longer runs the batch
  EXPECT_EQ(Value(names::kLeaseExpirationsTotal, {{"model", "m"}, {"worker", "w1"}}), 1);
  EXPECT_EQ(Value(names::kJobRetriesTotal, {{"model", "m"}}), 1);
}

TEST_F(SchedulerMetricsTest, DuplicateAndLateResultsAreCountedAsRefused) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  RecordingLink link;
  const int64_t session = Attach("w1", &link);
  const int64_t batch = link.Batch(0);
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(batch, reply.job_ids[0])).ok());
  EXPECT_FALSE(Sample(*registry_, names::kResultsRefusedTotal, {{"model", "m"}, {"worker", "w1"}}));
  EXPECT_EQ(scheduler_->Result("w1", session, Done(batch, reply.job_ids[0])).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(Value(names::kResultsRefusedTotal, {{"model", "m"}, {"worker", "w1"}}), 1);
  ASSERT_TRUE(scheduler_->CancelJob(reply.job_ids[1]).ok());
  EXPECT_EQ(scheduler_->Result("w1", session, Done(batch, reply.job_ids[1])).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Value(names::kResultsRefusedTotal, {{"model", "m"}, {"worker", "w1"}}), 2);
  EXPECT_EQ(Value(names::kJobsFinishedTotal, {{"model", "m"}, {"outcome", "succeeded"}}), 1);
}

TEST_F(SchedulerMetricsTest, GaugesGiveAttachedWorkersAndEachModelsEta) {
  EXPECT_EQ(scheduler_->Gauges().workers_attached, 0);
  RecordingLink link;
  const int64_t session = Attach("w1", &link);  // Offer: 1.5 s a pass
  auto reply = Submit({TokenJob("a", "m", 4, 8)});
  Submit({TokenJob("b", "unserved")});  // waits for a worker: no ETA
  LiveGauges gauges = scheduler_->Gauges();
  EXPECT_EQ(gauges.workers_attached, 1);
  ASSERT_EQ(gauges.eta_seconds.size(), 1u);
  EXPECT_DOUBLE_EQ(gauges.eta_seconds.at("m"), 8 * 1.5);
  // Queued beside the running batch: it tops it up at its first boundary,
  // joins at the second and ends (after 2 + 4 passes) before it: still 8 passes.
  auto queued = Submit({TokenJob("c", "m", 4, 4)});
  EXPECT_DOUBLE_EQ(scheduler_->Gauges().eta_seconds.at("m"), 8 * 1.5);
  // The first is cancelled: the second runs at once.
  ASSERT_TRUE(scheduler_->CancelSubmission(reply.submission_id).ok());
  EXPECT_DOUBLE_EQ(scheduler_->Gauges().eta_seconds.at("m"), 4 * 1.5);
  // Nothing left: no ETA.
  ASSERT_TRUE(scheduler_->CancelSubmission(queued.submission_id).ok());
  scheduler_->Detach("w1", session);
  gauges = scheduler_->Gauges();
  EXPECT_EQ(gauges.workers_attached, 0);
  EXPECT_TRUE(gauges.eta_seconds.empty());
}

TEST_F(SchedulerMetricsTest, SetEtasRemovesTheSeriesOfModelsWithoutAnEta) {
  metrics_.SetEtas({{"m", 12.0}, {"n", 3.0}});
  EXPECT_EQ(Value(names::kSubmissionEtaSeconds, {{"model", "m"}}), 12.0);
  metrics_.SetEtas({{"n", 2.0}});
  EXPECT_FALSE(Sample(*registry_, names::kSubmissionEtaSeconds, {{"model", "m"}}));
  EXPECT_EQ(Value(names::kSubmissionEtaSeconds, {{"model", "n"}}), 2.0);
}

TEST_F(SchedulerMetricsTest, JobCounterCountsTheDatabaseByModelAndState) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "n")});
  RecordingLink link;
  const int64_t session = Attach("w1", &link);
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(link.Batch(0), reply.job_ids[0])).ok());
  auto counter = JobCounter::Open(dir_.file("state.db"));
  ASSERT_TRUE(counter.ok()) << counter.status().ToString();
  auto counts = (*counter)->Count();
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  metrics_.SetJobCounts(*counts);
  EXPECT_EQ(Value(names::kJobs, {{"model", "m"}, {"state", "succeeded"}}), 1);
  EXPECT_EQ(Value(names::kJobs, {{"model", "m"}, {"state", "leased"}}), 1);
  EXPECT_EQ(Value(names::kJobs, {{"model", "n"}, {"state", "queued"}}), 1);
  // A pair that empties reads 0 instead of keeping its last value.
  ASSERT_TRUE(scheduler_->CancelJob(reply.job_ids[2]).ok());
  metrics_.SetJobCounts(*(*counter)->Count());
  EXPECT_EQ(Value(names::kJobs, {{"model", "n"}, {"state", "queued"}}), 0);
  EXPECT_EQ(Value(names::kJobs, {{"model", "n"}, {"state", "cancelled"}}), 1);
}

TEST_F(SchedulerMetricsTest, WorkersAttachedAndSubmitDurationAreRecorded) {
  metrics_.SetWorkersAttached(3);
  EXPECT_EQ(Value(names::kWorkersAttached, {}), 3);
  metrics_.SubmitAnswered(0.004);
  metrics_.SubmitAnswered(0.2);
  EXPECT_EQ(Count(names::kSubmitDurationSeconds, {}), 2u);
  EXPECT_DOUBLE_EQ(Sum(names::kSubmitDurationSeconds, {}), 0.204);
}

TEST_F(SchedulerMetricsTest, DiskFullErrorsAreCountedFromTheProcessTotal) {
  EXPECT_EQ(Value(names::kSchedulerDiskFullTotal, {}), 0);
  const int64_t before = DiskFullCount();
  (void)DiskFull("step: database or disk is full");
  (void)DiskFull("writing the upload: No space left on device");
  metrics_.SetDiskFullTotal(DiskFullCount() - before);
  EXPECT_EQ(Value(names::kSchedulerDiskFullTotal, {}), 2);
  metrics_.SetDiskFullTotal(DiskFullCount() - before);  // a scrape with nothing new
  EXPECT_EQ(Value(names::kSchedulerDiskFullTotal, {}), 2);
  metrics_.SetDiskFullTotal(1);  // never goes down
  EXPECT_EQ(Value(names::kSchedulerDiskFullTotal, {}), 2);
}

TEST_F(SchedulerMetricsTest, StalledHttpClientsAreCounted) {
  EXPECT_EQ(Value(names::kHttpClientTimeoutsTotal, {}), 0);
  metrics_.HttpClientTimedOut();
  metrics_.HttpClientTimedOut();
  EXPECT_EQ(Value(names::kHttpClientTimeoutsTotal, {}), 2);
}

TEST_F(SchedulerMetricsTest, JobCounterReadsAnIndexNotTheJobRows) {
  Submit({TokenJob("a", "m")});
  auto db = sqlite::Db::Open(dir_.file("state.db"), 1000);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  sqlite::Query plan(**db, std::string("EXPLAIN QUERY PLAN ") + JobCounter::kCountSql);
  std::string details;
  while (plan.Next()) details += plan.Text(3) + "\n";
  ASSERT_TRUE(plan.status().ok()) << plan.status().ToString();
  EXPECT_NE(details.find("COVERING INDEX jobs_model_state"), std::string::npos) << details;
}

TEST(JobCounterTest, AFileThatIsNotADatabaseIsDataLoss) {
  TempDir dir;
  std::ofstream(dir.file("junk.db")) << std::string(4096, 'x');
  auto counter = JobCounter::Open(dir.file("junk.db"));
  ASSERT_TRUE(counter.ok()) << counter.status().ToString();  // SQLite reads the header lazily
  EXPECT_EQ((*counter)->Count().status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace nightshift::scheduler
