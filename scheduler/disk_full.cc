#include "scheduler/disk_full.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <mutex>

namespace nightshift::scheduler {
namespace {

std::atomic<int64_t> g_count{0};

// One line at most every 10 s: a full disk fails every write until space is freed.
void Log(const std::string& message) {
  static std::mutex mu;
  static std::chrono::steady_clock::time_point last;
  static int64_t quiet = 0;
  std::lock_guard<std::mutex> lock(mu);
  const auto now = std::chrono::steady_clock::now();
  if (last.time_since_epoch().count() != 0 && now - last < std::chrono::seconds(10)) {
    ++quiet;
    return;
  }
  last = now;
  std::cerr << "nightshift-scheduler: " << message;
  if (quiet > 0) std::cerr << " (" << quiet << " more since the last such line)";
  std::cerr << std::endl;
  quiet = 0;
}

}  // namespace

Status DiskFull(const std::string& detail) {
  g_count.fetch_add(1, std::memory_order_relaxed);
  Status status = ResourceExhausted(kDiskFullPrefix + detail + "; free space on it and retry");
  Log(status.message());
  return status;
}

bool IsDiskFull(const Status& status) {
  return status.code() == StatusCode::kResourceExhausted &&
         status.message().find(kDiskFullPrefix) != std::string::npos;
}

bool IsDiskFullErrno(int err) { return err == ENOSPC || err == EDQUOT; }

Status FileError(const std::string& what, int err) {
  const std::string message = what + ": " + std::strerror(err);
  return IsDiskFullErrno(err) ? DiskFull(message) : Unavailable(message);
}

int64_t DiskFullCount() { return g_count.load(std::memory_order_relaxed); }

}  // namespace nightshift::scheduler
