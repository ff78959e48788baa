#include "scheduler/store.h"

#include <algorithm>
#include <set>

#include "scheduler/codec.h"
#include "scheduler/sqlite.h"

namespace nightshift::scheduler {

using nlohmann::json;
using sqlite::Query;
using sqlite::Transaction;

namespace {

// JSON text for a column. Strings that are not UTF-8 (a worker's bytes) are
// stored with U+FFFD in place of the bad bytes instead of throwing.
std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

constexpr char kJobColumns[] =
    "j.id, j.submission_id, j.idx, j.spec, j.state, j.attempt, j.max_attempts, "
    "j.batch_id, j.worker_id, j.reason, j.prompt_tokens, j.label_tokens, j.kv_tokens, "
    "j.created_at_ms, j.updated_at_ms, j.first_leased_at_ms";
constexpr int kJobColumnCount = 16;

constexpr char kResultColumns[] =
    "r.job_id, r.batch_id, r.worker_id, r.ok, r.output, r.error, r.created_at_ms";

constexpr char kUnfinished[] = "('queued', 'leased', 'running')";

std::string Join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

// Reads the kJobColumns of the current row starting at column 0.
StatusOr<Job> ReadJobRow(Query& q) {
  Job job;
  job.id = q.Int(0);
  job.submission_id = q.Int(1);
  job.index = q.Int(2);
  NS_ASSIGN_OR_RETURN(json spec, ParseStoredJson(q.Text(3), "job spec"));
  NS_ASSIGN_OR_RETURN(job.spec, SpecFromJson(spec));
  auto state = ParseJobState(q.Text(4));
  if (!state.ok())
    return DataLoss("stored job " + std::to_string(job.id) + ": " + state.status().message());
  job.state = *state;
  job.attempt = static_cast<int32_t>(q.Int(5));
  job.max_attempts = static_cast<int32_t>(q.Int(6));
  job.batch_id = q.IsNull(7) ? 0 : q.Int(7);
  job.worker_id = q.Text(8);
  job.reason = q.Text(9);
  job.tokenised = !q.IsNull(12);
  if (job.tokenised) {
    NS_ASSIGN_OR_RETURN(job.tokens.prompt, UnpackTokens(q.Blob(10)));
    NS_ASSIGN_OR_RETURN(json labels, ParseStoredJson(q.Text(11), "label tokens"));
    try {
      job.tokens.labels = labels.get<std::vector<std::vector<int32_t>>>();
    } catch (const json::exception& e) {
      return DataLoss(std::string("stored label tokens: ") + e.what());
    }
    job.kv_tokens = q.Int(12);
  }
  job.created_at_ms = q.Int(13);
  job.updated_at_ms = q.Int(14);
  job.first_leased_at_ms = q.IsNull(15) ? 0 : q.Int(15);
  return job;
}

// Reads kResultColumns starting at column `first`.
StatusOr<JobResult> ReadResultRow(Query& q, int first) {
  JobResult result;
  result.job_id = q.Int(first);
  result.batch_id = q.Int(first + 1);
  result.worker_id = q.Text(first + 2);
  result.ok = q.Int(first + 3) != 0;
  if (result.ok) {
    NS_ASSIGN_OR_RETURN(json output, ParseStoredJson(q.Text(first + 4), "job output"));
    NS_ASSIGN_OR_RETURN(result.output, OutputFromJson(output));
  } else {
    result.error = q.Text(first + 5);
  }
  result.created_at_ms = q.Int(first + 6);
  return result;
}

Status CheckMigrations(const std::vector<Migration>& migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int64_t>(i + 1)) {
      return Internal("migration '" + migrations[i].name + "' has version " +
                      std::to_string(migrations[i].version) + ", expected " +
                      std::to_string(i + 1) + " (numbered from 1 without gaps)");
    }
  }
  return Status::Ok();
}

}  // namespace

Store::Store(std::unique_ptr<sqlite::Db> db, Clock* clock, StoreOptions options)
    : db_(std::move(db)), clock_(clock), options_(options) {}

Store::~Store() = default;

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path, Clock* clock,
                                             StoreOptions options) {
  return Open(path, clock, options, BuiltinMigrations());
}

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path, Clock* clock,
                                             StoreOptions options,
                                             const std::vector<Migration>& migrations) {
  NS_RETURN_IF_ERROR(CheckMigrations(migrations));
  NS_ASSIGN_OR_RETURN(auto db, sqlite::Db::Open(path, options.busy_timeout_ms));
  // WAL + synchronous=FULL: a committed transaction is on disk before COMMIT returns.
  NS_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL").Prefixed(path));
  {
    Query mode(*db, "PRAGMA journal_mode");
    if (!mode.Next() || mode.Text(0) != "wal") {
      NS_RETURN_IF_ERROR(mode.status().Prefixed(path));
      return Unavailable(path + ": the database cannot use write-ahead logging");
    }
  }
  NS_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON").Prefixed(path));
  std::unique_ptr<Store> store(new Store(std::move(db), clock, options));
  NS_RETURN_IF_ERROR(store->Migrate(migrations).Prefixed(path));
  return store;
}

Status Store::Migrate(const std::vector<Migration>& migrations) {
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  NS_RETURN_IF_ERROR(
      db_->Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)"));
  const int64_t known = static_cast<int64_t>(migrations.size());
  int64_t applied = 0;
  {
    Query q(*db_, "SELECT version, name FROM schema_migrations ORDER BY version");
    while (q.Next()) {
      const int64_t version = q.Int(0);
      if (version > known) {
        return FailedPrecondition("the database has schema version " + std::to_string(version) +
                                  " but this scheduler knows versions up to " +
                                  std::to_string(known) +
                                  "; it was written by a newer nightshift-scheduler");
      }
      if (version != applied + 1 || q.Text(1) != migrations[version - 1].name) {
        return FailedPrecondition("the database's migration history (version " +
                                  std::to_string(version) + " '" + q.Text(1) +
                                  "') does not match this scheduler's migrations");
      }
      applied = version;
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  for (int64_t v = applied + 1; v <= known; ++v) {
    const Migration& m = migrations[v - 1];
    NS_RETURN_IF_ERROR(db_->Exec(m.sql).Prefixed("migration " + m.name));
    Query q(*db_, "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)");
    NS_RETURN_IF_ERROR(q.Bind(1, v).Bind(2, m.name).Bind(3, clock_->NowMs()).Run());
  }
  NS_RETURN_IF_ERROR(tx.Commit());
  schema_version_ = known;
  return Status::Ok();
}

StoreCounters Store::counters() const {
  return {duplicate_results_.load(), late_results_.load(), lease_expirations_.load()};
}

// ---------------------------------------------------------------- helpers

StatusOr<Job> Store::ReadJob(int64_t id) {
  Query q(*db_, std::string("SELECT ") + kJobColumns + " FROM jobs j WHERE j.id = ?");
  q.Bind(1, id);
  if (!q.Next()) {
    NS_RETURN_IF_ERROR(q.status());
    return NotFound("no job " + std::to_string(id));
  }
  return ReadJobRow(q);
}

Status Store::SetState(int64_t job_id, JobState from, JobEvent event, int64_t batch_id,
                       const std::string& reason, int32_t attempt_delta, JobState* to) {
  NS_ASSIGN_OR_RETURN(JobState next, Transition(from, event));
  Query q(*db_,
          "UPDATE jobs SET state = ?, batch_id = ?, reason = ?, attempt = attempt + ?, "
          "updated_at_ms = ? WHERE id = ? AND state = ?");
  q.Bind(1, JobStateName(next));
  if (batch_id != 0) {
    q.Bind(2, batch_id);
  } else {
    q.BindNull(2);
  }
  q.Bind(3, reason).Bind(4, attempt_delta).Bind(5, clock_->NowMs()).Bind(6, job_id);
  q.Bind(7, JobStateName(from));
  NS_RETURN_IF_ERROR(q.Run());
  if (db_->Changes() != 1) {
    return Internal("job " + std::to_string(job_id) + " was not " + JobStateName(from));
  }
  if (to != nullptr) *to = next;
  return Status::Ok();
}

Status Store::EndBatch(int64_t batch_id, BatchState end, bool only_if_empty) {
  std::string sql = "UPDATE batches SET state = ?, ended_at_ms = ? WHERE id = ? AND state = ?";
  if (only_if_empty) sql += " AND NOT EXISTS (SELECT 1 FROM jobs WHERE batch_id = ?3)";
  Query q(*db_, sql);
  q.Bind(1, BatchStateName(end)).Bind(2, clock_->NowMs()).Bind(3, batch_id);
  return q.Bind(4, BatchStateName(BatchState::kActive)).Run();
}

// ---------------------------------------------------------------- submissions

StatusOr<SubmitOutcome> Store::Submit(const SubmitChunk& chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  const int64_t now = clock_->NowMs();
  SubmitOutcome outcome;
  int64_t next_index = 0;
  if (chunk.submission_id == 0) {
    if (!chunk.idempotency_key.empty()) {
      Query q(*db_, "SELECT id FROM submissions WHERE idempotency_key = ?");
      if (q.Bind(1, chunk.idempotency_key).Next()) {
        outcome.submission_id = q.Int(0);
        outcome.replayed = true;
        return outcome;
      }
      NS_RETURN_IF_ERROR(q.status());
    }
    Query q(*db_,
            "INSERT INTO submissions (created_at_ms, sealed, idempotency_key) VALUES (?, ?, ?)");
    q.Bind(1, now).Bind(2, chunk.keep_open ? 0 : 1);
    if (chunk.idempotency_key.empty()) {
      q.BindNull(3);
    } else {
      q.Bind(3, chunk.idempotency_key);
    }
    NS_RETURN_IF_ERROR(q.Run());
    outcome.submission_id = db_->LastInsertRowid();
  } else {
    outcome.submission_id = chunk.submission_id;
    Query q(
        *db_,
        "SELECT s.sealed, (SELECT COALESCE(MAX(idx) + 1, 0) FROM jobs WHERE submission_id = s.id) "
        "FROM submissions s WHERE s.id = ?");
    if (!q.Bind(1, chunk.submission_id).Next()) {
      NS_RETURN_IF_ERROR(q.status());
      return NotFound("no submission " + std::to_string(chunk.submission_id));
    }
    if (q.Int(0) != 0) {
      return FailedPrecondition("submission " + std::to_string(chunk.submission_id) +
                                " is sealed; it takes no more jobs");
    }
    next_index = q.Int(1);
    if (!chunk.keep_open) {
      Query seal(*db_, "UPDATE submissions SET sealed = 1 WHERE id = ?");
      NS_RETURN_IF_ERROR(seal.Bind(1, chunk.submission_id).Run());
    }
  }
  std::vector<std::string> errors;
  for (size_t i = 0; i < chunk.jobs.size(); ++i) {
    const NewJob& job = chunk.jobs[i];
    Query q(
        *db_,
        "INSERT INTO jobs (submission_id, idx, custom_id, model, priority, spec, prompt_tokens, "
        "label_tokens, kv_tokens, passes, state, max_attempts, reason, created_at_ms, "
        "updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)");
    q.Bind(1, outcome.submission_id).Bind(2, next_index + static_cast<int64_t>(i));
    q.Bind(3, job.spec.custom_id).Bind(4, job.spec.model).Bind(5, job.spec.priority);
    q.Bind(6, Dump(SpecToJson(job.spec)));
    if (job.tokens) {
      const std::string blob = PackTokens(job.tokens->prompt);
      q.BindBlob(7, blob.data(), blob.size());
      q.Bind(8, Dump(json(job.tokens->labels))).Bind(9, KvTokens(job.spec, *job.tokens));
    } else {
      q.BindNull(7).BindNull(8).BindNull(9);
    }
    q.Bind(10, PassesNeeded(job.spec)).Bind(11, job.max_attempts).Bind(12, job.reason);
    q.Bind(13, now).Bind(14, now);
    Status status = q.Run();
    if (q.raw_code() == SQLITE_CONSTRAINT_UNIQUE) {
      errors.push_back("job " + std::to_string(i) + ": custom_id '" + job.spec.custom_id +
                       "' is already used in submission " + std::to_string(outcome.submission_id));
      continue;
    }
    NS_RETURN_IF_ERROR(status.Prefixed("job " + std::to_string(i)));
    outcome.job_ids.push_back(db_->LastInsertRowid());
  }
  if (!errors.empty()) return InvalidArgument(Join(errors, "; "));
  NS_RETURN_IF_ERROR(tx.Commit());
  return outcome;
}

StatusOr<Submission> Store::GetSubmission(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Submission submission;
  {
    Query q(*db_,
            "SELECT created_at_ms, sealed, COALESCE(idempotency_key, '') FROM submissions "
            "WHERE id = ?");
    if (!q.Bind(1, id).Next()) {
      NS_RETURN_IF_ERROR(q.status());
      return NotFound("no submission " + std::to_string(id));
    }
    submission.id = id;
    submission.created_at_ms = q.Int(0);
    submission.sealed = q.Int(1) != 0;
    submission.idempotency_key = q.Text(2);
  }
  // Kept by triggers (migration 0005): O(states), not O(jobs).
  Query q(*db_, "SELECT state, n FROM submission_counts WHERE submission_id = ?");
  q.Bind(1, id);
  while (q.Next()) {
    NS_ASSIGN_OR_RETURN(JobState state, ParseJobState(q.Text(0)));
    submission.counts.at(state) = q.Int(1);
  }
  NS_RETURN_IF_ERROR(q.status());
  return submission;
}

StatusOr<PromptTokenUsage> Store::SumPromptTokens(int64_t submission_id) {
  std::lock_guard<std::mutex> lock(mu_);
  {
    Query q(*db_, "SELECT 1 FROM submissions WHERE id = ?");
    if (!q.Bind(1, submission_id).Next()) {
      NS_RETURN_IF_ERROR(q.status());
      return NotFound("no submission " + std::to_string(submission_id));
    }
  }
  // The output column holds JobOutput as JSON (codec.cc OutputToJson);
  // json_extract gives NULL for a key an older row lacks, which SUM skips.
  Query q(*db_,
          "SELECT COUNT(*), COALESCE(SUM(json_extract(r.output, '$.prompt_tokens')), 0), "
          "COALESCE(SUM(json_extract(r.output, '$.cached_prompt_tokens')), 0) "
          "FROM jobs j INDEXED BY jobs_submission_state JOIN results r ON r.job_id = j.id "
          "WHERE j.submission_id = ? AND j.state = 'succeeded' AND r.ok = 1");
  q.Bind(1, submission_id);
  PromptTokenUsage usage;
  if (q.Next()) {
    usage.jobs = q.Int(0);
    usage.prompt_tokens = q.Int(1);
    usage.cached_prompt_tokens = q.Int(2);
  }
  NS_RETURN_IF_ERROR(q.status());
  return usage;
}

StatusOr<Job> Store::GetJob(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return ReadJob(id);
}

StatusOr<JobPage> Store::ListJobs(const JobFilter& filter, int64_t after_id, int limit) {
  if (limit <= 0) return InvalidArgument("page size must be positive");
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT ") + kJobColumns;
  if (filter.with_results) sql += std::string(", ") + kResultColumns;
  sql += " FROM jobs j";
  if (filter.with_results) sql += " LEFT JOIN results r ON r.job_id = j.id";
  sql += " WHERE j.id > ?";
  if (filter.submission_id != 0) sql += " AND j.submission_id = ?";
  if (filter.state) sql += " AND j.state = ?";
  if (!filter.model.empty()) sql += " AND j.model = ?";
  sql += " ORDER BY j.id LIMIT ?";
  Query q(*db_, sql);
  int param = 1;
  q.Bind(param++, after_id);
  if (filter.submission_id != 0) q.Bind(param++, filter.submission_id);
  if (filter.state) q.Bind(param++, JobStateName(*filter.state));
  if (!filter.model.empty()) q.Bind(param++, filter.model);
  q.Bind(param++, static_cast<int64_t>(limit) + 1);
  JobPage page;
  while (q.Next()) {
    if (static_cast<int>(page.jobs.size()) == limit) {
      page.next_after_id = page.jobs.back().job.id;
      break;
    }
    JobView view;
    NS_ASSIGN_OR_RETURN(view.job, ReadJobRow(q));
    if (filter.with_results && !q.IsNull(kJobColumnCount)) {
      NS_ASSIGN_OR_RETURN(view.result, ReadResultRow(q, kJobColumnCount));
    }
    page.jobs.push_back(std::move(view));
  }
  NS_RETURN_IF_ERROR(q.status());
  return page;
}

StatusOr<std::vector<JobChange>> Store::CancelWhere(const std::string& where_sql, int64_t id,
                                                    const std::string& reason) {
  std::vector<JobChange> changes;
  {
    Query q(*db_,
            "SELECT id, submission_id, state, COALESCE(batch_id, 0), COALESCE(worker_id, '') "
            "FROM jobs WHERE " +
                where_sql + " AND state IN " + kUnfinished);
    q.Bind(1, id);
    while (q.Next()) {
      JobChange change;
      change.job_id = q.Int(0);
      change.submission_id = q.Int(1);
      NS_ASSIGN_OR_RETURN(change.from, ParseJobState(q.Text(2)));
      change.batch_id = q.Int(3);
      change.worker_id = q.Text(4);
      change.reason = reason;
      changes.push_back(std::move(change));
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  std::set<int64_t> batches;
  for (JobChange& change : changes) {
    NS_RETURN_IF_ERROR(
        SetState(change.job_id, change.from, JobEvent::kCancel, 0, change.reason, 0, &change.to));
    if (change.batch_id != 0) batches.insert(change.batch_id);
  }
  for (int64_t batch : batches)
    NS_RETURN_IF_ERROR(EndBatch(batch, BatchState::kFinished, /*only_if_empty=*/true));
  return changes;
}

StatusOr<std::vector<JobChange>> Store::CancelSubmission(int64_t id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Query seal(*db_, "UPDATE submissions SET sealed = 1 WHERE id = ?");
  NS_RETURN_IF_ERROR(seal.Bind(1, id).Run());
  if (db_->Changes() == 0) return NotFound("no submission " + std::to_string(id));
  NS_ASSIGN_OR_RETURN(auto changes, CancelWhere("submission_id = ?", id, reason));
  NS_RETURN_IF_ERROR(tx.Commit());
  return changes;
}

StatusOr<std::vector<JobChange>> Store::CancelJob(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  NS_RETURN_IF_ERROR(ReadJob(id).status());
  NS_ASSIGN_OR_RETURN(auto changes, CancelWhere("id = ?", id, "cancelled"));
  NS_RETURN_IF_ERROR(tx.Commit());
  return changes;
}

// ---------------------------------------------------------------- tokenisation

StatusOr<std::vector<Job>> Store::UntokenisedJobs(const std::string& model, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_, std::string("SELECT ") + kJobColumns +
                    " FROM jobs j WHERE j.model = ? AND j.state = 'queued' AND j.kv_tokens IS NULL "
                    "ORDER BY j.id LIMIT ?");
  q.Bind(1, model).Bind(2, limit);
  std::vector<Job> jobs;
  while (q.Next()) {
    NS_ASSIGN_OR_RETURN(Job job, ReadJobRow(q));
    jobs.push_back(std::move(job));
  }
  NS_RETURN_IF_ERROR(q.status());
  return jobs;
}

StatusOr<std::vector<JobChange>> Store::ApplyTokenisation(
    const std::vector<Tokenisation>& outcomes) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  std::vector<JobChange> failures;
  for (const Tokenisation& outcome : outcomes) {
    NS_ASSIGN_OR_RETURN(Job job, ReadJob(outcome.job_id));
    if (job.state != JobState::kQueued || job.tokenised) continue;
    if (!outcome.ok) {
      JobChange change{job.id, job.submission_id, job.state, job.state, 0, "", outcome.error};
      NS_RETURN_IF_ERROR(
          SetState(job.id, job.state, JobEvent::kFail, 0, outcome.error, 0, &change.to));
      failures.push_back(std::move(change));
      continue;
    }
    Query q(*db_,
            "UPDATE jobs SET prompt_tokens = ?, label_tokens = ?, kv_tokens = ?, reason = '', "
            "updated_at_ms = ? WHERE id = ?");
    const std::string blob = PackTokens(outcome.tokens.prompt);
    q.BindBlob(1, blob.data(), blob.size()).Bind(2, Dump(json(outcome.tokens.labels)));
    q.Bind(3, KvTokens(job.spec, outcome.tokens)).Bind(4, clock_->NowMs()).Bind(5, job.id);
    NS_RETURN_IF_ERROR(q.Run());
  }
  NS_RETURN_IF_ERROR(tx.Commit());
  return failures;
}

// ---------------------------------------------------------------- queue and leases

StatusOr<std::vector<QueuedJob>> Store::QueuedJobs(const std::string& model, int limit,
                                                   int with_prompt_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  // SQLite reads the prompt's bytes either way (kv_tokens and passes come
  // after them in the row); unpacking them doubles the read: 4096 queued
  // jobs of 500-token prompts took 5 ms without their ids, 10 ms with them.
  Query q(*db_,
          "SELECT j.id, j.submission_id, j.priority, j.kv_tokens, j.passes, j.prompt_tokens "
          "FROM jobs j INDEXED BY jobs_queue JOIN submissions s ON s.id = j.submission_id "
          "WHERE j.model = ? AND j.state = 'queued' AND j.kv_tokens IS NOT NULL AND s.sealed = 1 "
          "ORDER BY j.priority DESC, j.submission_id, j.id LIMIT ?");
  q.Bind(1, model).Bind(2, limit);
  std::vector<QueuedJob> jobs;
  while (q.Next()) {
    QueuedJob& job = jobs.emplace_back();
    job.id = q.Int(0);
    job.submission_id = q.Int(1);
    job.model = model;
    job.priority = static_cast<int32_t>(q.Int(2));
    job.kv_tokens = q.Int(3);
    job.passes = q.Int(4);
    if (static_cast<int>(jobs.size()) <= with_prompt_ids) {
      NS_ASSIGN_OR_RETURN(job.prompt_ids, UnpackTokens(q.BlobView(5)));
    }
  }
  NS_RETURN_IF_ERROR(q.status());
  return jobs;
}

StatusOr<std::vector<std::string>> Store::QueuedModelsOf(int64_t submission_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_,
          "SELECT DISTINCT model FROM jobs WHERE submission_id = ? AND state = 'queued' AND "
          "kv_tokens IS NOT NULL ORDER BY model");
  q.Bind(1, submission_id);
  std::vector<std::string> models;
  while (q.Next()) models.push_back(q.Text(0));
  NS_RETURN_IF_ERROR(q.status());
  return models;
}

StatusOr<int64_t> Store::CountUntokenised(int64_t submission_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_,
          "SELECT COUNT(*) FROM jobs INDEXED BY jobs_untokenised_submission "
          "WHERE submission_id = ? AND state = 'queued' AND kv_tokens IS NULL");
  q.Bind(1, submission_id);
  int64_t count = 0;
  if (q.Next()) count = q.Int(0);
  NS_RETURN_IF_ERROR(q.status());
  return count;
}

StatusOr<std::vector<JobChange>> Store::FailQueued(const std::vector<int64_t>& job_ids,
                                                   const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  std::vector<JobChange> changes;
  for (int64_t id : job_ids) {
    NS_ASSIGN_OR_RETURN(Job job, ReadJob(id));
    if (job.state != JobState::kQueued) continue;
    JobChange change{id, job.submission_id, job.state, job.state, 0, "", reason};
    NS_RETURN_IF_ERROR(SetState(id, job.state, JobEvent::kFail, 0, reason, 0, &change.to));
    changes.push_back(std::move(change));
  }
  NS_RETURN_IF_ERROR(tx.Commit());
  return changes;
}

StatusOr<std::vector<Job>> Store::LeaseInto(int64_t batch_id, const std::string& worker_id,
                                            const std::vector<int64_t>& job_ids) {
  // Only a tokenised job of a sealed submission and the batch's model is
  // leased; the others are left as they are (they moved meanwhile).
  NS_ASSIGN_OR_RETURN(const JobState to, Transition(JobState::kQueued, JobEvent::kLease));
  std::vector<Job> leased;
  for (int64_t id : job_ids) {
    Query q(*db_,
            "UPDATE jobs SET state = ?5, batch_id = ?1, worker_id = ?2, reason = '', "
            "updated_at_ms = ?3, first_leased_at_ms = COALESCE(first_leased_at_ms, ?3) "
            "WHERE id = ?4 AND state = ?6 AND kv_tokens IS NOT NULL "
            "AND model = (SELECT model FROM batches WHERE id = ?1) "
            "AND (SELECT sealed FROM submissions WHERE id = jobs.submission_id) = 1");
    q.Bind(1, batch_id).Bind(2, worker_id).Bind(3, clock_->NowMs()).Bind(4, id);
    q.Bind(5, JobStateName(to)).Bind(6, JobStateName(JobState::kQueued));
    NS_RETURN_IF_ERROR(q.Run());
    if (db_->Changes() == 0) continue;
    NS_ASSIGN_OR_RETURN(Job job, ReadJob(id));
    leased.push_back(std::move(job));
  }
  return leased;
}

StatusOr<Lease> Store::CreateBatch(const std::string& worker_id, const std::string& model,
                                   const std::vector<int64_t>& job_ids, int64_t lease_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Lease lease;
  lease.worker_id = worker_id;
  lease.model = model;
  lease.expires_at_ms = clock_->NowMs() + lease_ms;
  Query q(*db_,
          "INSERT INTO batches (worker_id, model, state, lease_expires_at_ms, created_at_ms) "
          "VALUES (?, ?, ?, ?, ?)");
  NS_RETURN_IF_ERROR(q.Bind(1, worker_id)
                         .Bind(2, model)
                         .Bind(3, BatchStateName(BatchState::kActive))
                         .Bind(4, lease.expires_at_ms)
                         .Bind(5, clock_->NowMs())
                         .Run());
  lease.batch_id = db_->LastInsertRowid();
  NS_ASSIGN_OR_RETURN(lease.jobs, LeaseInto(lease.batch_id, worker_id, job_ids));
  if (lease.jobs.empty()) return FailedPrecondition("none of the jobs is queued any more");
  NS_RETURN_IF_ERROR(tx.Commit());
  return lease;
}

StatusOr<Lease> Store::TopUp(int64_t batch_id, const std::vector<int64_t>& job_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Lease lease;
  {
    Query q(*db_,
            "SELECT worker_id, model, lease_expires_at_ms FROM batches WHERE id = ? AND "
            "state = 'active'");
    if (!q.Bind(1, batch_id).Next()) {
      NS_RETURN_IF_ERROR(q.status());
      return FailedPrecondition("batch " + std::to_string(batch_id) + " is not active");
    }
    lease = {batch_id, q.Text(0), q.Text(1), q.Int(2), {}};
  }
  NS_ASSIGN_OR_RETURN(lease.jobs, LeaseInto(batch_id, lease.worker_id, job_ids));
  if (lease.jobs.empty()) return FailedPrecondition("none of the jobs is queued any more");
  NS_RETURN_IF_ERROR(tx.Commit());
  return lease;
}

Status Store::ExtendLeases(const std::string& worker_id, int64_t lease_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  const int64_t now = clock_->NowMs();
  Query q(*db_,
          "UPDATE batches SET lease_expires_at_ms = MAX(lease_expires_at_ms, ?) "
          "WHERE worker_id = ? AND state = 'active'");
  NS_RETURN_IF_ERROR(q.Bind(1, now + lease_ms).Bind(2, worker_id).Run());
  Query touch(*db_, "UPDATE workers SET last_seen_at_ms = ? WHERE id = ?");
  NS_RETURN_IF_ERROR(touch.Bind(1, now).Bind(2, worker_id).Run());
  return tx.Commit();
}

StatusOr<std::vector<JobChange>> Store::RecordProgress(const std::string& worker_id,
                                                       const PassProgress& progress) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  const int64_t now = clock_->NowMs();
  // A worker sends a pass's results before its report, so the report of
  // the pass that finished a batch's last jobs finds the batch finished: it
  // is kept (a pass of the batch's history) and starts nothing.
  bool active = false;
  {
    Query q(*db_, "SELECT state FROM batches WHERE id = ? AND worker_id = ?");
    const bool found = q.Bind(1, progress.batch_id).Bind(2, worker_id).Next();
    NS_RETURN_IF_ERROR(q.status());
    const std::string state = found ? q.Text(0) : "";
    active = state == BatchStateName(BatchState::kActive);
    if (!active && state != BatchStateName(BatchState::kFinished)) {
      return FailedPrecondition("batch " + std::to_string(progress.batch_id) +
                                " is not an active batch of worker " + worker_id);
    }
  }
  std::vector<JobChange> changes;
  if (active) {
    Query q(*db_, "SELECT id, submission_id FROM jobs WHERE batch_id = ? AND state = 'leased'");
    q.Bind(1, progress.batch_id);
    while (q.Next()) {
      changes.push_back({q.Int(0), q.Int(1), JobState::kLeased, JobState::kLeased,
                         progress.batch_id, worker_id, ""});
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  for (JobChange& change : changes) {
    NS_RETURN_IF_ERROR(SetState(change.job_id, change.from, JobEvent::kStart, progress.batch_id, "",
                                0, &change.to));
  }
  Query insert(
      *db_,
      "INSERT OR REPLACE INTO progress (batch_id, pass_index, seconds, bytes_read, "
      "io_wait_seconds, sequences, tokens, mode, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.Bind(1, progress.batch_id).Bind(2, progress.pass_index).Bind(3, progress.seconds);
  insert.Bind(4, progress.bytes_read).Bind(5, progress.io_wait_seconds);
  insert.Bind(6, progress.sequences).Bind(7, progress.tokens).Bind(8, progress.mode).Bind(9, now);
  NS_RETURN_IF_ERROR(insert.Run());
  Query prune(*db_, "DELETE FROM progress WHERE (batch_id = ? AND pass_index <= ?) OR at_ms < ?");
  prune.Bind(1, progress.batch_id).Bind(2, progress.pass_index - options_.progress_passes_kept);
  prune.Bind(3, now - options_.progress_retention_ms);
  NS_RETURN_IF_ERROR(prune.Run());
  NS_RETURN_IF_ERROR(tx.Commit());
  return changes;
}

StatusOr<std::vector<PassSample>> Store::RecentProgress(int64_t batch_id, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_,
          "SELECT batch_id, pass_index, seconds, bytes_read, io_wait_seconds, sequences, tokens, "
          "mode, at_ms FROM progress WHERE batch_id = ? ORDER BY pass_index DESC LIMIT ?");
  q.Bind(1, batch_id).Bind(2, limit);
  std::vector<PassSample> samples;
  while (q.Next()) {
    samples.push_back({q.Int(0), q.Int(1), q.Double(2), q.Int(3), q.Double(4),
                       static_cast<int32_t>(q.Int(5)), q.Int(6), q.Text(7), q.Int(8)});
  }
  NS_RETURN_IF_ERROR(q.status());
  std::reverse(samples.begin(), samples.end());
  return samples;
}

Status Store::InsertResultLocked(const JobResult& result, ResultOutcome* outcome) {
  const std::string job_name = "job " + std::to_string(result.job_id);
  auto read = ReadJob(result.job_id);
  if (read.status().code() == StatusCode::kNotFound) {
    outcome->status = read.status();
    return Status::Ok();
  }
  NS_RETURN_IF_ERROR(read.status());
  const Job& job = *read;
  {
    Query q(*db_, "SELECT 1 FROM results WHERE job_id = ?");
    if (q.Bind(1, result.job_id).Next()) {
      ++duplicate_results_;
      outcome->status =
          AlreadyExists(job_name + " already has a result; the second one is refused");
      return Status::Ok();
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  bool current = job.batch_id == result.batch_id && job.worker_id == result.worker_id;
  if (current) {
    Query q(*db_, "SELECT 1 FROM batches WHERE id = ? AND worker_id = ? AND state = 'active'");
    current = q.Bind(1, result.batch_id).Bind(2, result.worker_id).Next();
    NS_RETURN_IF_ERROR(q.status());
  }
  if (!current) {
    ++late_results_;
    outcome->status =
        FailedPrecondition(job_name + " is " + JobStateName(job.state) +
                           " and no longer leased under batch " + std::to_string(result.batch_id) +
                           " to worker " + result.worker_id + "; the late result is refused");
    return Status::Ok();
  }
  Query q(*db_,
          "INSERT INTO results (job_id, batch_id, worker_id, ok, output, error, created_at_ms) "
          "VALUES (?, ?, ?, ?, ?, ?, ?)");
  q.Bind(1, result.job_id).Bind(2, result.batch_id).Bind(3, result.worker_id);
  q.Bind(4, result.ok ? 1 : 0);
  if (result.ok) {
    q.Bind(5, Dump(OutputToJson(result.output))).BindNull(6);
  } else {
    q.BindNull(5).Bind(6, result.error);
  }
  NS_RETURN_IF_ERROR(q.Bind(7, clock_->NowMs()).Run());
  JobChange& change = outcome->change;
  change = {job.id,
            job.submission_id,
            job.state,
            job.state,
            job.batch_id,
            job.worker_id,
            result.ok ? "" : result.error};
  NS_RETURN_IF_ERROR(SetState(job.id, job.state, result.ok ? JobEvent::kSucceed : JobEvent::kFail,
                              0, change.reason, 0, &change.to));
  return EndBatch(result.batch_id, BatchState::kFinished, /*only_if_empty=*/true);
}

StatusOr<std::vector<ResultOutcome>> Store::InsertResults(const std::vector<JobResult>& results) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  std::vector<ResultOutcome> outcomes(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    NS_RETURN_IF_ERROR(InsertResultLocked(results[i], &outcomes[i]));
  }
  NS_RETURN_IF_ERROR(tx.Commit());
  return outcomes;
}

StatusOr<JobChange> Store::InsertResult(const JobResult& result) {
  NS_ASSIGN_OR_RETURN(std::vector<ResultOutcome> outcomes, InsertResults({result}));
  NS_RETURN_IF_ERROR(outcomes[0].status);
  return outcomes[0].change;
}

StatusOr<std::optional<JobResult>> Store::GetResult(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_, std::string("SELECT ") + kResultColumns + " FROM results r WHERE r.job_id = ?");
  if (!q.Bind(1, job_id).Next()) {
    NS_RETURN_IF_ERROR(q.status());
    return std::optional<JobResult>();
  }
  NS_ASSIGN_OR_RETURN(JobResult result, ReadResultRow(q, 0));
  return std::optional<JobResult>(std::move(result));
}

StatusOr<std::vector<JobChange>> Store::HandBack(const std::string& worker_id, int64_t batch_id,
                                                 const std::vector<int64_t>& job_ids,
                                                 const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  {
    Query q(*db_, "SELECT 1 FROM batches WHERE id = ? AND worker_id = ? AND state = 'active'");
    if (!q.Bind(1, batch_id).Bind(2, worker_id).Next()) {
      NS_RETURN_IF_ERROR(q.status());
      return FailedPrecondition("batch " + std::to_string(batch_id) +
                                " is not an active batch of worker " + worker_id);
    }
  }
  std::vector<JobChange> changes;
  for (int64_t id : job_ids) {
    NS_ASSIGN_OR_RETURN(Job job, ReadJob(id));
    if (job.batch_id != batch_id || IsTerminal(job.state)) continue;
    std::string reason = "handed back by worker " + worker_id + "; queued again";
    bool spent = false;
    if (!error.empty()) {
      const int32_t attempt = job.attempt + 1;
      spent = attempt >= job.max_attempts;
      reason = "worker " + worker_id + " could not run it: " + error + " (attempt " +
               std::to_string(attempt) + " of " + std::to_string(job.max_attempts) + ")" +
               (spent ? "; no attempts left" : "; queued again");
    }
    JobChange change{id, job.submission_id, job.state, job.state, batch_id, worker_id, reason};
    NS_RETURN_IF_ERROR(SetState(id, job.state, spent ? JobEvent::kFail : JobEvent::kRequeue, 0,
                                reason, error.empty() ? 0 : 1, &change.to));
    changes.push_back(std::move(change));
  }
  NS_RETURN_IF_ERROR(EndBatch(batch_id, BatchState::kReleased, /*only_if_empty=*/true));
  NS_RETURN_IF_ERROR(tx.Commit());
  return changes;
}

StatusOr<std::vector<JobChange>> Store::EndBatchJobs(int64_t batch_id, BatchState end,
                                                     bool costs_attempt) {
  std::vector<Job> jobs;
  {
    Query q(*db_, std::string("SELECT ") + kJobColumns + " FROM jobs j WHERE j.batch_id = ?");
    q.Bind(1, batch_id);
    while (q.Next()) {
      NS_ASSIGN_OR_RETURN(Job job, ReadJobRow(q));
      jobs.push_back(std::move(job));
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  std::vector<JobChange> changes;
  for (const Job& job : jobs) {
    const int32_t attempt = job.attempt + (costs_attempt ? 1 : 0);
    const bool spent = attempt >= job.max_attempts;
    std::string reason = "lease of batch " + std::to_string(batch_id) + " on worker " +
                         job.worker_id + " was lost (attempt " + std::to_string(attempt) + " of " +
                         std::to_string(job.max_attempts) + ")";
    reason += spent ? "; no attempts left" : "; queued again";
    JobChange change{job.id,   job.submission_id, job.state, job.state,
                     batch_id, job.worker_id,     reason};
    NS_RETURN_IF_ERROR(SetState(job.id, job.state, spent ? JobEvent::kFail : JobEvent::kRequeue, 0,
                                reason, costs_attempt ? 1 : 0, &change.to));
    changes.push_back(std::move(change));
  }
  NS_RETURN_IF_ERROR(EndBatch(batch_id, end, /*only_if_empty=*/false));
  return changes;
}

StatusOr<std::vector<JobChange>> Store::ExpireBatches(sqlite::Transaction& tx,
                                                      const std::vector<int64_t>& batches) {
  std::vector<JobChange> changes;
  for (int64_t batch : batches) {
    NS_ASSIGN_OR_RETURN(auto ended,
                        EndBatchJobs(batch, BatchState::kExpired, /*costs_attempt=*/true));
    changes.insert(changes.end(), ended.begin(), ended.end());
  }
  NS_RETURN_IF_ERROR(tx.Commit());
  lease_expirations_ += static_cast<int64_t>(batches.size());
  return changes;
}

StatusOr<std::vector<JobChange>> Store::ExpireLeases() {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  std::vector<int64_t> batches;
  {
    Query q(*db_, "SELECT id FROM batches WHERE state = 'active' AND lease_expires_at_ms <= ?");
    q.Bind(1, clock_->NowMs());
    while (q.Next()) batches.push_back(q.Int(0));
    NS_RETURN_IF_ERROR(q.status());
  }
  return ExpireBatches(tx, batches);
}

StatusOr<std::vector<JobChange>> Store::ExpireWorkerBatches(const std::string& worker_id,
                                                            const std::vector<int64_t>& keep) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  std::vector<int64_t> batches;
  {
    Query q(*db_, "SELECT id FROM batches WHERE state = 'active' AND worker_id = ?");
    q.Bind(1, worker_id);
    while (q.Next()) {
      if (std::find(keep.begin(), keep.end(), q.Int(0)) == keep.end()) batches.push_back(q.Int(0));
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  return ExpireBatches(tx, batches);
}

StatusOr<std::vector<Lease>> Store::ActiveBatches() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Lease> leases;
  {
    Query q(*db_,
            "SELECT id, worker_id, model, lease_expires_at_ms FROM batches WHERE state = 'active' "
            "ORDER BY id");
    while (q.Next()) leases.push_back({q.Int(0), q.Text(1), q.Text(2), q.Int(3), {}});
    NS_RETURN_IF_ERROR(q.status());
  }
  for (Lease& lease : leases) {
    Query q(*db_, std::string("SELECT ") + kJobColumns +
                      " FROM jobs j WHERE j.batch_id = ? "
                      "ORDER BY j.id");
    q.Bind(1, lease.batch_id);
    while (q.Next()) {
      NS_ASSIGN_OR_RETURN(Job job, ReadJobRow(q));
      lease.jobs.push_back(std::move(job));
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  return leases;
}

// ---------------------------------------------------------------- workers

StatusOr<int64_t> Store::AttachWorker(const WorkerInfo& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  const int64_t now = clock_->NowMs();
  int64_t session = 1;
  {
    Query q(*db_, "SELECT session FROM workers WHERE id = ?");
    if (q.Bind(1, worker.id).Next()) session = q.Int(0) + 1;
    NS_RETURN_IF_ERROR(q.status());
  }
  Query upsert(*db_,
               "INSERT INTO workers (id, session, device, memory_budget_bytes, kv_budget_bytes, "
               "read_bytes_per_second, max_batch_jobs, open_model, connected, attached_at_ms, "
               "last_seen_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?9) "
               "ON CONFLICT (id) DO UPDATE SET session = ?2, device = ?3, "
               "memory_budget_bytes = ?4, kv_budget_bytes = ?5, read_bytes_per_second = ?6, "
               "max_batch_jobs = ?7, open_model = ?8, connected = 1, attached_at_ms = ?9, "
               "last_seen_at_ms = ?9");
  upsert.Bind(1, worker.id).Bind(2, session).Bind(3, worker.device);
  upsert.Bind(4, worker.memory_budget_bytes).Bind(5, worker.kv_budget_bytes);
  upsert.Bind(6, worker.read_bytes_per_second).Bind(7, worker.max_batch_jobs);
  upsert.Bind(8, worker.open_model).Bind(9, now);
  NS_RETURN_IF_ERROR(upsert.Run());
  Query clear(*db_, "DELETE FROM worker_models WHERE worker_id = ?");
  NS_RETURN_IF_ERROR(clear.Bind(1, worker.id).Run());
  for (const ModelOffer& model : worker.models) {
    Query q(*db_,
            "INSERT INTO worker_models (worker_id, model, kv_bytes_per_token, checkpoint_bytes, "
            "seconds_per_pass, max_context_tokens, tokenizer_hash) VALUES (?, ?, ?, ?, ?, ?, ?)");
    q.Bind(1, worker.id).Bind(2, model.name).Bind(3, model.kv_bytes_per_token);
    q.Bind(4, model.checkpoint_bytes).Bind(5, model.seconds_per_pass);
    q.Bind(6, model.max_context_tokens).Bind(7, model.tokenizer_hash);
    NS_RETURN_IF_ERROR(q.Run().Prefixed("model " + model.name));
  }
  NS_RETURN_IF_ERROR(tx.Commit());
  return session;
}

Status Store::DetachWorker(const std::string& worker_id, int64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Query q(*db_,
          "UPDATE workers SET connected = 0, last_seen_at_ms = ? WHERE id = ? AND session = ?");
  NS_RETURN_IF_ERROR(q.Bind(1, clock_->NowMs()).Bind(2, worker_id).Bind(3, session).Run());
  return tx.Commit();
}

Status Store::WithdrawModel(const std::string& worker_id, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Query q(*db_, "DELETE FROM worker_models WHERE worker_id = ? AND model = ?");
  NS_RETURN_IF_ERROR(q.Bind(1, worker_id).Bind(2, model).Run());
  return tx.Commit();
}

StatusOr<std::vector<WorkerInfo>> Store::ListWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerInfo> workers;
  {
    Query q(*db_,
            "SELECT id, session, device, memory_budget_bytes, kv_budget_bytes, "
            "read_bytes_per_second, max_batch_jobs, open_model, connected, last_seen_at_ms "
            "FROM workers ORDER BY id");
    while (q.Next()) {
      WorkerInfo w;
      w.id = q.Text(0);
      w.session = q.Int(1);
      w.device = q.Text(2);
      w.memory_budget_bytes = q.Int(3);
      w.kv_budget_bytes = q.Int(4);
      w.read_bytes_per_second = q.Double(5);
      w.max_batch_jobs = static_cast<int32_t>(q.Int(6));
      w.open_model = q.Text(7);
      w.connected = q.Int(8) != 0;
      w.last_seen_at_ms = q.Int(9);
      workers.push_back(std::move(w));
    }
    NS_RETURN_IF_ERROR(q.status());
  }
  Query q(*db_,
          "SELECT worker_id, model, kv_bytes_per_token, checkpoint_bytes, seconds_per_pass, "
          "max_context_tokens, tokenizer_hash FROM worker_models ORDER BY worker_id, model");
  while (q.Next()) {
    const std::string worker_id = q.Text(0);
    auto it = std::find_if(workers.begin(), workers.end(),
                           [&](const WorkerInfo& w) { return w.id == worker_id; });
    if (it == workers.end()) continue;
    // Not kept: the pass-token budget and the health (a worker's hello says).
    it->models.push_back({q.Text(1), q.Int(2), q.Int(3), q.Double(4), q.Int(5), q.Text(6),
                          /*pass_token_budget=*/0,
                          /*unhealthy=*/""});
  }
  NS_RETURN_IF_ERROR(q.status());
  return workers;
}

Status Store::PutTokenizer(const TokenizerFiles& tokenizer) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Query q(*db_,
          "INSERT OR IGNORE INTO tokenizers (hash, files, eos_ids, created_at_ms) "
          "VALUES (?, ?, ?, ?)");
  q.Bind(1, TokenizerHash(tokenizer)).Bind(2, Dump(json(tokenizer.files)));
  q.Bind(3, Dump(json(tokenizer.eos_ids))).Bind(4, clock_->NowMs());
  NS_RETURN_IF_ERROR(q.Run());
  return tx.Commit();
}

StatusOr<TokenizerFiles> Store::GetTokenizer(const std::string& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_, "SELECT files, eos_ids FROM tokenizers WHERE hash = ?");
  if (!q.Bind(1, hash).Next()) {
    NS_RETURN_IF_ERROR(q.status());
    return NotFound("no tokenizer with hash " + hash);
  }
  NS_ASSIGN_OR_RETURN(json files, ParseStoredJson(q.Text(0), "tokenizer files"));
  NS_ASSIGN_OR_RETURN(json eos, ParseStoredJson(q.Text(1), "tokenizer eos ids"));
  TokenizerFiles tokenizer;
  try {
    tokenizer.files = files.get<std::map<std::string, std::string>>();
    tokenizer.eos_ids = eos.get<std::vector<int32_t>>();
  } catch (const json::exception& e) {
    return DataLoss(std::string("stored tokenizer: ") + e.what());
  }
  return tokenizer;
}

}  // namespace nightshift::scheduler
