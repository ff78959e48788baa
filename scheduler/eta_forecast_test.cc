// The ETA against the run it predicts: the real Scheduler (policy, store,
// fleet, live ETA) on a fake clock, with emulated workers that behave like
// the worker daemon: a pass costs base + per-token seconds for the tokens it
// feeds, a pass report goes out at each boundary and the results after it,
// the next pass starts at once (so a top-up sent in answer joins one
// boundary later), and an idle worker starts the moment a batch arrives.
// Each case samples the submission's ETA at every pass boundary and checks
// the predicted finish (now + ETA) against the finish the run really had.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "scheduler/scheduler.h"
#include "scheduler/test_util.h"
#include "tests/testing/paths.h"

namespace nightshift::scheduler {
namespace {

using testing::TempDir;
using testing::TinyTokenizer;

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr int64_t kKvBytesPerToken = 1000;

struct WorkerShape {
  std::string id;
  double base_seconds = 0.5;         // what a pass really costs
  double seconds_per_token = 0.002;  // and per token it feeds
  double advertised_seconds = 0.5;   // the prior it advertises
  int64_t kv_budget_tokens = 120;
  int64_t pass_token_budget = 64;
  int32_t max_batch_jobs = 0;
};

// One emulated worker daemon.
class EmulatedWorker : public WorkerLink {
 public:
  EmulatedWorker(WorkerShape shape, std::map<std::string, int64_t>* stop_after)
      : shape_(std::move(shape)), stop_after_(stop_after) {}

  void Send(WorkerCommand command) override {
    if (command.kind == WorkerCommand::Kind::kAssign) arrived_.push_back(std::move(command));
  }
  void Close(const Status&) override {}

  WorkerInfo Info() const {
    WorkerInfo info = testing::Worker(shape_.id, shape_.kv_budget_tokens * kKvBytesPerToken,
                                      {testing::Offer("m", kKvBytesPerToken)});
    info.max_batch_jobs = shape_.max_batch_jobs;
    ModelOffer& offer = info.models[0];
    offer.seconds_per_pass = shape_.advertised_seconds;
    offer.pass_token_budget = shape_.pass_token_budget;
    offer.tokenizer_hash = TokenizerHash(TinyTokenizer());
    return info;
  }

  void Attach(Scheduler& scheduler) {
    WorkerHello hello;
    hello.info = Info();
    auto session = scheduler.Attach(hello, this);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    session_ = *session;
    ASSERT_TRUE(scheduler.UploadTokenizer(shape_.id, session_, TinyTokenizer()).ok());
  }

  double pass_end() const { return pass_end_; }
  int64_t passes() const { return passes_; }

  // An idle worker starts on what arrived, at `now`.
  void StartIfIdle(Scheduler& scheduler, double now) {
    while (batch_.empty() && !arrived_.empty()) {
      std::vector<WorkerCommand> commands = std::move(arrived_);
      arrived_.clear();
      Join(scheduler, commands);  // a hand-back may bring more
    }
    if (!batch_.empty() && pass_end_ == kNever) StartPass(now);
  }

  // The pass in flight ends at `now`: report, results, the next pass.
  void Boundary(Scheduler& scheduler, FakeClock& clock, double now) {
    PassProgress p;
    p.batch_id = batch_id_;
    p.pass_index = passes_++;
    p.seconds = pass_seconds_;
    p.tokens = pass_tokens_;
    p.sequences = static_cast<int32_t>(batch_.size());
    p.mode = "streaming";
    std::vector<JobResult> results;
    std::vector<Running> left;
    for (Running& r : batch_) {
      r.started = true;
      bool done = true;
      if (!r.classification) {
        ++r.generated;
        p.generated[r.id] = r.generated;
        done = r.generated >= r.length;
      }
      if (!done) {
        left.push_back(r);
        continue;
      }
      JobResult result;
      result.batch_id = batch_id_;
      result.job_id = r.id;
      result.ok = true;
      if (r.classification) {
        result.output.finish_reason = "label";
        result.output.labels.push_back({"yes", -0.1});
      } else {
        result.output.completion_tokens = r.generated;
        result.output.finish_reason = r.generated < r.max_tokens ? "stop" : "length";
      }
      results.push_back(std::move(result));
    }
    batch_ = std::move(left);
    int64_t kv = 0;
    for (const Running& r : batch_) kv += r.kv_tokens;
    p.free_kv_bytes = (shape_.kv_budget_tokens - kv) * kKvBytesPerToken;
    // As the daemon reports it: what arrived during the pass is not added yet.
    p.free_pass_tokens =
        std::max<int64_t>(0, shape_.pass_token_budget - static_cast<int64_t>(batch_.size()));
    p.want_top_up = p.free_kv_bytes > 0 || p.free_pass_tokens > 0;
    clock.Set(static_cast<int64_t>(std::llround(now * 1000)) + start_ms_);
    // What arrived during the pass joins now; what answers this report, next time.
    std::vector<WorkerCommand> during = std::move(arrived_);
    arrived_.clear();
    ASSERT_TRUE(scheduler.Progress(shape_.id, session_, p).ok());
    if (!results.empty()) {
      ASSERT_TRUE(scheduler.Results(shape_.id, session_, results).ok());
    }
    Join(scheduler, during);
    pass_end_ = kNever;
    StartIfIdle(scheduler, now);
  }

  void set_start_ms(int64_t ms) { start_ms_ = ms; }

 private:
  struct Running {
    int64_t id = 0;
    bool classification = false;
    int64_t max_tokens = 1;
    int64_t length = 1;  // passes it really runs (an early stop ends it sooner)
    int64_t generated = 0;
    int64_t kv_tokens = 0;
    int64_t pass_tokens = 0;
    bool started = false;
  };

  static int64_t FirstPassTokens(const Job& j) {
    return j.kv_tokens - std::max<int64_t>(PassesNeeded(j.spec) - 1, 0);
  }

  // Adds the jobs as the engine does, handing back those that do not fit
  // the KV budget or the next pass's tokens: a report does not count the
  // top-ups that arrived during the pass, so the scheduler may send more than
  // there is room for.
  void Join(Scheduler& scheduler, const std::vector<WorkerCommand>& commands) {
    for (const WorkerCommand& c : commands) {
      if (batch_.empty()) batch_id_ = c.batch_id;
      std::vector<int64_t> handed_back;
      for (const Job& j : c.jobs) {
        int64_t kv = 0, tokens = 0;
        for (const Running& r : batch_) {
          kv += r.kv_tokens;
          tokens += r.started ? 1 : r.pass_tokens;
        }
        const int64_t job_kv = PassesNeeded(j.spec) > 1 ? j.kv_tokens : 0;
        if (kv + job_kv > shape_.kv_budget_tokens ||
            (!batch_.empty() && tokens + FirstPassTokens(j) > shape_.pass_token_budget)) {
          handed_back.push_back(j.id);
          continue;
        }
        Running r;
        r.id = j.id;
        r.classification = !j.spec.labels.empty();
        r.max_tokens = PassesNeeded(j.spec);
        r.length = r.max_tokens;
        auto stop = stop_after_->find(j.spec.custom_id);
        if (stop != stop_after_->end()) r.length = std::min(r.length, stop->second);
        r.kv_tokens = r.max_tokens > 1 ? j.kv_tokens : 0;
        r.pass_tokens = FirstPassTokens(j);
        batch_.push_back(r);
      }
      if (!handed_back.empty()) {
        ASSERT_TRUE(scheduler.HandBack(shape_.id, session_, c.batch_id, handed_back, false).ok());
      }
    }
  }

  void StartPass(double now) {
    pass_tokens_ = 0;
    for (const Running& r : batch_) pass_tokens_ += r.started ? 1 : r.pass_tokens;
    pass_seconds_ =
        shape_.base_seconds + shape_.seconds_per_token * static_cast<double>(pass_tokens_);
    pass_end_ = now + pass_seconds_;
  }

  WorkerShape shape_;
  std::map<std::string, int64_t>* stop_after_;
  int64_t session_ = 0;
  std::vector<WorkerCommand> arrived_;
  std::vector<Running> batch_;
  int64_t batch_id_ = 0;
  int64_t passes_ = 0;
  double pass_end_ = kNever;
  double pass_seconds_ = 0;
  int64_t pass_tokens_ = 0;
  int64_t start_ms_ = 0;
};

// 8-, 16- and 24-token completions and two-label classifications, mixed.
std::vector<JobSpec> MixedSubmission(int completions, int classifications) {
  std::vector<JobSpec> jobs;
  const int lengths[] = {8, 16, 24};
  for (int i = 0; i < completions + classifications; ++i) {
    const bool classify = i % ((completions + classifications) / classifications) == 2;
    JobSpec spec = testing::TokenJob("job-" + std::to_string(i), "m", 0, 0);
    spec.prompt_kind = PromptKind::kText;
    spec.prompt_text = "story number " + std::to_string(i) + " begins";
    if (classify) {
      spec.labels = {" yes", " no"};
    } else {
      spec.max_new_tokens = lengths[i % 3];
    }
    jobs.push_back(std::move(spec));
  }
  return jobs;
}

struct Sample {
  double at = 0;   // seconds since the submission
  double eta = 0;  // seconds
  double done_fraction = 0;
};

struct Played {
  double finish = 0;  // seconds from submission to its end
  std::vector<Sample> samples;
  int missing = 0;  // samples without an ETA while jobs remained
};

class EtaForecastTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_.file("state.db"), &clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    SchedulerOptions options;
    options.lease_ms = 3'600'000;
    options.tokenizer_cache_dir = dir_.file("tokenizers");
    scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
    ASSERT_TRUE(scheduler_->Start().ok());
  }

  // Runs `jobs` on `shapes` (the ones with a join time attach then, when
  // that many seconds passed) and samples the ETA at every boundary.
  Played Play(const std::vector<WorkerShape>& shapes, const std::vector<double>& attach_at,
              std::vector<JobSpec> jobs) {
    Played run;
    const int64_t start_ms = clock_.NowMs();
    std::vector<std::unique_ptr<EmulatedWorker>> workers;
    for (size_t i = 0; i < shapes.size(); ++i) {
      workers.push_back(std::make_unique<EmulatedWorker>(shapes[i], &stop_after_));
      workers.back()->set_start_ms(start_ms);
      if (attach_at[i] <= 0) workers.back()->Attach(*scheduler_);
    }
    SubmitRequest request;
    request.jobs = std::move(jobs);
    auto reply = scheduler_->Submit(std::move(request));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return run;
    for (auto& w : workers) w->StartIfIdle(*scheduler_, 0);
    std::vector<bool> attached(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) attached[i] = attach_at[i] <= 0;
    auto sample = [&](double now) {
      auto status = scheduler_->GetSubmission(reply->submission_id);
      EXPECT_TRUE(status.ok());
      const Submission& s = status->submission;
      if (s.done()) return true;
      if (!status->eta_seconds) {
        ++run.missing;
      } else {
        run.samples.push_back({now, *status->eta_seconds,
                               static_cast<double>(s.counts.total() - s.counts.unfinished()) /
                                   static_cast<double>(s.counts.total())});
      }
      return false;
    };
    double now = 0;
    sample(now);
    for (int events = 0; events < 100'000; ++events) {
      double next = kNever;
      EmulatedWorker* due = nullptr;
      for (auto& w : workers) {
        if (w->pass_end() < next) {
          next = w->pass_end();
          due = w.get();
        }
      }
      // A worker that attaches before the next boundary attaches first.
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (attached[i] || attach_at[i] > next) continue;
        now = attach_at[i];
        clock_.Set(start_ms + static_cast<int64_t>(std::llround(now * 1000)));
        workers[i]->Attach(*scheduler_);
        attached[i] = true;
        for (auto& w : workers) w->StartIfIdle(*scheduler_, now);
        due = nullptr;
        break;
      }
      if (due == nullptr) {
        if (next == kNever) break;
        continue;
      }
      now = next;
      due->Boundary(*scheduler_, clock_, now);
      for (auto& w : workers) w->StartIfIdle(*scheduler_, now);
      if (sample(now)) {
        run.finish = now;
        return run;
      }
    }
    ADD_FAILURE() << "the submission did not finish";
    return run;
  }

  // Every sample from `from` seconds to 90% of the run predicts the finish
  // within `tolerance` of the run's length.
  static void ExpectWithin(const Played& run, double tolerance, double from = 0) {
    ASSERT_GT(run.finish, 0);
    EXPECT_EQ(run.missing, 0) << "samples without an ETA";
    int checked = 0;
    for (const Sample& s : run.samples) {
      if (s.at < from || s.at > 0.9 * run.finish) continue;
      ++checked;
      EXPECT_NEAR(s.at + s.eta, run.finish, tolerance * run.finish)
          << "at " << s.at << " s (" << s.done_fraction * 100 << "% done): ETA " << s.eta
          << " s, really " << run.finish - s.at << " s";
    }
    EXPECT_GT(checked, 10);
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<std::string, int64_t> stop_after_;  // custom_id -> passes it really runs
};

TEST_F(EtaForecastTest, OneWorkerWithAKvBoundBatchIsPredictedWithin5Percent) {
  // 120 KV positions hold four or five of the completions at once.
  const Played run = Play({{"w1"}}, {0}, MixedSubmission(24, 8));
  ExpectWithin(run, 0.05);
}

TEST_F(EtaForecastTest, TwoWorkersSharingTheQueueArePredictedWithin5Percent) {
  WorkerShape fast{"fast"};
  WorkerShape slow{"slow", 0.8, 0.002, 0.8};
  const Played run = Play({fast, slow}, {0, 0}, MixedSubmission(36, 12));
  ExpectWithin(run, 0.05);
}

TEST_F(EtaForecastTest, AWorkerThatJoinsHalfwayIsPredictedWithin5PercentFromThen) {
  // Alone, w1 would need about 60 s; w2 attaches at 30 s.
  const Played run = Play({{"w1"}, {"w2"}}, {0, 30}, MixedSubmission(36, 12));
  ExpectWithin(run, 0.05, 30);
  // Before it attached the ETA could not know of it: it was later than the run.
  ASSERT_FALSE(run.samples.empty());
  EXPECT_GT(run.samples.front().eta, run.finish * 1.1);
}

TEST_F(EtaForecastTest, AWrongPriorIsCorrectedByTheMeasuredPasses) {
  WorkerShape w{"w1"};
  w.advertised_seconds = 1.0;  // twice what a pass takes
  const Played run = Play({w}, {0}, MixedSubmission(24, 8));
  ASSERT_FALSE(run.samples.empty());
  EXPECT_GT(run.samples.front().eta, run.finish * 1.5);  // the prior alone
  ExpectWithin(run, 0.05, 3 * 0.6);                      // from the third pass on
}

TEST_F(EtaForecastTest, EarlyStopsShortenTheEstimateAsFinishedJobsShowThem) {
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 24; ++i) {
    JobSpec spec = testing::TokenJob("gen-" + std::to_string(i), "m", 6, 24);
    jobs.push_back(spec);
    stop_after_[spec.custom_id] = 4 + (i * 7) % 9;  // EOS after 4 to 12 of 24 tokens
  }
  const Played run = Play({{"w1"}}, {0}, std::move(jobs));
  ASSERT_FALSE(run.samples.empty());
  // Before any job ended, every one is taken to run its 24 tokens.
  EXPECT_GT(run.samples.front().eta, run.finish * 1.5);
  // Once 30% of them are done, the stops they showed bring the ETA near the run.
  for (const Sample& s : run.samples) {
    if (s.done_fraction < 0.3 || s.at > 0.9 * run.finish) continue;
    EXPECT_NEAR(s.at + s.eta, run.finish, 0.15 * run.finish)
        << "at " << s.at << " s (" << s.done_fraction * 100 << "% done)";
  }
}

}  // namespace
}  // namespace nightshift::scheduler
