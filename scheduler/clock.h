// The scheduler's clock, behind a narrow interface so tests can move time.
//
// Times are wall-clock milliseconds since the Unix epoch: lease expiries are
// stored in the database and must mean the same after a restart.
#pragma once

#include <atomic>
#include <cstdint>

namespace nightshift::scheduler {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch. Thread-safe.
  virtual int64_t NowMs() = 0;
};

// The system's wall clock. Never null; owned by the library, never deleted;
// thread-safe.
Clock* SystemClock();

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_ms_(start_ms) {}
  int64_t NowMs() override { return now_ms_.load(); }
  void Advance(int64_t ms) { now_ms_ += ms; }
  void Set(int64_t ms) { now_ms_ = ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace nightshift::scheduler
