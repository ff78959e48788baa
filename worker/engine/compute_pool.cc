#include "worker/engine/compute_pool.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nightshift::engine {
namespace {

class Pool {
 public:
  ~Pool() { Resize(1); }

  void Resize(int threads) {
    threads = std::max(1, threads);
    if (threads == static_cast<int>(workers_.size()) + 1) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stopping_ = false;
    // New workers start at the current generation: earlier calls are done.
    for (int i = 1; i < threads; ++i) {
      workers_.emplace_back([this, i, seen = generation_] { Work(i, seen); });
    }
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> one_at_a_time(run_mu_);
    const int64_t parts = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, threads());
    if (parts == 1) {
      fn(0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    start_.notify_all();
    fn(0, Bound(1));
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  int64_t Bound(int64_t part) const { return n_ * part / parts_; }

  void Work(int index, uint64_t seen) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= parts_) continue;
      const auto* fn = fn_;
      const int64_t begin = Bound(index), end = Bound(index + 1);
      lock.unlock();
      (*fn)(begin, end);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // held for a whole Run
  std::mutex mu_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t parts_ = 1;
  int64_t pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

Pool& GlobalPool() {
  static Pool* pool = new Pool();  // never destroyed: threads may outlive statics
  return *pool;
}

}  // namespace

void SetComputePoolThreads(int threads) { GlobalPool().Resize(threads); }
int ComputePoolThreads() { return GlobalPool().threads(); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  GlobalPool().Run(n, grain, fn);
}

}  // namespace nightshift::engine
