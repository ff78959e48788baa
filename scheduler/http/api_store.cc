#include "scheduler/http/api_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <set>

#include "scheduler/disk_full.h"
#include "scheduler/sqlite.h"

namespace nightshift::scheduler::http {

using sqlite::Query;
using sqlite::Transaction;

namespace {

constexpr const char* kTempPrefix = ".upload-";
constexpr const char* kFileColumns =
    "id, filename, purpose, bytes, created_at_ms, COALESCE(stored_name, ''), "
    "COALESCE(submission_id, 0)";
constexpr const char* kBatchColumns =
    "submission_id, input_file_id, endpoint, completion_window, window_ms, "
    "COALESCE(metadata, ''), status, COALESCE(errors, ''), COALESCE(output_file_id, 0), "
    "COALESCE(error_file_id, 0), created_at_ms, COALESCE(in_progress_at_ms, 0), "
    "COALESCE(finalizing_at_ms, 0), COALESCE(completed_at_ms, 0), COALESCE(failed_at_ms, 0), "
    "COALESCE(expired_at_ms, 0), COALESCE(cancelling_at_ms, 0), COALESCE(cancelled_at_ms, 0)";

// The failed call's errno as a Status: the disk is full (ResourceExhausted),
// or Unavailable.
Status Errno(const std::string& what) { return FileError(what, errno); }

Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : Errno("fsync " + path);
}

std::string RandomName(const char* prefix, const char* suffix) {
  static std::mutex mu;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(random()));
  return std::string(prefix) + hex + suffix;
}

FileRecord ReadFileRow(Query& q) {
  FileRecord f;
  f.id = q.Int(0);
  f.filename = q.Text(1);
  f.purpose = q.Text(2);
  f.bytes = q.Int(3);
  f.created_at_ms = q.Int(4);
  f.stored_name = q.Text(5);
  f.submission_id = q.Int(6);
  return f;
}

BatchRecord ReadBatchRow(Query& q) {
  BatchRecord b;
  b.submission_id = q.Int(0);
  b.input_file_id = q.Int(1);
  b.endpoint = q.Text(2);
  b.completion_window = q.Text(3);
  b.window_ms = q.Int(4);
  b.metadata = q.Text(5);
  b.status = q.Text(6);
  b.errors = q.Text(7);
  b.output_file_id = q.Int(8);
  b.error_file_id = q.Int(9);
  b.created_at_ms = q.Int(10);
  b.in_progress_at_ms = q.Int(11);
  b.finalizing_at_ms = q.Int(12);
  b.completed_at_ms = q.Int(13);
  b.failed_at_ms = q.Int(14);
  b.expired_at_ms = q.Int(15);
  b.cancelling_at_ms = q.Int(16);
  b.cancelled_at_ms = q.Int(17);
  return b;
}

// Binds `value`, or NULL when it is 0 / empty.
void BindOrNull(Query& q, int index, int64_t value) {
  if (value == 0) {
    q.BindNull(index);
  } else {
    q.Bind(index, value);
  }
}
void BindOrNull(Query& q, int index, const std::string& value) {
  if (value.empty()) {
    q.BindNull(index);
  } else {
    q.Bind(index, value);
  }
}

}  // namespace

bool IsFinalBatchStatus(const std::string& status) {
  return status == "completed" || status == "failed" || status == "expired" ||
         status == "cancelled";
}

ApiStore::ApiStore(std::unique_ptr<sqlite::Db> db, std::string files_dir, Clock* clock)
    : db_(std::move(db)), files_dir_(std::move(files_dir)), clock_(clock) {}

ApiStore::~ApiStore() = default;

StatusOr<std::unique_ptr<ApiStore>> ApiStore::Open(const std::string& db_path,
                                                   const std::string& files_dir, Clock* clock) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Db> db, sqlite::Db::Open(db_path, 5000));
  NS_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON").Prefixed(db_path));
  {
    Query q(*db, "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('files', 'http_batches')");
    if (!q.Next() || q.Int(0) != 2) {
      NS_RETURN_IF_ERROR(q.status());
      return FailedPrecondition(db_path + " has no Batch API tables (schema 4 is not applied)");
    }
  }
  if (::mkdir(files_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return Errno("creating the files directory " + files_dir);
  }
  std::unique_ptr<ApiStore> store(new ApiStore(std::move(db), files_dir, clock));
  NS_RETURN_IF_ERROR(store->RemoveStrays());
  return store;
}

Status ApiStore::RemoveStrays() {
  std::set<std::string> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Query q(*db_, "SELECT stored_name FROM files WHERE stored_name IS NOT NULL");
    while (q.Next()) kept.insert(q.Text(0));
    NS_RETURN_IF_ERROR(q.status());
  }
  DIR* dir = ::opendir(files_dir_.c_str());
  if (dir == nullptr) return Errno("reading " + files_dir_);
  std::vector<std::string> strays;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const bool ours = name.rfind(kTempPrefix, 0) == 0 || name.rfind("file-", 0) == 0;
    if (ours && kept.count(name) == 0) strays.push_back(name);
  }
  ::closedir(dir);
  for (const std::string& name : strays) ::unlink((files_dir_ + "/" + name).c_str());
  return Status::Ok();
}

std::string ApiStore::PathOf(const FileRecord& file) const {
  return files_dir_ + "/" + file.stored_name;
}

StatusOr<std::string> ApiStore::CreateTemporary(int* fd) {
  const std::string path = files_dir_ + "/" + RandomName(kTempPrefix, ".part");
  *fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (*fd < 0) return Errno("creating " + path);
  return path;
}

StatusOr<FileRecord> ApiStore::AddUpload(const std::string& temp_path, const std::string& filename,
                                         int64_t bytes) {
  const std::string stored = RandomName("file-", ".jsonl");
  const std::string path = files_dir_ + "/" + stored;
  Status durable = FsyncPath(temp_path, O_RDONLY);
  if (durable.ok() && ::rename(temp_path.c_str(), path.c_str()) != 0) {
    durable = Errno("renaming " + temp_path);
  }
  if (durable.ok()) durable = FsyncPath(files_dir_, O_RDONLY | O_DIRECTORY);
  if (!durable.ok()) {
    ::unlink(temp_path.c_str());
    ::unlink(path.c_str());
    return durable;
  }
  FileRecord file;
  file.filename = filename;
  file.purpose = kPurposeBatch;
  file.bytes = bytes;
  file.created_at_ms = clock_->NowMs();
  file.stored_name = stored;
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  auto id = tx.begin_status().ok() ? InsertFileLocked(file) : StatusOr<int64_t>(tx.begin_status());
  Status committed = id.ok() ? tx.Commit() : id.status();
  if (!committed.ok()) {
    ::unlink(path.c_str());
    return committed;
  }
  file.id = *id;
  return file;
}

StatusOr<int64_t> ApiStore::InsertFileLocked(const FileRecord& file) {
  Query q(*db_,
          "INSERT INTO files (filename, purpose, bytes, created_at_ms, stored_name, submission_id) "
          "VALUES (?, ?, ?, ?, ?, ?)");
  q.Bind(1, file.filename).Bind(2, file.purpose).Bind(3, file.bytes).Bind(4, file.created_at_ms);
  BindOrNull(q, 5, file.stored_name);
  BindOrNull(q, 6, file.submission_id);
  NS_RETURN_IF_ERROR(q.Run());
  return db_->LastInsertRowid();
}

StatusOr<FileRecord> ApiStore::GetFile(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_, std::string("SELECT ") + kFileColumns + " FROM files WHERE id = ?");
  if (!q.Bind(1, id).Next()) {
    NS_RETURN_IF_ERROR(q.status());
    return NotFound("no file file-" + std::to_string(id));
  }
  return ReadFileRow(q);
}

StatusOr<std::vector<FileRecord>> ApiStore::ListFiles(const std::string& purpose, int64_t after_id,
                                                      int limit, bool ascending) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string sql = std::string("SELECT ") + kFileColumns +
                          " FROM files WHERE (? = '' OR purpose = ?) AND (? = 0 OR id " +
                          (ascending ? ">" : "<") + " ?) ORDER BY id " +
                          (ascending ? "ASC" : "DESC") + " LIMIT ?";
  Query q(*db_, sql);
  q.Bind(1, purpose).Bind(2, purpose).Bind(3, after_id).Bind(4, after_id).Bind(5, limit);
  std::vector<FileRecord> files;
  while (q.Next()) files.push_back(ReadFileRow(q));
  NS_RETURN_IF_ERROR(q.status());
  return files;
}

Status ApiStore::DeleteFile(int64_t id) {
  std::string stored;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Transaction tx(*db_);
    NS_RETURN_IF_ERROR(tx.begin_status());
    {
      Query q(*db_, "SELECT COALESCE(stored_name, '') FROM files WHERE id = ?");
      if (!q.Bind(1, id).Next()) {
        NS_RETURN_IF_ERROR(q.status());
        return NotFound("no file file-" + std::to_string(id));
      }
      stored = q.Text(0);
    }
    {
      Query q(*db_,
              "SELECT submission_id, status FROM http_batches WHERE input_file_id = ? AND status "
              "NOT IN ('completed', 'failed', 'expired', 'cancelled') LIMIT 1");
      if (q.Bind(1, id).Next()) {
        return FailedPrecondition("file-" + std::to_string(id) + " is the input of batch_" +
                                  std::to_string(q.Int(0)) + ", which is " + q.Text(1) +
                                  "; cancel it or wait until it finishes");
      }
      NS_RETURN_IF_ERROR(q.status());
    }
    Query del(*db_, "DELETE FROM files WHERE id = ?");
    NS_RETURN_IF_ERROR(del.Bind(1, id).Run());
    NS_RETURN_IF_ERROR(tx.Commit());
  }
  // The row is gone first: a crash before the unlink leaves a stray file,
  // which the next Open removes, never a row without its bytes.
  if (!stored.empty()) ::unlink((files_dir_ + "/" + stored).c_str());
  return Status::Ok();
}

// ---------------------------------------------------------------- batches

Status ApiStore::CreateBatch(const BatchRecord& b) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  Query q(*db_,
          "INSERT INTO http_batches (submission_id, input_file_id, endpoint, completion_window, "
          "window_ms, metadata, status, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  q.Bind(1, b.submission_id).Bind(2, b.input_file_id).Bind(3, b.endpoint);
  q.Bind(4, b.completion_window).Bind(5, b.window_ms);
  BindOrNull(q, 6, b.metadata);
  q.Bind(7, b.status).Bind(8, b.created_at_ms);
  Status status = q.Run();
  if (q.raw_code() == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return AlreadyExists("submission " + std::to_string(b.submission_id) + " is already a batch");
  }
  NS_RETURN_IF_ERROR(status);
  return tx.Commit();
}

StatusOr<BatchRecord> ApiStore::GetBatch(int64_t submission_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_,
          std::string("SELECT ") + kBatchColumns + " FROM http_batches WHERE submission_id = ?");
  if (!q.Bind(1, submission_id).Next()) {
    NS_RETURN_IF_ERROR(q.status());
    return NotFound("no batch batch_" + std::to_string(submission_id));
  }
  return ReadBatchRow(q);
}

StatusOr<std::vector<BatchRecord>> ApiStore::ListBatches(int64_t before_id, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_, std::string("SELECT ") + kBatchColumns +
                    " FROM http_batches WHERE (? = 0 OR submission_id < ?) ORDER BY submission_id "
                    "DESC LIMIT ?");
  q.Bind(1, before_id).Bind(2, before_id).Bind(3, limit);
  std::vector<BatchRecord> batches;
  while (q.Next()) batches.push_back(ReadBatchRow(q));
  NS_RETURN_IF_ERROR(q.status());
  return batches;
}

StatusOr<std::vector<BatchRecord>> ApiStore::OpenBatches() {
  std::lock_guard<std::mutex> lock(mu_);
  Query q(*db_, std::string("SELECT ") + kBatchColumns +
                    " FROM http_batches WHERE status IN ('validating', 'in_progress', "
                    "'finalizing', 'cancelling') ORDER BY submission_id");
  std::vector<BatchRecord> batches;
  while (q.Next()) batches.push_back(ReadBatchRow(q));
  NS_RETURN_IF_ERROR(q.status());
  return batches;
}

Status ApiStore::UpdateLocked(const BatchRecord& b, const std::string& expected_status) {
  Query q(*db_,
          "UPDATE http_batches SET status = ?, errors = ?, output_file_id = ?, error_file_id = ?, "
          "in_progress_at_ms = ?, finalizing_at_ms = ?, completed_at_ms = ?, failed_at_ms = ?, "
          "expired_at_ms = ?, cancelling_at_ms = ?, cancelled_at_ms = ? "
          "WHERE submission_id = ? AND status = ?");
  q.Bind(1, b.status);
  BindOrNull(q, 2, b.errors);
  BindOrNull(q, 3, b.output_file_id);
  BindOrNull(q, 4, b.error_file_id);
  BindOrNull(q, 5, b.in_progress_at_ms);
  BindOrNull(q, 6, b.finalizing_at_ms);
  BindOrNull(q, 7, b.completed_at_ms);
  BindOrNull(q, 8, b.failed_at_ms);
  BindOrNull(q, 9, b.expired_at_ms);
  BindOrNull(q, 10, b.cancelling_at_ms);
  BindOrNull(q, 11, b.cancelled_at_ms);
  q.Bind(12, b.submission_id).Bind(13, expected_status);
  NS_RETURN_IF_ERROR(q.Run());
  if (db_->Changes() == 0) {
    return FailedPrecondition("batch_" + std::to_string(b.submission_id) + " is no longer " +
                              expected_status);
  }
  return Status::Ok();
}

Status ApiStore::UpdateBatch(const BatchRecord& batch, const std::string& expected_status) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  NS_RETURN_IF_ERROR(UpdateLocked(batch, expected_status));
  return tx.Commit();
}

Status ApiStore::FinalizeBatch(BatchRecord& batch, const std::string& expected_status,
                               std::optional<int64_t> output_bytes,
                               std::optional<int64_t> error_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(*db_);
  NS_RETURN_IF_ERROR(tx.begin_status());
  BatchRecord updated = batch;
  const std::string name = "batch_" + std::to_string(batch.submission_id);
  if (output_bytes) {
    FileRecord f{0,  name + "_output.jsonl", kPurposeOutput, *output_bytes, clock_->NowMs(),
                 "", batch.submission_id};
    NS_ASSIGN_OR_RETURN(updated.output_file_id, InsertFileLocked(f));
  }
  if (error_bytes) {
    FileRecord f{0,  name + "_error.jsonl", kPurposeError, *error_bytes, clock_->NowMs(),
                 "", batch.submission_id};
    NS_ASSIGN_OR_RETURN(updated.error_file_id, InsertFileLocked(f));
  }
  NS_RETURN_IF_ERROR(UpdateLocked(updated, expected_status));
  NS_RETURN_IF_ERROR(tx.Commit());
  batch = std::move(updated);
  return Status::Ok();
}

}  // namespace nightshift::scheduler::http
