#include "scheduler/sqlite.h"

#include "scheduler/disk_full.h"

namespace nightshift::scheduler::sqlite {

namespace {

// SQLite's `code` (and the errno of the I/O call that failed, 0 when unknown)
// with `message` as a Status.
Status Classify(int code, int system_errno, std::string message) {
  switch (code & 0xff) {
    case SQLITE_CONSTRAINT:
      return FailedPrecondition(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLoss(message);
    case SQLITE_FULL:
      return DiskFull(message);
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
      // The WAL index, a journal or the file itself could not grow.
      if (IsDiskFullErrno(system_errno)) return DiskFull(message);
      return Unavailable(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_READONLY:
      return Unavailable(message);
    default:
      return Internal(message);
  }
}

}  // namespace

Status FromCode(sqlite3* db, int code, std::string_view what) {
  if (code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE) return Status::Ok();
  std::string message = std::string(what) + ": ";
  message += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  return Classify(code, db != nullptr ? sqlite3_system_errno(db) : 0, std::move(message));
}

StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  const int code = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (code != SQLITE_OK) {
    Status status = FromCode(raw, code, "open " + path);
    sqlite3_close(raw);
    return status;
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  return std::unique_ptr<Db>(new Db(raw));
}

Db::~Db() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Status Db::Exec(const std::string& sql) {
  char* error = nullptr;
  const int code = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
  if (code == SQLITE_OK) return Status::Ok();
  std::string message = error != nullptr ? error : sqlite3_errstr(code);
  sqlite3_free(error);
  return Classify(code, sqlite3_system_errno(db_), std::move(message));
}

StatusOr<sqlite3_stmt*> Db::Cached(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  const int code =
      sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (code != SQLITE_OK) return FromCode(db_, code, "prepare '" + sql + "'");
  cache_.emplace(sql, stmt);
  return stmt;
}

Query::Query(Db& db, const std::string& sql) : db_(db) {
  auto stmt = db.Cached(sql);
  if (stmt.ok()) {
    stmt_ = *stmt;
  } else {
    status_ = stmt.status();
  }
}

Query::~Query() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void Query::Check(int code, const char* what) {
  if (code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE || !status_.ok()) return;
  raw_code_ = code;
  status_ = FromCode(db_.raw(), code, what);
}

Query& Query::Bind(int index, int64_t value) {
  if (stmt_ != nullptr) Check(sqlite3_bind_int64(stmt_, index, value), "bind");
  return *this;
}

Query& Query::Bind(int index, double value) {
  if (stmt_ != nullptr) Check(sqlite3_bind_double(stmt_, index, value), "bind");
  return *this;
}

Query& Query::Bind(int index, std::string_view text) {
  if (stmt_ != nullptr) {
    Check(
        sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
        "bind");
  }
  return *this;
}

Query& Query::BindBlob(int index, const void* data, size_t size) {
  if (stmt_ != nullptr) {
    // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
    static const char kEmpty = 0;
    Check(sqlite3_bind_blob64(stmt_, index, size == 0 ? &kEmpty : data, size, SQLITE_TRANSIENT),
          "bind");
  }
  return *this;
}

Query& Query::BindNull(int index) {
  if (stmt_ != nullptr) Check(sqlite3_bind_null(stmt_, index), "bind");
  return *this;
}

bool Query::Next() {
  if (stmt_ == nullptr || !status_.ok()) return false;
  const int code = sqlite3_step(stmt_);
  if (code == SQLITE_ROW) return true;
  Check(code, "step");
  return false;
}

Status Query::Run() {
  while (Next()) {
  }
  return status_;
}

bool Query::IsNull(int column) { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
int64_t Query::Int(int column) { return sqlite3_column_int64(stmt_, column); }
double Query::Double(int column) { return sqlite3_column_double(stmt_, column); }

std::string Query::Text(int column) {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text), size);
}

std::string Query::Blob(int column) {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
}

std::string_view Query::BlobView(int column) {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  return data == nullptr ? std::string_view()
                         : std::string_view(static_cast<const char*>(data), size);
}

Transaction::Transaction(Db& db) : db_(db) {
  begin_ = db_.Exec("BEGIN IMMEDIATE");
  open_ = begin_.ok();
}

Transaction::~Transaction() {
  if (open_) (void)db_.Exec("ROLLBACK");
}

Status Transaction::Commit() {
  NS_RETURN_IF_ERROR(begin_);
  Status status = db_.Exec("COMMIT");
  if (status.ok()) open_ = false;
  return status;
}

}  // namespace nightshift::scheduler::sqlite
