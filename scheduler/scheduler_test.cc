#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "scheduler/test_util.h"
#include "tests/testing/paths.h"

namespace nightshift::scheduler {
namespace {

using testing::Offer;
using testing::TempDir;
using testing::TinyTokenizer;
using testing::TokenJob;
using testing::Worker;

constexpr int64_t kLeaseMs = 10'000;

class FakeLink : public WorkerLink {
 public:
  void Send(WorkerCommand command) override { sent.push_back(std::move(command)); }
  void Close(const Status& why) override {
    closed = true;
    close_status = why;
  }
  std::vector<WorkerCommand> Of(WorkerCommand::Kind kind) const {
    std::vector<WorkerCommand> out;
    for (const auto& c : sent) {
      if (c.kind == kind) out.push_back(c);
    }
    return out;
  }
  std::vector<WorkerCommand> sent;
  bool closed = false;
  Status close_status;
};

class FakeWatcher : public SubmissionWatcher {
 public:
  void OnUpdate(const SubmissionUpdate& update) override { updates.push_back(update); }
  std::vector<SubmissionUpdate> updates;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_.file("state.db"), &clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    NewScheduler();
  }

  void NewScheduler() {
    SchedulerOptions options;
    options.lease_ms = kLeaseMs;
    options.heartbeat_ms = 1000;
    options.max_attempts = 2;
    options.tokenizer_cache_dir = dir_.file("tokenizers");
    // Most tests queue jobs before their worker attaches.
    options.allow_unknown_models = allow_unknown_models_;
    scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
    ASSERT_TRUE(scheduler_->Start().ok());
  }

  SubmitReply Submit(std::vector<JobSpec> jobs) {
    SubmitRequest request;
    request.jobs = std::move(jobs);
    auto reply = scheduler_->Submit(std::move(request));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? *reply : SubmitReply{};
  }

  int64_t Attach(const WorkerInfo& info, FakeLink* link, std::vector<int64_t> running = {}) {
    WorkerHello hello;
    hello.info = info;
    hello.running_batches = std::move(running);
    auto session = scheduler_->Attach(hello, link);
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    return session.ok() ? *session : 0;
  }

  Job GetJob(int64_t id) {
    auto view = scheduler_->GetJob(id);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    return view.ok() ? view->job : Job{};
  }

  PassProgress Pass(int64_t batch_id, int64_t index, double seconds) {
    PassProgress p;
    p.batch_id = batch_id;
    p.pass_index = index;
    p.seconds = seconds;
    p.sequences = 1;
    p.mode = "streaming";
    return p;
  }

  JobResult Done(int64_t batch_id, int64_t job_id) {
    JobResult r;
    r.batch_id = batch_id;
    r.job_id = job_id;
    r.ok = true;
    r.output.text = "answer";
    r.output.finish_reason = "length";
    return r;
  }

  bool allow_unknown_models_ = true;
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, JobsWaitForAWorkerThenGoOutInOneBatchAfterTheWelcome) {
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m")});
  EXPECT_EQ(reply.waiting_for_tokenizer, 3);
  EXPECT_EQ(GetJob(reply.job_ids[0]).reason, "waiting for a worker that serves m");
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  EXPECT_EQ(session, 1);
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(link.sent[0].kind, WorkerCommand::Kind::kWelcome);
  EXPECT_EQ(link.sent[0].session, 1);
  EXPECT_EQ(link.sent[0].lease_ms, kLeaseMs);
  const WorkerCommand& assign = link.sent[1];
  ASSERT_EQ(assign.kind, WorkerCommand::Kind::kAssign);
  EXPECT_FALSE(assign.top_up);
  EXPECT_EQ(assign.model, "m");
  EXPECT_EQ(assign.lease_expires_at_ms, clock_.NowMs() + kLeaseMs);
  ASSERT_EQ(assign.jobs.size(), 3u);
  EXPECT_EQ(assign.jobs[0].tokens.prompt, TokenJob("a", "m").prompt_token_ids);
  Job a = GetJob(reply.job_ids[0]);
  EXPECT_EQ(a.state, JobState::kLeased);
  EXPECT_EQ(a.reason, "");
}

TEST_F(SchedulerTest, WatcherSeesTheWholeLifeOfASubmission) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m", 4, 2), TokenJob("b", "m", 4, 2)});
  EXPECT_EQ(reply.waiting_for_tokenizer, 0);
  FakeWatcher watcher;
  auto watch = scheduler_->Watch(reply.submission_id, &watcher);
  ASSERT_TRUE(watch.ok());
  ASSERT_EQ(watcher.updates.size(), 1u);  // the current snapshot first
  EXPECT_EQ(watcher.updates[0].status.submission.counts.leased, 2);
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;

  ASSERT_TRUE(scheduler_->Progress("w1", session, Pass(batch, 0, 1.5)).ok());
  const SubmissionUpdate& running = watcher.updates.back();
  EXPECT_EQ(running.status.submission.counts.running, 2);
  EXPECT_EQ(running.changes.size(), 2u);
  ASSERT_EQ(running.status.batches.size(), 1u);
  EXPECT_EQ(running.status.batches[0].passes_done, 1);
  EXPECT_DOUBLE_EQ(running.status.batches[0].seconds_per_pass, 1.5);
  EXPECT_EQ(running.status.batches[0].mode, "streaming");

  ASSERT_TRUE(scheduler_->Result("w1", session, Done(batch, reply.job_ids[0])).ok());
  EXPECT_FALSE(watcher.updates.back().status.submission.done());
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(batch, reply.job_ids[1])).ok());
  const SubmissionUpdate& last = watcher.updates.back();
  EXPECT_TRUE(last.status.submission.done());
  EXPECT_EQ(last.status.submission.counts.succeeded, 2);
  EXPECT_EQ(last.status.eta_seconds, 0.0);
  ASSERT_EQ(last.changes.size(), 1u);
  EXPECT_EQ(last.changes[0].to, JobState::kSucceeded);
  scheduler_->Unwatch(*watch);
  // The duplicate is refused and counted.
  EXPECT_EQ(scheduler_->Result("w1", session, Done(batch, reply.job_ids[1])).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(scheduler_->counters().duplicate_results, 1);
  EXPECT_EQ(scheduler_->Watch(999, &watcher).status().code(), StatusCode::kNotFound);
}

TEST_F(SchedulerTest, PromptTokensOfASubmissionOnlyWhenAsked) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  JobResult a = Done(batch, reply.job_ids[0]);
  a.output.prompt_tokens = 40;
  a.output.cached_prompt_tokens = 32;
  ASSERT_TRUE(scheduler_->Result("w1", session, a).ok());
  auto plain = scheduler_->GetSubmission(reply.submission_id);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->prompt_tokens.has_value());
  auto asked = scheduler_->GetSubmission(reply.submission_id, /*with_prompt_tokens=*/true);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  ASSERT_TRUE(asked->prompt_tokens.has_value());
  EXPECT_EQ(asked->prompt_tokens->jobs, 1);
  EXPECT_EQ(asked->prompt_tokens->prompt_tokens, 40);
  EXPECT_EQ(asked->prompt_tokens->cached_prompt_tokens, 32);
  EXPECT_EQ(asked->submission.counts.leased + asked->submission.counts.running, 1);
  EXPECT_EQ(scheduler_->GetSubmission(999, true).status().code(), StatusCode::kNotFound);
}

TEST_F(SchedulerTest, ResultsOfOnePassAreTakenTogether) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  auto statuses = scheduler_->Results("w1", session,
                                      {Done(batch, reply.job_ids[0]), Done(batch, reply.job_ids[0]),
                                       Done(batch, reply.job_ids[1])});
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 3u);
  EXPECT_TRUE((*statuses)[0].ok());
  EXPECT_EQ((*statuses)[1].code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE((*statuses)[2].ok());
  EXPECT_TRUE(scheduler_->GetSubmission(reply.submission_id)->submission.done());
  // The worker is told every result is settled, the refused copy included,
  // so it stops keeping them for a resend.
  auto stored = link.Of(WorkerCommand::Kind::kResultsStored);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].job_ids,
            (std::vector<int64_t>{reply.job_ids[0], reply.job_ids[0], reply.job_ids[1]}));
  EXPECT_EQ(scheduler_->Results("w1", session + 1, {}).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, InvalidJobsRefuseTheWholeRequestNamingEach) {
  JobSpec empty = TokenJob("a", "m");
  empty.prompt_token_ids.clear();
  JobSpec dup = TokenJob("a", "m");
  JobSpec both = TokenJob("c", "m");
  both.labels = {"yes"};
  both.max_new_tokens = 5;
  SubmitRequest request;
  request.jobs = {empty, dup, TokenJob("ok", "m"), both};
  auto reply = scheduler_->Submit(request);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = reply.status().message();
  EXPECT_NE(m.find("job 0: prompt is empty"), std::string::npos) << m;
  EXPECT_NE(m.find("job 1: duplicate custom_id 'a' (job 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("job 3: labels together with generation"), std::string::npos) << m;
  EXPECT_EQ(m.find("job 2"), std::string::npos) << m;
  EXPECT_TRUE(scheduler_->ListJobs({}, 0, 10)->jobs.empty());
}

TEST_F(SchedulerTest, AModelNoWorkerEverAdvertisedIsALineErrorUnlessAllowed) {
  allow_unknown_models_ = false;
  NewScheduler();
  SubmitRequest request;
  request.jobs = {TokenJob("a", "m")};
  auto before = scheduler_->Submit(request);  // no worker has attached yet
  ASSERT_FALSE(before.ok());
  EXPECT_NE(before.status().message().find("job 0: model 'm' is served by no worker"),
            std::string::npos)
      << before.status().ToString();

  FakeLink link;
  Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  scheduler_->Detach("w1", 1);  // known, though not connected now
  request.jobs = {TokenJob("a", "m"), TokenJob("typo", "mm")};
  auto typo = scheduler_->Submit(request);
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("job 1: model 'mm' is served by no worker that has "
                                         "attached (known: m)"),
            std::string::npos)
      << typo.status().ToString();
  EXPECT_EQ(typo.status().message().find("job 0"), std::string::npos) << typo.status().ToString();
  EXPECT_TRUE(scheduler_->ListJobs({}, 0, 10)->jobs.empty());

  NewScheduler();  // a restart remembers the workers' models
  request.jobs = {TokenJob("a", "m")};
  EXPECT_TRUE(scheduler_->Submit(request).ok());
  EXPECT_EQ(scheduler_->KnownModels(), (std::set<std::string>{"m"}));

  allow_unknown_models_ = true;
  NewScheduler();
  request.jobs = {TokenJob("b", "not-yet")};
  EXPECT_TRUE(scheduler_->Submit(request).ok());
}

TEST_F(SchedulerTest, APromptOverTheContextIsRefusedAtSubmitOrFailsWhenValidatedLater) {
  // Submitted before any worker: accepted and held, then failed with the reason.
  auto early = Submit({TokenJob("long", "m", 8, 5), TokenJob("short", "m", 2, 2)});
  FakeLink link;
  Attach(Worker("w1", 1 << 20, {Offer("m", 1000, /*max_context=*/10)}), &link);
  Job failed = GetJob(early.job_ids[0]);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_NE(failed.reason.find("prompt of 8 tokens + 5 new tokens = 13 tokens exceeds the model's "
                               "context of 10 tokens"),
            std::string::npos)
      << failed.reason;
  EXPECT_EQ(GetJob(early.job_ids[1]).state, JobState::kLeased);
  // Submitted once the model is known: refused whole at submit.
  SubmitRequest request;
  request.jobs = {TokenJob("fine", "m", 2, 2), TokenJob("long", "m", 8, 5)};
  auto refused = scheduler_->Submit(request);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("job 1: prompt of 8 tokens"), std::string::npos)
      << refused.status().message();
}

TEST_F(SchedulerTest, ASubmitRefusalNamesEveryKindOfBadJobAtOnce) {
  allow_unknown_models_ = false;
  NewScheduler();
  FakeLink link;
  Attach(Worker("w1", 1 << 20, {Offer("m", 1000, /*max_context=*/10)}), &link);
  JobSpec hot = TokenJob("hot", "m", 2, 2);
  hot.sampling.temperature = 3;
  SubmitRequest request;
  request.jobs = {TokenJob("fine", "m", 2, 2), hot, TokenJob("typo", "n", 2, 2),
                  TokenJob("long", "m", 8, 5)};
  auto refused = scheduler_->Submit(request);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = refused.status().message();
  // A format problem does not hide the unknown model, nor either of them the context.
  EXPECT_NE(m.find("job 1: temperature 3"), std::string::npos) << m;
  EXPECT_NE(m.find("job 2: model 'n' is served by no worker"), std::string::npos) << m;
  EXPECT_NE(m.find("job 3: prompt of 8 tokens + 5 new tokens = 13 tokens exceeds the model's "
                   "context of 10 tokens"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("job 0"), std::string::npos) << m;
  EXPECT_TRUE(scheduler_->ListJobs({}, 0, 10)->jobs.empty());
  // CheckRequest finds the same, as data, and refuses an empty request.
  auto checked = scheduler_->CheckRequest(request);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  std::vector<size_t> indices;
  for (const JobProblem& p : *checked) indices.push_back(p.index);
  EXPECT_EQ(indices, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(scheduler_->CheckRequest(SubmitRequest{}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, CheckJobsFindsWhatSubmitWouldRefuseAndStoresNothing) {
  allow_unknown_models_ = false;
  NewScheduler();
  FakeLink link;
  Attach(Worker("w1", 1 << 20, {Offer("m", 1000, /*max_context=*/10)}), &link);
  JobSpec empty = TokenJob("e", "m");
  empty.prompt_token_ids.clear();
  std::vector<JobSpec> jobs = {TokenJob("fine", "m", 2, 2), TokenJob("long", "m", 8, 5),
                               TokenJob("typo", "n"), empty, TokenJob("fine", "m", 2, 0)};
  const std::vector<JobProblem> problems = scheduler_->CheckJobs(jobs);
  std::vector<size_t> indices;
  for (const JobProblem& p : problems) indices.push_back(p.index);
  EXPECT_EQ(indices, (std::vector<size_t>{1, 2, 3, 4})) << FormatJobProblems(problems);
  EXPECT_NE(FormatJobProblems(problems).find("job 1: prompt of 8 tokens + 5 new tokens"),
            std::string::npos)
      << FormatJobProblems(problems);
  EXPECT_EQ(jobs[4].max_new_tokens, 16);  // the default is filled, as Submit fills it
  EXPECT_TRUE(scheduler_->ListJobs({}, 0, 10)->jobs.empty());
  std::vector<JobSpec> good = {TokenJob("a", "m", 2, 2)};
  EXPECT_TRUE(scheduler_->CheckJobs(good).empty());
}

TEST_F(SchedulerTest, TextPromptsAndLabelsAreTokenisedWithTheUploadedTokenizer) {
  JobSpec text = TokenJob("t", "m", 0, 3);
  text.prompt_kind = PromptKind::kText;
  text.prompt_text = "hi";
  JobSpec classify = TokenJob("c", "m", 0, 0);
  classify.prompt_kind = PromptKind::kText;
  classify.prompt_text = "ok?";
  classify.labels = {" yes", " no"};
  auto reply = Submit({text, classify});
  EXPECT_EQ(reply.waiting_for_tokenizer, 2);

  const TokenizerFiles tokenizer = TinyTokenizer();
  WorkerInfo info = Worker("w1", 1 << 20, {Offer("m")});
  info.models[0].tokenizer_hash = TokenizerHash(tokenizer);
  FakeLink link;
  const int64_t session = Attach(info, &link);
  ASSERT_EQ(link.sent.size(), 1u);  // nothing can run before the tokenizer arrives
  EXPECT_EQ(link.sent[0].missing_tokenizers, std::vector<std::string>{TokenizerHash(tokenizer)});

  TokenizerFiles other = tokenizer;
  other.eos_ids = {1};
  EXPECT_EQ(scheduler_->UploadTokenizer("w1", session, other).code(), StatusCode::kInvalidArgument);
  // A file that is not UTF-8 text is refused by name (the store keeps JSON).
  TokenizerFiles binary = tokenizer;
  binary.files["weights.bin"] = std::string("\xff\xfe\x00\x01", 4);
  Status refused = scheduler_->UploadTokenizer("w1", session, binary);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("weights.bin"), std::string::npos) << refused.message();
  ASSERT_TRUE(scheduler_->UploadTokenizer("w1", session, tokenizer).ok());
  auto assigns = link.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 1u);
  ASSERT_EQ(assigns[0].jobs.size(), 2u);
  const Job& t = assigns[0].jobs[0];
  EXPECT_EQ(t.tokens.prompt, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(t.kv_tokens, 2 + 3 - 1);  // the last new token is never fed back
  const Job& c = assigns[0].jobs[1];
  EXPECT_EQ(c.tokens.prompt, (std::vector<int32_t>{'o', 'k', '?'}));
  // " yes" continues the prompt as one merged token; " no" is two bytes.
  ASSERT_EQ(c.tokens.labels.size(), 2u);
  EXPECT_EQ(c.tokens.labels[0], (std::vector<int32_t>{259}));
  EXPECT_EQ(c.tokens.labels[1], (std::vector<int32_t>{' ', 'n', 'o'}));
  EXPECT_EQ(c.kv_tokens, 3 + 1 + 3);

  // The tokenizer is cached: a later submit is tokenised at once.
  JobSpec later = text;
  later.custom_id = "later";
  later.prompt_text = "hello";
  auto now = Submit({later});
  EXPECT_EQ(now.waiting_for_tokenizer, 0);
  EXPECT_EQ(GetJob(now.job_ids[0]).tokens.prompt.size(), 5u);
}

TEST_F(SchedulerTest, ChatPromptsAreRenderedWithTheModelsTemplate) {
  const TokenizerFiles tokenizer = TinyTokenizer();
  WorkerInfo info = Worker("w1", 1 << 20, {Offer("m")});
  info.models[0].tokenizer_hash = TokenizerHash(tokenizer);
  FakeLink link;
  const int64_t session = Attach(info, &link);
  ASSERT_TRUE(scheduler_->UploadTokenizer("w1", session, tokenizer).ok());
  JobSpec chat = TokenJob("chat", "m", 0, 4);
  chat.endpoint = Endpoint::kChatCompletions;
  chat.prompt_kind = PromptKind::kChat;
  chat.messages = {{"user", "hi"}};
  auto reply = Submit({chat});
  const Job job = GetJob(reply.job_ids[0]);
  // <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
  const std::vector<int32_t> expected = {260, 'u', 's', 'e', 'r', '\n', 'h', 'i', 261, '\n', 260,
                                         'a', 's', 's', 'i', 's', 't',  'a', 'n', 't', '\n'};
  EXPECT_EQ(job.tokens.prompt, expected);
}

TEST_F(SchedulerTest, AJobNoWorkerCanEverHoldFailsWithTheReason) {
  FakeLink link;
  Attach(Worker("w1", 10'000, {Offer("m", 1000)}), &link);  // 10 tokens of KV
  auto reply = Submit({TokenJob("big", "m", 8, 8), TokenJob("small", "m", 2, 2)});
  Job big = GetJob(reply.job_ids[0]);
  EXPECT_EQ(big.state, JobState::kFailed);
  EXPECT_EQ(big.reason,
            "needs 15 tokens of KV cache; the most any worker serving m can hold is 10 "
            "(worker w1)");
  EXPECT_EQ(GetJob(reply.job_ids[1]).state, JobState::kLeased);
}

TEST_F(SchedulerTest, ADeadWorkersLeaseExpiresAndItsJobsMoveToAnotherWorker) {
  FakeLink link1;
  const int64_t s1 = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link1);
  auto reply = Submit({TokenJob("a", "m")});
  const int64_t batch1 = link1.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  scheduler_->Detach("w1", s1);
  clock_.Advance(kLeaseMs - 1);
  scheduler_->Tick();
  EXPECT_EQ(GetJob(reply.job_ids[0]).state, JobState::kLeased);
  clock_.Advance(1);
  scheduler_->Tick();
  Job job = GetJob(reply.job_ids[0]);
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_EQ(job.attempt, 1);
  FakeLink link2;
  const int64_t s2 = Attach(Worker("w2", 1 << 20, {Offer("m")}), &link2);
  const int64_t batch2 = link2.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  EXPECT_NE(batch1, batch2);
  // The first worker comes back and reports late: refused.
  FakeLink link1b;
  const int64_t s1b = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link1b, {batch1});
  EXPECT_EQ(scheduler_->Result("w1", s1b, Done(batch1, reply.job_ids[0])).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->counters().late_results, 1);
  ASSERT_TRUE(scheduler_->Result("w2", s2, Done(batch2, reply.job_ids[0])).ok());
  EXPECT_EQ(GetJob(reply.job_ids[0]).state, JobState::kSucceeded);
  EXPECT_EQ(scheduler_->counters().lease_expirations, 1);
}

TEST_F(SchedulerTest, AttemptsRunOutAfterMaxAttemptsLostLeases) {
  auto reply = Submit({TokenJob("a", "m")});
  for (int attempt = 1; attempt <= 2; ++attempt) {
    FakeLink link;
    const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
    ASSERT_EQ(link.Of(WorkerCommand::Kind::kAssign).size(), 1u) << attempt;
    scheduler_->Detach("w1", session);
    clock_.Advance(kLeaseMs);
    scheduler_->Tick();
  }
  Job job = GetJob(reply.job_ids[0]);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.attempt, 2);
  EXPECT_NE(job.reason.find("no attempts left"), std::string::npos) << job.reason;
}

TEST_F(SchedulerTest, HeartbeatsKeepTheLease) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m")});
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(kLeaseMs * 8 / 10);
    ASSERT_TRUE(scheduler_->Heartbeat("w1", session).ok());
    scheduler_->Tick();
  }
  EXPECT_EQ(GetJob(reply.job_ids[0]).state, JobState::kLeased);
}

TEST_F(SchedulerTest, ASecondAttachFencesTheFirstStream) {
  FakeLink first;
  const int64_t s1 = Attach(Worker("w1", 1 << 20, {Offer("m")}), &first);
  FakeLink second;
  const int64_t s2 = Attach(Worker("w1", 1 << 20, {Offer("m")}), &second);
  EXPECT_EQ(s2, s1 + 1);
  EXPECT_TRUE(first.closed);
  EXPECT_NE(first.close_status.message().find("superseded"), std::string::npos);
  EXPECT_FALSE(second.closed);
  EXPECT_EQ(scheduler_->Heartbeat("w1", s1).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(scheduler_->Heartbeat("w1", s2).ok());
  scheduler_->Detach("w1", s1);  // the fenced stream ending changes nothing
  EXPECT_TRUE(scheduler_->Heartbeat("w1", s2).ok());
}

TEST_F(SchedulerTest, ReattachKeepsTheBatchesTheWorkerStillRuns) {
  FakeLink link;
  const int64_t s1 = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m")});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  scheduler_->Detach("w1", s1);
  FakeLink again;
  const int64_t s2 = Attach(Worker("w1", 1 << 20, {Offer("m")}), &again, {batch});
  EXPECT_TRUE(again.Of(WorkerCommand::Kind::kAssign).empty());
  ASSERT_TRUE(scheduler_->Result("w1", s2, Done(batch, reply.job_ids[0])).ok());
  EXPECT_EQ(GetJob(reply.job_ids[0]).attempt, 0);
}

TEST_F(SchedulerTest, ReattachWithoutTheBatchRequeuesItsJobsAtOnce) {
  FakeLink link;
  const int64_t s1 = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m")});
  scheduler_->Detach("w1", s1);
  FakeLink again;
  Attach(Worker("w1", 1 << 20, {Offer("m")}), &again);
  auto assigns = again.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 1u);
  EXPECT_EQ(assigns[0].jobs.at(0).id, reply.job_ids[0]);
  EXPECT_EQ(GetJob(reply.job_ids[0]).attempt, 1);
}

TEST_F(SchedulerTest, CancelTellsTheWorker) {
  FakeLink link;
  Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  auto cancelled = scheduler_->CancelSubmission(reply.submission_id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_TRUE(cancelled->submission.done());
  EXPECT_EQ(cancelled->submission.counts.cancelled, 2);
  auto cancels = link.Of(WorkerCommand::Kind::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].job_ids, reply.job_ids);
  EXPECT_EQ(scheduler_->CancelSubmission(77).status().code(), StatusCode::kNotFound);
}

TEST_F(SchedulerTest, ATopUpAtAPassBoundaryJoinsTheRunningBatch) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 24'000, {Offer("m", 1000)}), &link);  // 24 tokens
  auto reply =
      Submit({TokenJob("a", "m", 4, 8), TokenJob("b", "m", 4, 8), TokenJob("c", "m", 4, 8)});
  auto assigns = link.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 1u);
  ASSERT_EQ(assigns[0].jobs.size(), 2u);
  const int64_t batch = assigns[0].batch_id;
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(batch, reply.job_ids[0])).ok());
  EXPECT_EQ(link.Of(WorkerCommand::Kind::kAssign).size(), 1u);  // busy: no new batch
  PassProgress pass = Pass(batch, 0, 1.0);
  pass.free_kv_bytes = 12'000;
  pass.want_top_up = true;
  ASSERT_TRUE(scheduler_->Progress("w1", session, pass).ok());
  assigns = link.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 2u);
  EXPECT_TRUE(assigns[1].top_up);
  EXPECT_EQ(assigns[1].batch_id, batch);
  ASSERT_EQ(assigns[1].jobs.size(), 1u);
  EXPECT_EQ(assigns[1].jobs[0].id, reply.job_ids[2]);
}

TEST_F(SchedulerTest, TheReportOfTheLastPassAfterItsResultsIsKeptForTheEta) {
  FakeLink link;
  WorkerInfo info = Worker("w1", 1 << 20, {Offer("m")});
  info.models[0].seconds_per_pass = 2.0;
  const int64_t session = Attach(info, &link);
  auto reply = Submit({TokenJob("a", "m", 4, 1)});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  // The worker sends a pass's results before its report: the batch has
  // ended when the report of its last pass arrives.
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(batch, reply.job_ids[0])).ok());
  Status report = scheduler_->Progress("w1", session, Pass(batch, 0, 4.0));
  EXPECT_TRUE(report.ok()) << report.ToString();
  // Its 4 s pass, not the advertised 2 s, prices the next batch.
  auto next = Submit({TokenJob("b", "m", 4, 5)});
  auto status = scheduler_->GetSubmission(next.submission_id);
  ASSERT_TRUE(status.ok());
  ASSERT_TRUE(status->eta_seconds.has_value());
  EXPECT_DOUBLE_EQ(*status->eta_seconds, 5 * 4.0);
  // A report for a batch the worker never had is still refused.
  EXPECT_FALSE(scheduler_->Progress("w1", session, Pass(batch + 100, 0, 1.0)).ok());
}

TEST_F(SchedulerTest, EtaUsesTheAdvertisedSpeedThenTheMeasuredOne) {
  FakeLink link;
  WorkerInfo info = Worker("w1", 1 << 20, {Offer("m")});
  info.models[0].seconds_per_pass = 2.0;
  const int64_t session = Attach(info, &link);
  auto reply = Submit({TokenJob("a", "m", 4, 5)});
  auto before = scheduler_->GetSubmission(reply.submission_id);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(before->eta_seconds.has_value());
  EXPECT_DOUBLE_EQ(*before->eta_seconds, 5 * 2.0);
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  PassProgress pass = Pass(batch, 0, 4.0);
  pass.generated[reply.job_ids[0]] = 1;
  ASSERT_TRUE(scheduler_->Progress("w1", session, pass).ok());
  auto after = scheduler_->GetSubmission(reply.submission_id);
  // The measured pass (4 s, longer than the advert) keeps the advert as a
  // pass's base and charges the rest to the tokens it fed (none here: all of it).
  EXPECT_DOUBLE_EQ(*after->eta_seconds, 4 * 4.0);
  // A queued job tops the batch up at its next boundary (4 s) and joins at the
  // one after (8 s, the worker is in its next pass by then): 5 passes of 4 s.
  auto second = Submit({TokenJob("b", "m", 4, 5)});
  auto queued = scheduler_->GetSubmission(second.submission_id);
  ASSERT_TRUE(queued->eta_seconds.has_value());
  EXPECT_DOUBLE_EQ(*queued->eta_seconds, 8.0 + 5 * 4.0);
  // Unknown while jobs wait for a tokenizer.
  auto waiting = Submit({TokenJob("c", "unknown-model")});
  EXPECT_FALSE(scheduler_->GetSubmission(waiting.submission_id)->eta_seconds.has_value());
}

TEST_F(SchedulerTest, WithoutAnAdvertisedSpeedTheEtaUsesThePlannersArithmetic) {
  FakeLink link;
  WorkerInfo info = Worker("w1", 1 << 20, {Offer("m")});
  info.models[0].seconds_per_pass = 0;
  info.models[0].checkpoint_bytes = 1'700'000'000;  // 1.7 GB
  info.read_bytes_per_second = 2e9;                 // 2 GB/s
  Attach(info, &link);
  auto reply = Submit({TokenJob("a", "m", 4, 10)});
  auto status = scheduler_->GetSubmission(reply.submission_id);
  ASSERT_TRUE(status->eta_seconds.has_value());
  // planner::PassSeconds, as the worker advertises it: 1.7 GB / 2 GB/s.
  EXPECT_DOUBLE_EQ(*status->eta_seconds, 10 * 0.85);
}

TEST_F(SchedulerTest, ARestartKeepsLeasesUntilTheWorkerReattaches) {
  FakeLink link;
  Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m")});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  NewScheduler();  // the process restarted on the same database
  auto workers = scheduler_->ListWorkers();
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_FALSE((*workers)[0].info.connected);
  ASSERT_TRUE((*workers)[0].batch.has_value());
  EXPECT_EQ((*workers)[0].batch->batch_id, batch);
  FakeLink again;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &again, {batch});
  EXPECT_EQ(session, 2);
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(batch, reply.job_ids[0])).ok());
}

TEST_F(SchedulerTest, ADrainingWorkerHandsBackAndGetsNothingNew) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "m")});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  ASSERT_TRUE(scheduler_->HandBack("w1", session, batch, reply.job_ids, true).ok());
  EXPECT_EQ(link.Of(WorkerCommand::Kind::kAssign).size(), 1u);
  Job a = GetJob(reply.job_ids[0]);
  EXPECT_EQ(a.state, JobState::kQueued);
  EXPECT_EQ(a.attempt, 0);
  FakeLink other;
  Attach(Worker("w2", 1 << 20, {Offer("m")}), &other);
  EXPECT_EQ(other.Of(WorkerCommand::Kind::kAssign).at(0).jobs.size(), 2u);
}

TEST_F(SchedulerTest, AnIdleWorkerAnnouncesItsDrainWithAnEmptyHandBack) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m")}), &link);
  ASSERT_TRUE(scheduler_->HandBack("w1", session, 0, {}, true).ok());
  Submit({TokenJob("a", "m")});
  EXPECT_TRUE(link.Of(WorkerCommand::Kind::kAssign).empty());
}

TEST_F(SchedulerTest, AWithdrawnModelGetsNoMoreBatchesThere) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m"), Offer("n")}), &link);
  ASSERT_TRUE(scheduler_->Withdraw("w1", session, "m", "corrupt checkpoint").ok());
  auto reply = Submit({TokenJob("a", "m"), TokenJob("b", "n")});
  auto assigns = link.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 1u);
  EXPECT_EQ(assigns[0].model, "n");
  EXPECT_EQ(GetJob(reply.job_ids[0]).state, JobState::kQueued);
  auto workers = scheduler_->ListWorkers();
  EXPECT_EQ((*workers)[0].info.models.size(), 1u);
}

// A worker whose checkpoint read failed mid-pass hands the batch back with
// the error (an attempt each) and reports the model unhealthy: no batch of
// it goes there, other models do, and once healthy again it gets the queue.
TEST_F(SchedulerTest, AnUnhealthyModelGetsNoBatchesThereUntilItIsHealthyAgain) {
  FakeLink link;
  const int64_t session = Attach(Worker("w1", 1 << 20, {Offer("m"), Offer("n")}), &link);
  auto reply = Submit({TokenJob("a", "m")});
  const int64_t batch = link.Of(WorkerCommand::Kind::kAssign).at(0).batch_id;
  const std::string error = "data_loss: model.safetensors: read at offset 0 failed: I/O error";
  ASSERT_TRUE(scheduler_->ModelHealth("w1", session, "m", error).ok());
  ASSERT_TRUE(scheduler_->HandBack("w1", session, batch, reply.job_ids, false, error).ok());
  Job a = GetJob(reply.job_ids[0]);
  EXPECT_EQ(a.state, JobState::kQueued);
  EXPECT_EQ(a.attempt, 1);
  EXPECT_NE(a.reason.find(error), std::string::npos) << a.reason;
  auto workers = scheduler_->ListWorkers();
  ASSERT_EQ((*workers)[0].info.models.size(), 2u);
  EXPECT_EQ((*workers)[0].info.models[0].unhealthy, error);
  EXPECT_EQ((*workers)[0].info.models[1].unhealthy, "");

  auto other = Submit({TokenJob("b", "n")});
  scheduler_->Tick();
  auto assigns = link.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 2u);
  EXPECT_EQ(assigns[1].model, "n");
  ASSERT_TRUE(scheduler_->Result("w1", session, Done(assigns[1].batch_id, other.job_ids[0])).ok());
  EXPECT_EQ(link.Of(WorkerCommand::Kind::kAssign).size(), 2u) << "m waits";
  EXPECT_EQ(GetJob(reply.job_ids[0]).state, JobState::kQueued);

  ASSERT_TRUE(scheduler_->ModelHealth("w1", session, "m", "").ok());
  assigns = link.Of(WorkerCommand::Kind::kAssign);
  ASSERT_EQ(assigns.size(), 3u);
  EXPECT_EQ(assigns[2].model, "m");
  EXPECT_EQ(scheduler_->ModelHealth("w1", session, "nope", "x").code(), StatusCode::kNotFound);
}

TEST_F(SchedulerTest, ClassificationsSharingAPrefixRideTogetherAndCountItOnce) {
  // 200 classifications in 4 groups, interleaved in submission order: job i
  // is of group i % 4, its prompt the group's 48-token instruction then 8
  // tokens of its own; labels " yes" and " no" (1 + 3 tokens). Each feeds
  // 56 + 4 = 60 tokens alone; beside a job of its group, 12.
  constexpr int kJobs = 200, kGroups = 4, kShared = 48;
  constexpr int64_t kPerBatch = 10;
  constexpr int64_t kBudget = 60 + 12 * (kPerBatch - 1);  // 168: 2 jobs without sharing
  const TokenizerFiles tokenizer = TinyTokenizer();
  WorkerInfo info = Worker("w1", 1 << 20, {Offer("m")});
  info.models[0].tokenizer_hash = TokenizerHash(tokenizer);
  info.models[0].pass_token_budget = kBudget;
  FakeLink link;
  const int64_t session = Attach(info, &link);
  ASSERT_TRUE(scheduler_->UploadTokenizer("w1", session, tokenizer).ok());
  std::vector<JobSpec> specs;
  for (int i = 0; i < kJobs; ++i) {
    JobSpec spec = TokenJob("job-" + std::to_string(i), "m", 0, 0);
    const int group = i % kGroups;
    for (int k = 0; k < kShared; ++k) spec.prompt_token_ids.push_back(group * 40 + k);
    spec.prompt_token_ids.push_back(200 + i / kGroups);  // where it parts from its group
    for (int k = 1; k < 8; ++k) spec.prompt_token_ids.push_back(k);
    spec.labels = {" yes", " no"};
    specs.push_back(spec);
  }
  const SubmitReply reply = Submit(specs);
  ASSERT_EQ(reply.job_ids.size(), static_cast<size_t>(kJobs));
  std::map<int64_t, int> index_of;  // job id -> its line
  for (int i = 0; i < kJobs; ++i) index_of[reply.job_ids[i]] = i;

  // The worker: each batch runs one pass and every job ends in it; then the
  // next batch comes.
  std::map<int64_t, int> batches_of;           // job id -> batches it was sent in
  std::vector<int> next_of_group(kGroups, 0);  // the next line of each group due
  size_t seen = 0;
  for (int batch = 0; batch < kJobs; ++batch) {
    auto assigns = link.Of(WorkerCommand::Kind::kAssign);
    if (assigns.size() == seen) break;
    ASSERT_EQ(assigns.size(), seen + 1) << "one batch at a time";
    const WorkerCommand& assign = assigns[seen++];
    SCOPED_TRACE("batch " + std::to_string(batch));
    EXPECT_FALSE(assign.top_up);
    // Batches group the jobs: one group's next jobs in submission order, the
    // groups in turn (the oldest job waiting opens each batch).
    ASSERT_EQ(static_cast<int64_t>(assign.jobs.size()), kPerBatch);
    const int group = batch % kGroups;
    std::set<std::vector<int32_t>> prefixes;  // what the engine computes once each
    int64_t label_tokens = 0, alone = 0;
    for (const Job& job : assign.jobs) {
      const int line = index_of.at(job.id);
      EXPECT_EQ(line % kGroups, group);
      EXPECT_EQ(line / kGroups, next_of_group[group]++);
      ++batches_of[job.id];
      const auto& ids = job.tokens.prompt;
      for (size_t n = 1; n <= ids.size(); ++n) prefixes.insert({ids.begin(), ids.begin() + n});
      for (const auto& label : job.tokens.labels) label_tokens += label.size();
      alone += job.kv_tokens;
    }
    // The pass-token budget counted the group's prefix once: the 10 jobs fit
    // 168 tokens, as many as the engine computes, where alone they feed 600.
    EXPECT_EQ(static_cast<int64_t>(prefixes.size()) + label_tokens, kBudget);
    EXPECT_EQ(alone, 60 * kPerBatch);
    PassProgress pass = Pass(assign.batch_id, 0, 1.0);
    pass.sequences = static_cast<int32_t>(assign.jobs.size());
    ASSERT_TRUE(scheduler_->Progress("w1", session, pass).ok());
    std::vector<JobResult> results;
    for (const Job& job : assign.jobs) {
      JobResult result = Done(assign.batch_id, job.id);
      result.output.text = job.spec.custom_id;
      results.push_back(result);
    }
    auto statuses = scheduler_->Results("w1", session, results);
    ASSERT_TRUE(statuses.ok());
    for (const Status& s : *statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(seen, static_cast<size_t>(kJobs / kPerBatch));
  // Every job ran once and ended once.
  ASSERT_EQ(batches_of.size(), static_cast<size_t>(kJobs));
  for (const auto& [id, times] : batches_of) EXPECT_EQ(times, 1) << "job " << id;
  auto status = scheduler_->GetSubmission(reply.submission_id);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->submission.done());
  EXPECT_EQ(status->submission.counts.succeeded, kJobs);
  // The results read back in input order, each with its own job's output.
  JobFilter filter;
  filter.submission_id = reply.submission_id;
  filter.with_results = true;
  std::vector<std::string> read;
  int64_t after = 0;
  do {
    auto page = scheduler_->ListJobs(filter, after, 64);
    ASSERT_TRUE(page.ok());
    for (const JobView& view : page->jobs) {
      EXPECT_EQ(view.job.index, static_cast<int64_t>(read.size()));
      ASSERT_TRUE(view.result.has_value());
      EXPECT_EQ(view.result->output.text, view.job.spec.custom_id);
      read.push_back(view.result->output.text);
    }
    after = page->next_after_id;
  } while (after != 0);
  ASSERT_EQ(read.size(), static_cast<size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) EXPECT_EQ(read[i], "job-" + std::to_string(i));
}

TEST_F(SchedulerTest, EstimateUsesTheWorkersFigures) {
  FakeLink link;
  WorkerInfo info = Worker("w1", 100'000, {Offer("m", 1000)});
  info.models[0].seconds_per_pass = 3.0;
  Attach(info, &link);
  auto estimate = scheduler_->EstimateModel("m", 4, 10, 15);  // 25 tokens a job: 4 per batch
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  ASSERT_EQ(estimate->workers.size(), 1u);
  EXPECT_EQ(estimate->workers[0].jobs_per_batch, 4);
  EXPECT_FALSE(estimate->workers[0].measured);
  ASSERT_TRUE(estimate->seconds.has_value());
  EXPECT_DOUBLE_EQ(*estimate->seconds, 15 * 3.0);
  EXPECT_EQ(scheduler_->EstimateModel("nope", 1, 1, 1).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace nightshift::scheduler
