// A thin RAII layer over SQLite's C API, used only by the store. SQLite
// result codes become Status values here and nowhere else.
//
// Not thread-safe: the store serialises every use of a Db behind its mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace nightshift::scheduler::sqlite {

// Converts an SQLite result code to a Status whose message is
// "WHAT: sqlite's message". SQLITE_OK gives OK. A full disk (SQLITE_FULL, or
// an I/O error whose errno is ENOSPC) is scheduler/disk_full.h's DiskFull
// (ResourceExhausted); a constraint FailedPrecondition; corruption DataLoss;
// a busy, locked or unwritable database Unavailable; the rest Internal.
Status FromCode(sqlite3* db, int code, std::string_view what);

class Db {
 public:
  // Opens or creates the database file. Errors: Unavailable when the file
  // cannot be opened, DataLoss when it is not a database.
  static StatusOr<std::unique_ptr<Db>> Open(const std::string& path, int busy_timeout_ms);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements without results (DDL, pragmas).
  Status Exec(const std::string& sql);

  // A prepared statement for `sql`, compiled once and kept for the Db's
  // lifetime. Owned by the Db. Errors when the SQL does not compile.
  StatusOr<sqlite3_stmt*> Cached(const std::string& sql);

  sqlite3* raw() { return db_; }
  int64_t LastInsertRowid() { return sqlite3_last_insert_rowid(db_); }
  int Changes() { return sqlite3_changes(db_); }

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

// One execution of a cached statement: bind, then step through rows. Resets
// and clears the statement when destroyed, so it can be reused.
//
//   Query q(db, "SELECT id FROM jobs WHERE model = ?");
//   q.Bind(1, model);
//   while (q.Next()) ids.push_back(q.Int(0));
//   NS_RETURN_IF_ERROR(q.status());
class Query {
 public:
  Query(Db& db, const std::string& sql);
  ~Query();
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  // Binds parameter `index` (1-based). Errors are kept in status().
  Query& Bind(int index, int64_t value);
  Query& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Query& Bind(int index, double value);
  Query& Bind(int index, std::string_view text);
  Query& Bind(int index, const std::string& text) { return Bind(index, std::string_view(text)); }
  Query& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Query& BindBlob(int index, const void* data, size_t size);
  Query& BindNull(int index);

  // Steps to the next row: true while there is one. false at the end or on
  // an error (then status() says which).
  bool Next();
  // Runs a statement that returns no rows; returns status().
  Status Run();

  bool IsNull(int column);
  int64_t Int(int column);
  double Double(int column);
  std::string Text(int column);
  std::string Blob(int column);
  // The blob without a copy: valid until the next Next() or the end of the Query.
  std::string_view BlobView(int column);

  // OK, or the first error of a Bind or Next. A constraint violation has
  // code kFailedPrecondition; raw_code() gives SQLite's extended code.
  const Status& status() const { return status_; }
  int raw_code() const { return raw_code_; }

 private:
  void Check(int code, const char* what);

  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;
  int raw_code_ = SQLITE_OK;
};

// A write transaction: BEGIN IMMEDIATE on construction (takes the write lock
// at once, so a busy database is a clear error instead of a deadlock later),
// ROLLBACK on destruction unless Commit() succeeded.
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // The outcome of BEGIN IMMEDIATE.
  const Status& begin_status() const { return begin_; }
  Status Commit();

 private:
  Db& db_;
  Status begin_;
  bool open_ = false;
};

}  // namespace nightshift::scheduler::sqlite
