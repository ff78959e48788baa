#include "scheduler/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <set>

#include "scheduler/disk_full.h"
#include "scheduler/sqlite.h"
#include "scheduler/test_util.h"
#include "tests/testing/tiny_fs.h"

namespace nightshift::scheduler {
namespace {

using testing::Offer;
using testing::TempDir;
using testing::TokenJob;
using testing::TokensOf;
using testing::Worker;

constexpr int64_t kLeaseMs = 30'000;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = OpenStore(); }

  std::unique_ptr<Store> OpenStore(StoreOptions options = {}) {
    auto store = Store::Open(dir_.file("state.db"), &clock_, options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // Submits token-id jobs (tokenised at once) as one sealed submission.
  SubmitOutcome SubmitTokens(const std::vector<JobSpec>& specs, int max_attempts = 3) {
    SubmitChunk chunk;
    for (const auto& spec : specs) chunk.jobs.push_back({spec, TokensOf(spec), "", max_attempts});
    auto outcome = store_->Submit(chunk);
    EXPECT_TRUE(outcome.ok()) << outcome.status().ToString();
    return outcome.ok() ? *outcome : SubmitOutcome{};
  }

  Job GetJob(int64_t id) {
    auto job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : Job{};
  }

  Lease Lease1(const std::string& worker, const std::vector<int64_t>& ids,
               const std::string& model = "m") {
    auto lease = store_->CreateBatch(worker, model, ids, kLeaseMs);
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    return lease.ok() ? *lease : Lease{};
  }

  JobResult Result(const Lease& lease, int64_t job_id, bool ok = true) {
    JobResult result;
    result.job_id = job_id;
    result.batch_id = lease.batch_id;
    result.worker_id = lease.worker_id;
    result.ok = ok;
    result.output.text = "out " + std::to_string(job_id);
    result.output.finish_reason = "length";
    result.error = ok ? "" : "engine said no";
    return result;
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
};

// ---------------------------------------------------------------- migrations

std::vector<Migration> TwoMigrations() {
  return {{1, "0001_a.sql", "CREATE TABLE a (x INTEGER);"},
          {2, "0002_b.sql", "CREATE TABLE b (y INTEGER);"}};
}

bool TableExists(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", -1, &stmt,
                     nullptr);
  sqlite3_bind_text(stmt, 1, table.c_str(), -1, SQLITE_TRANSIENT);
  const bool exists = sqlite3_step(stmt) == SQLITE_ROW;
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return exists;
}

TEST(StoreMigrationTest, BuiltinMigrationsAreNumberedFromOne) {
  const auto& migrations = BuiltinMigrations();
  ASSERT_FALSE(migrations.empty());
  for (size_t i = 0; i < migrations.size(); ++i) {
    EXPECT_EQ(migrations[i].version, static_cast<int64_t>(i + 1)) << migrations[i].name;
  }
  EXPECT_EQ(migrations[0].name, "0001_initial.sql");
  EXPECT_NE(migrations[0].sql.find("CREATE TABLE jobs"), std::string::npos);
}

TEST(StoreMigrationTest, AppliesPendingMigrationsInOrderAndRecordsThem) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.file("m.db");
  auto two = TwoMigrations();
  {
    auto store = Store::Open(path, &clock, {}, {two[0]});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->schema_version(), 1);
  }
  EXPECT_TRUE(TableExists(path, "a"));
  EXPECT_FALSE(TableExists(path, "b"));
  {
    auto store = Store::Open(path, &clock, {}, two);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->schema_version(), 2);
  }
  EXPECT_TRUE(TableExists(path, "b"));
  // Reopening applies nothing twice (CREATE TABLE would fail if it did).
  auto again = Store::Open(path, &clock, {}, two);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
}

TEST(StoreMigrationTest, RefusesADatabaseNewerThanItKnows) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.file("m.db");
  auto two = TwoMigrations();
  ASSERT_TRUE(Store::Open(path, &clock, {}, two).ok());
  auto older = Store::Open(path, &clock, {}, {two[0]});
  ASSERT_FALSE(older.ok());
  EXPECT_EQ(older.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(older.status().message().find("schema version 2"), std::string::npos)
      << older.status().message();
  EXPECT_NE(older.status().message().find("newer"), std::string::npos);
}

TEST(StoreMigrationTest, RefusesADifferentHistory) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.file("m.db");
  ASSERT_TRUE(Store::Open(path, &clock, {}, TwoMigrations()).ok());
  auto other = Store::Open(path, &clock, {}, {{1, "0001_other.sql", "SELECT 1;"}});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
}

TEST(StoreMigrationTest, AFailingMigrationLeavesNothingApplied) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.file("m.db");
  std::vector<Migration> broken = {TwoMigrations()[0], {2, "0002_bad.sql", "CREATE TABLE ("}};
  auto store = Store::Open(path, &clock, {}, broken);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("0002_bad.sql"), std::string::npos);
  EXPECT_FALSE(TableExists(path, "a"));
  EXPECT_FALSE(TableExists(path, "schema_migrations"));
}

TEST(StoreMigrationTest, GapsInNumberingAreABug) {
  TempDir dir;
  FakeClock clock;
  auto store = Store::Open(dir.file("m.db"), &clock, {}, {{2, "0002_b.sql", "SELECT 1;"}});
  EXPECT_EQ(store.status().code(), StatusCode::kInternal);
}

TEST(StoreMigrationTest, AFileThatIsNotADatabaseIsDataLoss) {
  TempDir dir;
  FakeClock clock;
  const std::string path = dir.file("junk.db");
  std::ofstream(path) << std::string(4096, 'x');
  auto store = Store::Open(path, &clock);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
}

TEST_F(StoreTest, UsesWriteAheadLogging) {
  EXPECT_EQ(store_->schema_version(), static_cast<int64_t>(BuiltinMigrations().size()));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.file("state.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

// ---------------------------------------------------------------- the transition mirror

// The migration's trigger must allow exactly the changes Transition() allows.
TEST_F(StoreTest, DatabaseTriggerMirrorsTheTransitionFunction) {
  std::set<std::pair<JobState, JobState>> allowed;
  for (JobState from : kAllJobStates) {
    for (JobEvent event : kAllJobEvents) {
      auto to = Transition(from, event);
      if (to.ok() && *to != from) allowed.insert({from, *to});
    }
  }
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.file("state.db").c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* error = nullptr;
    const int code = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    sqlite3_free(error);
    return code;
  };
  ASSERT_EQ(exec("INSERT INTO submissions (id, created_at_ms, sealed) VALUES (1, 0, 1);"
                 "INSERT INTO batches (id, worker_id, model, state, lease_expires_at_ms, "
                 "created_at_ms) VALUES (1, 'w', 'm', 'active', 0, 0)"),
            SQLITE_OK);
  auto held = [](JobState s) { return s == JobState::kLeased || s == JobState::kRunning; };
  int id = 0;
  for (JobState from : kAllJobStates) {
    for (JobState to : kAllJobStates) {
      if (from == to) continue;
      ++id;
      const std::string sid = std::to_string(id);
      ASSERT_EQ(
          exec("INSERT INTO jobs (id, submission_id, idx, custom_id, model, priority, spec, "
               "prompt_tokens, label_tokens, kv_tokens, passes, state, max_attempts, "
               "batch_id, created_at_ms, updated_at_ms) VALUES (" +
               sid + ", 1, " + sid + ", 'c" + sid + "', 'm', 0, '{}', x'01000000', '[]', 9, 1, '" +
               JobStateName(from) + "', 3, " + (held(from) ? "1" : "NULL") + ", 0, 0)"),
          SQLITE_OK);
      const int code = exec(std::string("UPDATE jobs SET state = '") + JobStateName(to) +
                            "', batch_id = " + (held(to) ? "1" : "NULL") + " WHERE id = " + sid);
      EXPECT_EQ(code == SQLITE_OK, allowed.count({from, to}) == 1)
          << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
  EXPECT_NE(exec("UPDATE jobs SET state = 'done' WHERE id = 1"), SQLITE_OK);
  sqlite3_close(db);
}

// ---------------------------------------------------------------- submissions

TEST_F(StoreTest, SubmitStoresJobsInOrderAndCountsThem) {
  auto outcome = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "n")});
  ASSERT_EQ(outcome.job_ids.size(), 3u);
  auto submission = store_->GetSubmission(outcome.submission_id);
  ASSERT_TRUE(submission.ok());
  EXPECT_EQ(submission->counts.queued, 3);
  EXPECT_EQ(submission->counts.total(), 3);
  EXPECT_TRUE(submission->sealed);
  EXPECT_FALSE(submission->done());

  Job b = GetJob(outcome.job_ids[1]);
  EXPECT_EQ(b.spec.custom_id, "b");
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(b.state, JobState::kQueued);
  EXPECT_TRUE(b.tokenised);
  EXPECT_EQ(b.kv_tokens, 4 + 8 - 1);  // the last new token is never fed back
  EXPECT_EQ(b.tokens.prompt, TokenJob("b", "m").prompt_token_ids);

  auto page = store_->ListJobs({outcome.submission_id, std::nullopt, "", false}, 0, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].job.spec.custom_id, "a");
  ASSERT_NE(page->next_after_id, 0);
  auto rest =
      store_->ListJobs({outcome.submission_id, std::nullopt, "", false}, page->next_after_id, 2);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->jobs.size(), 1u);
  EXPECT_EQ(rest->jobs[0].job.spec.custom_id, "c");
  EXPECT_EQ(rest->next_after_id, 0);

  auto by_model = store_->ListJobs({0, JobState::kQueued, "n", false}, 0, 10);
  ASSERT_TRUE(by_model.ok());
  ASSERT_EQ(by_model->jobs.size(), 1u);
  EXPECT_EQ(by_model->jobs[0].job.spec.custom_id, "c");
  EXPECT_EQ(store_->GetSubmission(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetJob(999).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, DuplicateCustomIdAcrossChunksRefusesTheWholeChunk) {
  SubmitChunk first;
  first.keep_open = true;
  first.jobs.push_back({TokenJob("a", "m"), TokensOf(TokenJob("a", "m")), "", 3});
  auto opened = store_->Submit(first);
  ASSERT_TRUE(opened.ok());
  SubmitChunk second;
  second.submission_id = opened->submission_id;
  for (const char* id : {"b", "a", "c", "a"}) {
    second.jobs.push_back({TokenJob(id, "m"), TokensOf(TokenJob(id, "m")), "", 3});
  }
  auto refused = store_->Submit(second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("job 1: custom_id 'a'"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("job 3: custom_id 'a'"), std::string::npos);
  auto submission = store_->GetSubmission(opened->submission_id);
  EXPECT_EQ(submission->counts.total(), 1);  // nothing of the refused chunk
  EXPECT_FALSE(submission->sealed);          // and the seal did not happen either
}

TEST_F(StoreTest, OpenSubmissionsAreNotScheduledUntilSealed) {
  SubmitChunk first;
  first.keep_open = true;
  first.jobs.push_back({TokenJob("a", "m"), TokensOf(TokenJob("a", "m")), "", 3});
  auto opened = store_->Submit(first);
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(store_->QueuedJobs("m", 10, 10)->empty());
  EXPECT_EQ(store_->CreateBatch("w", "m", opened->job_ids, kLeaseMs).status().code(),
            StatusCode::kFailedPrecondition);

  SubmitChunk last;
  last.submission_id = opened->submission_id;
  last.jobs.push_back({TokenJob("b", "m"), TokensOf(TokenJob("b", "m")), "", 3});
  auto sealed = store_->Submit(last);
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(GetJob(sealed->job_ids[0]).index, 1);
  EXPECT_EQ(store_->QueuedJobs("m", 10, 10)->size(), 2u);
  auto more = store_->Submit(last);
  EXPECT_EQ(more.status().code(), StatusCode::kFailedPrecondition);
  last.submission_id = 12345;
  EXPECT_EQ(store_->Submit(last).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, IdempotencyKeyReplaysTheFirstSubmission) {
  SubmitChunk chunk;
  chunk.idempotency_key = "upload-1";
  chunk.jobs.push_back({TokenJob("a", "m"), TokensOf(TokenJob("a", "m")), "", 3});
  auto first = store_->Submit(chunk);
  auto second = store_->Submit(chunk);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(first->replayed);
  EXPECT_TRUE(second->replayed);
  EXPECT_EQ(first->submission_id, second->submission_id);
  EXPECT_EQ(store_->GetSubmission(first->submission_id)->counts.total(), 1);
}

TEST_F(StoreTest, DataSurvivesReopening) {
  auto outcome = SubmitTokens({TokenJob("a", "m")});
  store_.reset();
  store_ = OpenStore();
  EXPECT_EQ(GetJob(outcome.job_ids[0]).spec.custom_id, "a");
}

// ---------------------------------------------------------------- queue and leases

TEST_F(StoreTest, QueueIsPriorityThenOldestSubmission) {
  auto s1 = SubmitTokens({TokenJob("low", "m", 4, 8, 0), TokenJob("high", "m", 4, 8, 5)});
  auto s2 = SubmitTokens({TokenJob("high2", "m", 4, 8, 5), TokenJob("low2", "m", 4, 8, 0)});
  SubmitChunk waiting;  // untokenised: not in the queue
  waiting.jobs.push_back({TokenJob("w", "m"), std::nullopt, "waiting for a worker", 3});
  ASSERT_TRUE(store_->Submit(waiting).ok());
  SubmitTokens({TokenJob("other", "n")});
  auto queue = store_->QueuedJobs("m", 10, 10);
  ASSERT_TRUE(queue.ok());
  std::vector<int64_t> ids;
  for (const auto& job : *queue) ids.push_back(job.id);
  EXPECT_EQ(ids,
            (std::vector<int64_t>{s1.job_ids[1], s2.job_ids[0], s1.job_ids[0], s2.job_ids[1]}));
  EXPECT_EQ((*queue)[0].kv_tokens, 4 + 8 - 1);
  EXPECT_EQ((*queue)[0].passes, 8);
  EXPECT_EQ(store_->QueuedJobs("m", 1, 1)->size(), 1u);
}

TEST_F(StoreTest, QueuedJobsCarryTheirPromptIdsUpToTheAskedCount) {
  JobSpec first = TokenJob("a", "m", 3);
  first.prompt_token_ids = {7, -1, 70000};  // any int32 survives the blob
  SubmitTokens({first, TokenJob("b", "m", 5)});
  auto queue = store_->QueuedJobs("m", 10, 10);
  ASSERT_TRUE(queue.ok());
  ASSERT_EQ(queue->size(), 2u);
  EXPECT_EQ((*queue)[0].prompt_ids, (std::vector<int32_t>{7, -1, 70000}));
  EXPECT_EQ((*queue)[1].prompt_ids, TokenJob("b", "m", 5).prompt_token_ids);
  // Only the first asked for carry them.
  queue = store_->QueuedJobs("m", 10, 1);
  ASSERT_TRUE(queue.ok());
  ASSERT_EQ(queue->size(), 2u);
  EXPECT_EQ((*queue)[0].prompt_ids.size(), 3u);
  EXPECT_TRUE((*queue)[1].prompt_ids.empty());
  EXPECT_EQ((*queue)[1].kv_tokens, 5 + 8 - 1);
  EXPECT_TRUE(store_->QueuedJobs("m", 10, 0)->at(0).prompt_ids.empty());
}

// A submission's counts by state straight from its job rows.
std::map<JobState, int64_t> CountedByState(const std::string& path, int64_t submission_id) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "SELECT state, COUNT(*) FROM jobs WHERE submission_id = ? GROUP BY state",
                     -1, &stmt, nullptr);
  sqlite3_bind_int64(stmt, 1, submission_id);
  std::map<JobState, int64_t> counts;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    auto state = ParseJobState(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    if (state.ok()) counts[*state] = sqlite3_column_int64(stmt, 1);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return counts;
}

std::map<JobState, int64_t> NonZero(StateCounts counts) {
  std::map<JobState, int64_t> out;
  for (JobState state : {JobState::kQueued, JobState::kLeased, JobState::kRunning,
                         JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (counts.at(state) != 0) out[state] = counts.at(state);
  }
  return out;
}

TEST_F(StoreTest, ASubmissionsCountsFollowEveryStateChangeOfItsJobs) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m"),
                         TokenJob("d", "m"), TokenJob("e", "m")},
                        /*max_attempts=*/1);
  auto other = SubmitTokens({TokenJob("x", "m")});
  auto expect_counts = [&](std::map<JobState, int64_t> want) {
    auto submission = store_->GetSubmission(s.submission_id);
    ASSERT_TRUE(submission.ok()) << submission.status().ToString();
    EXPECT_EQ(NonZero(submission->counts), want);
    EXPECT_EQ(NonZero(submission->counts), CountedByState(dir_.file("state.db"), s.submission_id));
  };
  expect_counts({{JobState::kQueued, 5}});

  Lease lease = Lease1("w1", {s.job_ids[0], s.job_ids[1], s.job_ids[2], s.job_ids[3]});
  expect_counts({{JobState::kQueued, 1}, {JobState::kLeased, 4}});
  PassProgress pass;
  pass.batch_id = lease.batch_id;
  ASSERT_TRUE(store_->RecordProgress("w1", pass).ok());
  expect_counts({{JobState::kQueued, 1}, {JobState::kRunning, 4}});
  ASSERT_TRUE(store_->InsertResult(Result(lease, s.job_ids[0])).ok());
  ASSERT_TRUE(store_->InsertResult(Result(lease, s.job_ids[1], /*ok=*/false)).ok());
  ASSERT_TRUE(store_->HandBack("w1", lease.batch_id, {s.job_ids[2]}).ok());
  ASSERT_TRUE(store_->CancelJob(s.job_ids[4]).ok());
  expect_counts({{JobState::kQueued, 1},
                 {JobState::kRunning, 1},
                 {JobState::kSucceeded, 1},
                 {JobState::kFailed, 1},
                 {JobState::kCancelled, 1}});
  // The other submission's counts are its own.
  auto x = store_->GetSubmission(other.submission_id);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(NonZero(x->counts), (std::map<JobState, int64_t>{{JobState::kQueued, 1}}));
}

// Runs `sql` on the database file directly (as an older scheduler, or a
// hand, would have left it).
void Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

TEST_F(StoreTest, PromptTokensSumTheSucceededJobsOfTheSubmissionOnly) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m"),
                         TokenJob("d", "m"), TokenJob("e", "m")},
                        /*max_attempts=*/1);
  auto other = SubmitTokens({TokenJob("x", "m")});
  auto none = store_->SumPromptTokens(s.submission_id);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->jobs, 0);
  EXPECT_EQ(none->prompt_tokens, 0);
  EXPECT_EQ(none->cached_prompt_tokens, 0);

  Lease lease =
      Lease1("w1", {s.job_ids[0], s.job_ids[1], s.job_ids[2], s.job_ids[3], other.job_ids[0]});
  auto result = [&](int64_t job_id, int64_t prompt, int64_t cached, bool ok = true) {
    JobResult r = Result(lease, job_id, ok);
    r.output.prompt_tokens = prompt;
    r.output.cached_prompt_tokens = cached;
    ASSERT_TRUE(store_->InsertResult(r).ok());
  };
  result(s.job_ids[0], 100, 90);
  result(s.job_ids[1], 120, 90);
  result(s.job_ids[2], 50, 40, /*ok=*/false);  // failed: not counted
  result(s.job_ids[3], 30, 0);
  result(other.job_ids[0], 1000, 999);  // another submission's
  auto sum = store_->SumPromptTokens(s.submission_id);
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->jobs, 3);
  EXPECT_EQ(sum->prompt_tokens, 250);
  EXPECT_EQ(sum->cached_prompt_tokens, 180);

  // A row stored before cached_prompt_tokens existed counts its prompt
  // tokens and none of them cached.
  Exec(dir_.file("state.db"),
       "DROP TRIGGER results_insert_once; UPDATE results SET output = "
       "json_remove(output, '$.cached_prompt_tokens') WHERE job_id = " +
           std::to_string(s.job_ids[0]));
  auto old = store_->SumPromptTokens(s.submission_id);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->jobs, 3);
  EXPECT_EQ(old->prompt_tokens, 250);
  EXPECT_EQ(old->cached_prompt_tokens, 90);
  auto row = store_->GetResult(s.job_ids[0]);
  ASSERT_TRUE(row.ok() && row->has_value()) << row.status().ToString();
  EXPECT_EQ((*row)->output.cached_prompt_tokens, 0);

  EXPECT_EQ(store_->SumPromptTokens(999).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, LeaseTopUpProgressAndResult) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m")});
  Lease lease = Lease1("w1", {s.job_ids[0], s.job_ids[1]});
  ASSERT_EQ(lease.jobs.size(), 2u);
  EXPECT_EQ(lease.expires_at_ms, clock_.NowMs() + kLeaseMs);
  EXPECT_EQ(lease.jobs[0].tokens.prompt.size(), 4u);
  Job a = GetJob(s.job_ids[0]);
  EXPECT_EQ(a.state, JobState::kLeased);
  EXPECT_EQ(a.batch_id, lease.batch_id);
  EXPECT_EQ(a.worker_id, "w1");
  // Leased jobs cannot be leased again.
  EXPECT_EQ(store_->CreateBatch("w2", "m", {s.job_ids[0]}, kLeaseMs).status().code(),
            StatusCode::kFailedPrecondition);
  // A job of another model cannot join.
  auto n = SubmitTokens({TokenJob("n", "other")});
  EXPECT_FALSE(store_->TopUp(lease.batch_id, {n.job_ids[0]}).ok());

  auto topped = store_->TopUp(lease.batch_id, {s.job_ids[2]});
  ASSERT_TRUE(topped.ok()) << topped.status().ToString();
  EXPECT_EQ(topped->jobs.size(), 1u);

  PassProgress pass;
  pass.batch_id = lease.batch_id;
  pass.seconds = 2.5;
  pass.sequences = 3;
  EXPECT_EQ(store_->RecordProgress("w2", pass).status().code(), StatusCode::kFailedPrecondition);
  auto started = store_->RecordProgress("w1", pass);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->size(), 3u);
  EXPECT_EQ(GetJob(s.job_ids[2]).state, JobState::kRunning);
  EXPECT_TRUE(store_->RecordProgress("w1", pass)->empty());  // already running

  auto done = store_->InsertResult(Result(lease, s.job_ids[0]));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->from, JobState::kRunning);
  EXPECT_EQ(done->to, JobState::kSucceeded);
  auto failed = store_->InsertResult(Result(lease, s.job_ids[1], /*ok=*/false));
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(GetJob(s.job_ids[1]).state, JobState::kFailed);
  EXPECT_EQ(GetJob(s.job_ids[1]).reason, "engine said no");
  auto stored = store_->GetResult(s.job_ids[0]);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->output.text, "out " + std::to_string(s.job_ids[0]));
  EXPECT_EQ((*stored)->batch_id, lease.batch_id);
  EXPECT_FALSE(store_->GetResult(s.job_ids[2])->has_value());

  auto page = store_->ListJobs({s.submission_id, std::nullopt, "", true}, 0, 10);
  ASSERT_TRUE(page.ok());
  ASSERT_TRUE(page->jobs[0].result.has_value());
  EXPECT_TRUE(page->jobs[0].result->ok);
  ASSERT_TRUE(page->jobs[1].result.has_value());
  EXPECT_EQ(page->jobs[1].result->error, "engine said no");
  EXPECT_FALSE(page->jobs[2].result.has_value());

  ASSERT_TRUE(store_->InsertResult(Result(lease, s.job_ids[2])).ok());
  EXPECT_TRUE(store_->ActiveBatches()->empty());  // the batch finished with its last job
  EXPECT_TRUE(store_->GetSubmission(s.submission_id)->done());
  // The report of the pass that finished it comes after its results: kept,
  // starting nothing; another worker's report for it is still refused.
  pass.pass_index = 1;
  auto last = store_->RecordProgress("w1", pass);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE(last->empty());
  EXPECT_EQ(store_->RecentProgress(lease.batch_id, 10)->size(), 2u);
  EXPECT_EQ(store_->RecordProgress("w2", pass).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(StoreTest, ResultsAreInsertedOnceAndDuplicatesAreCounted) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m")});
  Lease lease = Lease1("w1", s.job_ids);
  ASSERT_TRUE(store_->InsertResult(Result(lease, s.job_ids[0])).ok());
  JobResult second = Result(lease, s.job_ids[0]);
  second.output.text = "different";
  auto refused = store_->InsertResult(second);
  EXPECT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->counters().duplicate_results, 1);
  EXPECT_EQ((*store_->GetResult(s.job_ids[0]))->output.text, "out " + std::to_string(s.job_ids[0]));
  // Another worker cannot report for this lease.
  JobResult stranger = Result(lease, s.job_ids[1]);
  stranger.worker_id = "w2";
  EXPECT_EQ(store_->InsertResult(stranger).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->counters().late_results, 1);
  JobResult unknown = Result(lease, 9999);
  EXPECT_EQ(store_->InsertResult(unknown).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, OutputTextThatIsNotUtf8IsStoredWithReplacementCharacters) {
  auto s = SubmitTokens({TokenJob("a", "m")});
  Lease lease = Lease1("w1", s.job_ids);
  JobResult result = Result(lease, s.job_ids[0]);
  result.output.text = "ok \xe2\x82";  // a character cut in half
  ASSERT_TRUE(store_->InsertResult(result).ok());
  EXPECT_EQ((*store_->GetResult(s.job_ids[0]))->output.text, "ok \xef\xbf\xbd");
}

TEST_F(StoreTest, ExpiredLeaseRequeuesWithAttemptThenFails) {
  auto s = SubmitTokens({TokenJob("a", "m")}, /*max_attempts=*/2);
  const int64_t id = s.job_ids[0];
  Lease first = Lease1("w1", {id});
  clock_.Advance(kLeaseMs - 1);
  EXPECT_TRUE(store_->ExpireLeases()->empty());
  ASSERT_TRUE(store_->ExtendLeases("w1", kLeaseMs).ok());
  clock_.Advance(kLeaseMs - 1);
  EXPECT_TRUE(store_->ExpireLeases()->empty());  // the heartbeat moved the expiry
  clock_.Advance(1);
  auto expired = store_->ExpireLeases();
  ASSERT_TRUE(expired.ok());
  ASSERT_EQ(expired->size(), 1u);
  EXPECT_EQ((*expired)[0].to, JobState::kQueued);
  EXPECT_EQ((*expired)[0].batch_id, first.batch_id);
  Job job = GetJob(id);
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(job.batch_id, 0);
  EXPECT_NE(job.reason.find("queued again"), std::string::npos) << job.reason;
  EXPECT_EQ(store_->counters().lease_expirations, 1);

  // The first worker's late result is refused, and counted.
  EXPECT_EQ(store_->InsertResult(Result(first, id)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->counters().late_results, 1);

  Lease second = Lease1("w2", {id});
  clock_.Advance(kLeaseMs);
  expired = store_->ExpireLeases();
  ASSERT_EQ(expired->size(), 1u);
  EXPECT_EQ((*expired)[0].to, JobState::kFailed);
  job = GetJob(id);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.attempt, 2);
  EXPECT_NE(job.reason.find("no attempts left"), std::string::npos) << job.reason;
  EXPECT_EQ(store_->InsertResult(Result(second, id)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store_->GetResult(id)->has_value());
}

TEST_F(StoreTest, ReattachExpiresOnlyBatchesTheWorkerNoLongerRuns) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m")});
  Lease kept = Lease1("w1", {s.job_ids[0]});
  Lease lost = Lease1("w1", {s.job_ids[1]});
  auto changes = store_->ExpireWorkerBatches("w1", {kept.batch_id});
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].job_id, s.job_ids[1]);
  EXPECT_EQ((*changes)[0].batch_id, lost.batch_id);
  EXPECT_EQ(GetJob(s.job_ids[0]).state, JobState::kLeased);
  EXPECT_EQ(GetJob(s.job_ids[1]).attempt, 1);
  auto active = store_->ActiveBatches();
  ASSERT_EQ(active->size(), 1u);
  EXPECT_EQ((*active)[0].batch_id, kept.batch_id);
  EXPECT_EQ((*active)[0].jobs.size(), 1u);
}

TEST_F(StoreTest, HandBackRequeuesWithoutCostingAnAttempt) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m")});
  Lease lease = Lease1("w1", s.job_ids);
  EXPECT_FALSE(store_->HandBack("w2", lease.batch_id, s.job_ids).ok());
  auto back = store_->HandBack("w1", lease.batch_id, {s.job_ids[1]});
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 1u);
  Job b = GetJob(s.job_ids[1]);
  EXPECT_EQ(b.state, JobState::kQueued);
  EXPECT_EQ(b.attempt, 0);
  EXPECT_EQ(store_->ActiveBatches()->size(), 1u);
  ASSERT_TRUE(store_->HandBack("w1", lease.batch_id, {s.job_ids[0]}).ok());
  EXPECT_TRUE(store_->ActiveBatches()->empty());
}

// Jobs a worker could not run (its checkpoint read failed mid-pass) cost an
// attempt each: queued again while some are left, then failed with the
// worker's error as the reason.
TEST_F(StoreTest, AHandBackWithAnErrorCostsAnAttemptAndTheLastOneFailsTheJob) {
  auto s = SubmitTokens({TokenJob("a", "m")}, /*max_attempts=*/2);
  const std::string error = "data_loss: model.safetensors: read at offset 0 failed: I/O error";
  Lease first = Lease1("w1", s.job_ids);
  auto back = store_->HandBack("w1", first.batch_id, s.job_ids, error);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].to, JobState::kQueued);
  Job job = GetJob(s.job_ids[0]);
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_NE(job.reason.find("worker w1 could not run it: " + error + " (attempt 1 of 2)"),
            std::string::npos)
      << job.reason;
  EXPECT_TRUE(store_->ActiveBatches()->empty());

  Lease second = Lease1("w1", s.job_ids);
  back = store_->HandBack("w1", second.batch_id, s.job_ids, error);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)[0].to, JobState::kFailed);
  job = GetJob(s.job_ids[0]);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.attempt, 2);
  EXPECT_NE(job.reason.find(error), std::string::npos) << job.reason;
  EXPECT_NE(job.reason.find("no attempts left"), std::string::npos) << job.reason;
}

TEST_F(StoreTest, CancelSubmissionCancelsUnfinishedJobsAndNamesTheirBatches) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m")});
  Lease lease = Lease1("w1", {s.job_ids[0], s.job_ids[1]});
  ASSERT_TRUE(store_->InsertResult(Result(lease, s.job_ids[0])).ok());
  auto changes = store_->CancelSubmission(s.submission_id);
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  ASSERT_EQ(changes->size(), 2u);
  EXPECT_EQ((*changes)[0].job_id, s.job_ids[1]);
  EXPECT_EQ((*changes)[0].batch_id, lease.batch_id);
  EXPECT_EQ((*changes)[0].worker_id, "w1");
  EXPECT_EQ((*changes)[1].batch_id, 0);
  auto submission = store_->GetSubmission(s.submission_id);
  EXPECT_EQ(submission->counts.succeeded, 1);
  EXPECT_EQ(submission->counts.cancelled, 2);
  EXPECT_TRUE(submission->done());
  EXPECT_TRUE(store_->ActiveBatches()->empty());
  // The worker's result for the cancelled job is refused.
  EXPECT_FALSE(store_->InsertResult(Result(lease, s.job_ids[1])).ok());
  EXPECT_EQ(store_->CancelSubmission(4242).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->CancelJob(s.job_ids[2])->empty());  // already cancelled
}

TEST_F(StoreTest, TokenisationMakesWaitingJobsSchedulableOrFailsThem) {
  SubmitChunk chunk;
  for (const char* id : {"a", "b"}) {
    JobSpec spec = TokenJob(id, "m", 0, 5);
    spec.prompt_kind = PromptKind::kText;
    spec.prompt_text = "hello";
    chunk.jobs.push_back({spec, std::nullopt, "waiting for a worker that serves m", 3});
  }
  auto s = store_->Submit(chunk);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetJob(s->job_ids[0]).reason, "waiting for a worker that serves m");
  auto waiting = store_->UntokenisedJobs("m", 10);
  ASSERT_EQ(waiting->size(), 2u);
  EXPECT_TRUE(store_->UntokenisedJobs("n", 10)->empty());
  auto failures = store_->ApplyTokenisation(
      {{s->job_ids[0], true, {{1, 2, 3}, {}}, ""},
       {s->job_ids[1], false, {}, "prompt of 9000 tokens exceeds the context of 4096"}});
  ASSERT_TRUE(failures.ok());
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].to, JobState::kFailed);
  Job a = GetJob(s->job_ids[0]);
  EXPECT_TRUE(a.tokenised);
  EXPECT_EQ(a.kv_tokens, 3 + 5 - 1);
  EXPECT_EQ(a.reason, "");
  EXPECT_EQ(GetJob(s->job_ids[1]).reason, "prompt of 9000 tokens exceeds the context of 4096");
  EXPECT_EQ(store_->QueuedJobs("m", 10, 10)->size(), 1u);
  EXPECT_TRUE(store_->UntokenisedJobs("m", 10)->empty());
}

TEST_F(StoreTest, FailQueuedSkipsJobsThatMoved) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m")});
  Lease1("w1", {s.job_ids[0]});
  auto failed = store_->FailQueued(s.job_ids, "needs more KV than any worker has");
  ASSERT_TRUE(failed.ok());
  ASSERT_EQ(failed->size(), 1u);
  EXPECT_EQ((*failed)[0].job_id, s.job_ids[1]);
  EXPECT_EQ(GetJob(s.job_ids[0]).state, JobState::kLeased);
}

// ---------------------------------------------------------------- workers, tokenizers, progress

TEST_F(StoreTest, AttachCountsSessionsAndReplacesModels) {
  auto first = store_->AttachWorker(Worker("w1", 1 << 20, {Offer("m"), Offer("n")}));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 1);
  auto second = store_->AttachWorker(Worker("w1", 2 << 20, {Offer("n", 77)}));
  EXPECT_EQ(*second, 2);
  // The stale session's detach does nothing.
  ASSERT_TRUE(store_->DetachWorker("w1", 1).ok());
  auto workers = store_->ListWorkers();
  ASSERT_EQ(workers->size(), 1u);
  const WorkerInfo& w = (*workers)[0];
  EXPECT_TRUE(w.connected);
  EXPECT_EQ(w.session, 2);
  EXPECT_EQ(w.kv_budget_bytes, 2 << 20);
  ASSERT_EQ(w.models.size(), 1u);
  EXPECT_EQ(w.models[0].name, "n");
  EXPECT_EQ(w.models[0].kv_bytes_per_token, 77);
  ASSERT_TRUE(store_->DetachWorker("w1", 2).ok());
  EXPECT_FALSE((*store_->ListWorkers())[0].connected);
}

TEST_F(StoreTest, TokenizersAreCachedByHash) {
  TokenizerFiles tokenizer{{{"tokenizer.json", "{\"model\": {}}"}}, {2, 7}};
  ASSERT_TRUE(store_->PutTokenizer(tokenizer).ok());
  ASSERT_TRUE(store_->PutTokenizer(tokenizer).ok());
  auto back = store_->GetTokenizer(TokenizerHash(tokenizer));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->files, tokenizer.files);
  EXPECT_EQ(back->eos_ids, tokenizer.eos_ids);
  EXPECT_EQ(store_->GetTokenizer("nope").status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, ProgressRetentionIsBounded) {
  store_.reset();
  StoreOptions options;
  options.progress_passes_kept = 3;
  options.progress_retention_ms = 60'000;
  store_ = OpenStore(options);
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m")});
  Lease old_batch = Lease1("w1", {s.job_ids[0]});
  PassProgress pass;
  pass.batch_id = old_batch.batch_id;
  ASSERT_TRUE(store_->RecordProgress("w1", pass).ok());
  clock_.Advance(61'000);
  Lease lease = Lease1("w1", {s.job_ids[1]});
  for (int i = 0; i < 10; ++i) {
    pass.batch_id = lease.batch_id;
    pass.pass_index = i;
    pass.seconds = i;
    ASSERT_TRUE(store_->RecordProgress("w1", pass).ok());
  }
  auto samples = store_->RecentProgress(lease.batch_id, 100);
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[0].pass_index, 7);
  EXPECT_EQ((*samples)[2].seconds, 9);
  EXPECT_TRUE(store_->RecentProgress(old_batch.batch_id, 100)->empty());  // aged out
}

}  // namespace
}  // namespace nightshift::scheduler

namespace nightshift::scheduler {
namespace {

TEST_F(StoreTest, SubmissionQueriesForTheEta) {
  SubmitChunk chunk;
  chunk.jobs.push_back({TokenJob("a", "m"), TokensOf(TokenJob("a", "m")), "", 3});
  chunk.jobs.push_back({TokenJob("b", "n"), TokensOf(TokenJob("b", "n")), "", 3});
  chunk.jobs.push_back({TokenJob("c", "k"), std::nullopt, "waiting", 3});
  auto s = store_->Submit(chunk);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*store_->QueuedModelsOf(s->submission_id), (std::vector<std::string>{"m", "n"}));
  EXPECT_EQ(*store_->CountUntokenised(s->submission_id), 1);
  Lease1("w", {s->job_ids[0]});
  EXPECT_EQ(*store_->QueuedModelsOf(s->submission_id), (std::vector<std::string>{"n"}));
}

TEST_F(StoreTest, WithdrawModelRemovesOneOffer) {
  ASSERT_TRUE(store_->AttachWorker(Worker("w1", 1 << 20, {Offer("m"), Offer("n")})).ok());
  ASSERT_TRUE(store_->WithdrawModel("w1", "m").ok());
  auto workers = store_->ListWorkers();
  ASSERT_EQ((*workers)[0].models.size(), 1u);
  EXPECT_EQ((*workers)[0].models[0].name, "n");
}

}  // namespace
}  // namespace nightshift::scheduler

namespace nightshift::scheduler {
namespace {

TEST_F(StoreTest, ResultsOfAPassCommitTogetherAndRefusalsStayAlone) {
  auto s = SubmitTokens({TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m")});
  Lease lease = Lease1("w1", s.job_ids);
  ASSERT_TRUE(store_->InsertResult(Result(lease, s.job_ids[0])).ok());
  JobResult stranger = Result(lease, s.job_ids[2]);
  stranger.worker_id = "w2";
  auto outcomes = store_->InsertResults(
      {Result(lease, s.job_ids[0]), Result(lease, s.job_ids[1]), stranger, Result(lease, 999)});
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  ASSERT_EQ(outcomes->size(), 4u);
  EXPECT_EQ((*outcomes)[0].status.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE((*outcomes)[1].status.ok());
  EXPECT_EQ((*outcomes)[1].change.to, JobState::kSucceeded);
  EXPECT_EQ((*outcomes)[2].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*outcomes)[3].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(GetJob(s.job_ids[1]).state, JobState::kSucceeded);
  EXPECT_EQ(GetJob(s.job_ids[2]).state, JobState::kLeased);
  EXPECT_EQ(store_->counters().duplicate_results, 1);
  EXPECT_EQ(store_->counters().late_results, 1);
}

}  // namespace
}  // namespace nightshift::scheduler

// ---------------------------------------------------------------- a full disk

namespace nightshift::scheduler {
namespace {

TEST(DiskFullTest, SqliteFullAndEnospcAreResourceExhaustedNamingTheDisk) {
  const int64_t before = DiskFullCount();
  const Status full = sqlite::FromCode(nullptr, SQLITE_FULL, "commit");
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(IsDiskFull(full));
  EXPECT_EQ(
      full.message().rfind("the scheduler's disk is full: commit: database or disk is full", 0), 0u)
      << full.message();
  EXPECT_EQ(DiskFullCount(), before + 1);
  EXPECT_TRUE(IsDiskFull(FileError("writing the upload", ENOSPC)));
  EXPECT_TRUE(IsDiskFull(FileError("writing the upload", EDQUOT)));
  EXPECT_TRUE(IsDiskFull(full.Prefixed("storing the submission")));
  EXPECT_EQ(DiskFullCount(), before + 3);
  // Other failures keep their codes and are not counted.
  EXPECT_EQ(FileError("writing the upload", EIO).code(), StatusCode::kUnavailable);
  EXPECT_EQ(sqlite::FromCode(nullptr, SQLITE_BUSY, "x").code(), StatusCode::kUnavailable);
  EXPECT_FALSE(IsDiskFull(ResourceExhausted("the KV budget does not allow it")));
  EXPECT_EQ(DiskFullCount(), before + 3);
}

// A database on a tmpfs filled to its last KiB: the submission that does not
// fit is refused whole as a full disk, every job acknowledged before is
// still there, the database is intact, and once space is freed the same
// submission goes through.
TEST(DiskFullTest, ASubmitOnAFullDiskIsRefusedWholeAndLosesNothingAcknowledged) {
  std::string why;
  auto fs = testutil::TinyFilesystem::Mount(8 << 20, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  FakeClock clock;
  auto opened = Store::Open(fs->file("state.db"), &clock);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> store = std::move(opened).value();
  ASSERT_TRUE(fs->Fill(256 << 10)) << fs->FreeBytes();

  const auto chunk_of = [](int n, int first) {
    SubmitChunk chunk;
    for (int i = 0; i < n; ++i) {
      JobSpec spec = TokenJob("j" + std::to_string(first + i), "m", 200);
      chunk.jobs.push_back({spec, TokensOf(spec), "", 3});
    }
    return chunk;
  };
  std::set<int64_t> acknowledged;
  Status refused;
  int next = 0;
  for (int round = 0; round < 10'000 && refused.ok(); ++round, next += 50) {
    auto outcome = store->Submit(chunk_of(50, next));
    if (outcome.ok()) {
      acknowledged.insert(outcome->job_ids.begin(), outcome->job_ids.end());
    } else {
      refused = outcome.status();
    }
  }
  ASSERT_FALSE(refused.ok()) << "the disk never filled";
  ASSERT_FALSE(acknowledged.empty());
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_TRUE(IsDiskFull(refused)) << refused.ToString();
  EXPECT_EQ(refused.message().rfind("the scheduler's disk is full: ", 0), 0u) << refused.message();

  // Exactly the acknowledged jobs: none lost, none of the refused chunk kept.
  std::set<int64_t> stored;
  int64_t after = 0;
  while (true) {
    auto page = store->ListJobs({}, after, 1000);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const JobView& view : page->jobs) stored.insert(view.job.id);
    if (page->next_after_id == 0 || page->jobs.empty()) break;
    after = page->next_after_id;
  }
  EXPECT_EQ(stored, acknowledged);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(fs->file("state.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "ok");
  sqlite3_finalize(stmt);
  sqlite3_close(db);

  fs->Free();
  auto retried = store->Submit(chunk_of(50, next - 50));
  EXPECT_TRUE(retried.ok()) << retried.status().ToString();
}

}  // namespace
}  // namespace nightshift::scheduler
