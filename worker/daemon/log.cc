#include "worker/daemon/log.h"

#include <chrono>
#include <ctime>
#include <iostream>
#include <mutex>

namespace nightshift::worker {

void LogLine(const std::string& line) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  char fraction[8];
  std::snprintf(fraction, sizeof(fraction), ".%03dZ", static_cast<int>(millis));
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << stamp << fraction << " nightshift-worker: " << line << std::endl;
}

}  // namespace nightshift::worker
