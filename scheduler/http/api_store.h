// The Batch API's durable state: its files and batches (migrations/0004),
// on a SQLite connection of its own to the scheduler's database (WAL lets it
// write beside the Store's connection; each write is one BEGIN IMMEDIATE
// transaction), and the bytes of uploaded files in a directory beside the
// database.
//
// Why files on disk, not blobs in SQLite: an upload (up to 200 MB by
// default) is streamed to a temporary file, fsynced, renamed into place and
// the directory fsynced before its row commits, so an acknowledged upload
// survives kill -9 and power loss, and it never passes through memory whole.
// A blob would have to be written in one transaction, passing through the WAL
// and then the main file (twice the writes), holding SQLite's single write
// lock against the scheduler's own commits for the whole upload. Output and
// error files have no bytes at all: they are rendered from the results table
// when downloaded (batch_api.h), their size counted once at finalizing.
//
// Thread-safety: every method may be called from any thread; calls are
// serialised on the connection's mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/clock.h"

namespace nightshift::scheduler {
namespace sqlite {
class Db;
}

namespace http {

inline constexpr const char* kPurposeBatch = "batch";
inline constexpr const char* kPurposeOutput = "batch_output";
inline constexpr const char* kPurposeError = "batch_error";

struct FileRecord {
  int64_t id = 0;
  std::string filename;
  std::string purpose;  // kPurposeBatch, kPurposeOutput or kPurposeError
  int64_t bytes = 0;
  int64_t created_at_ms = 0;
  std::string stored_name;    // uploads: the file's name in the files directory
  int64_t submission_id = 0;  // output and error files: whose results
};

// The Batch object's own fields; its counts come from the submission.
struct BatchRecord {
  int64_t submission_id = 0;
  int64_t input_file_id = 0;
  std::string endpoint;           // "/v1/completions" or "/v1/chat/completions"
  std::string completion_window;  // as given
  int64_t window_ms = 0;
  std::string metadata;        // a JSON object's text, "" = null
  std::string status;          // validating, failed, in_progress, finalizing, completed, expired,
                               // cancelling, cancelled
  std::string errors;          // JSON list of {code, message, param, line}, "" = none
  int64_t output_file_id = 0;  // 0 = none
  int64_t error_file_id = 0;
  int64_t created_at_ms = 0;
  // 0 = not (yet) reached.
  int64_t in_progress_at_ms = 0, finalizing_at_ms = 0, completed_at_ms = 0, failed_at_ms = 0,
          expired_at_ms = 0, cancelling_at_ms = 0, cancelled_at_ms = 0;
};

// A batch is finished (its input file may then be deleted) in these states.
bool IsFinalBatchStatus(const std::string& status);

class ApiStore {
 public:
  // Opens the database the Store has already migrated (FailedPrecondition
  // when schema 4 is missing) and the files directory (created if absent).
  // Temporary uploads a crash left behind and stored files no row names
  // are removed. `clock` is not owned and must outlive the ApiStore.
  static StatusOr<std::unique_ptr<ApiStore>> Open(const std::string& db_path,
                                                  const std::string& files_dir, Clock* clock);
  ~ApiStore();

  const std::string& files_dir() const { return files_dir_; }
  // The path of an upload's bytes.
  std::string PathOf(const FileRecord& file) const;

  // A new temporary file in the files directory for an upload in progress:
  // its path, open for writing as `*fd` (the caller closes it).
  StatusOr<std::string> CreateTemporary(int* fd);

  // Makes a fully written temporary file (`temp_path`, `bytes` long) an
  // upload: fsyncs it, renames it into place, fsyncs the directory, then
  // commits its row. Durable when this returns; the temporary file is gone
  // either way.
  StatusOr<FileRecord> AddUpload(const std::string& temp_path, const std::string& filename,
                                 int64_t bytes);
  // NotFound for an unknown (or deleted) id.
  StatusOr<FileRecord> GetFile(int64_t id);
  // Files with `purpose` ("" = any), newest first (or oldest first with
  // `ascending`), after the id `after_id` (0 = from the start), at most `limit`.
  StatusOr<std::vector<FileRecord>> ListFiles(const std::string& purpose, int64_t after_id,
                                              int limit, bool ascending);
  // Deletes the row, then an upload's bytes. NotFound for an unknown id;
  // FailedPrecondition when it is the input of a batch that is not finished.
  Status DeleteFile(int64_t id);

  // ---- batches

  // Inserts a new batch (status validating). AlreadyExists when the
  // submission has one.
  Status CreateBatch(const BatchRecord& batch);
  // NotFound for a submission that is not a batch.
  StatusOr<BatchRecord> GetBatch(int64_t submission_id);
  // Newest first, with submission id < before_id (0 = from the newest).
  StatusOr<std::vector<BatchRecord>> ListBatches(int64_t before_id, int limit);
  // Batches still moving (validating, in_progress, finalizing, cancelling), oldest first.
  StatusOr<std::vector<BatchRecord>> OpenBatches();
  // Writes every mutable field of `batch` if its stored status is still
  // `expected_status`; FailedPrecondition (and nothing written) when another
  // writer changed it first.
  Status UpdateBatch(const BatchRecord& batch, const std::string& expected_status);
  // Finalizing in one transaction: adds the output file (when `output_bytes`
  // is set) and the error file (when `error_bytes` is set) of the batch,
  // sets their ids on `batch` and writes it as UpdateBatch does.
  Status FinalizeBatch(BatchRecord& batch, const std::string& expected_status,
                       std::optional<int64_t> output_bytes, std::optional<int64_t> error_bytes);

 private:
  ApiStore(std::unique_ptr<sqlite::Db> db, std::string files_dir, Clock* clock);
  Status RemoveStrays();
  Status UpdateLocked(const BatchRecord& batch, const std::string& expected_status);
  StatusOr<int64_t> InsertFileLocked(const FileRecord& file);

  std::mutex mu_;
  std::unique_ptr<sqlite::Db> db_;
  std::string files_dir_;
  Clock* clock_;
};

}  // namespace http
}  // namespace nightshift::scheduler
