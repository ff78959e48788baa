// A full disk, as one error wherever the scheduler writes: SQLite's
// SQLITE_FULL (or an I/O error whose errno is ENOSPC or EDQUOT) in the store
// and the Batch API's rows, and ENOSPC/EDQUOT on the files it writes (Batch
// API uploads, tokenizer bundles). The write is refused whole (a transaction
// rolls back, a temporary file is removed), and the caller sees
// ResourceExhausted "the scheduler's disk is full: ...": gRPC's
// RESOURCE_EXHAUSTED, HTTP 507. Every such error is counted (the metric
// nightshift_scheduler_disk_full_total) and logged on stderr, at most one
// line every 10 seconds (the count of the others in it).
//
// Thread-safe: the count is an atomic, the log line's state has a mutex.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace nightshift::scheduler {

// What every disk-full message begins with.
inline constexpr const char kDiskFullPrefix[] = "the scheduler's disk is full: ";

// ResourceExhausted("the scheduler's disk is full: DETAIL; free space on it
// and retry"); counts and logs it.
Status DiskFull(const std::string& detail);

// Whether `status` is one DiskFull made (a prefix added later is allowed).
bool IsDiskFull(const Status& status);

// Whether `err` (an errno value) says the disk is full: ENOSPC or EDQUOT.
bool IsDiskFullErrno(int err);

// A failed file operation: DiskFull("WHAT: strerror") when `err` says the
// disk is full, else Unavailable("WHAT: strerror").
Status FileError(const std::string& what, int err);

// DiskFull errors made since the process started.
int64_t DiskFullCount();

}  // namespace nightshift::scheduler
