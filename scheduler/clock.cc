#include "scheduler/clock.h"

#include <chrono>

namespace nightshift::scheduler {
namespace {

class WallClock : public Clock {
 public:
  int64_t NowMs() override {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  }
};

}  // namespace

Clock* SystemClock() {
  static WallClock* clock = new WallClock();
  return clock;
}

}  // namespace nightshift::scheduler
