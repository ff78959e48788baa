#include "worker/engine/compute_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace nightshift::engine {
namespace {

TEST(ComputePoolTest, RangesCoverEverythingOnceOnUpToTheThreadCount) {
  for (int threads : {1, 2, 3}) {
    SetComputePoolThreads(threads);
    EXPECT_EQ(ComputePoolThreads(), threads);
    for (int64_t n : {1, 2, 5, 64, 1000}) {
      for (int64_t grain : {1, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::mutex mu;
        std::set<std::thread::id> ids;
        int calls = 0;
        ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          EXPECT_LT(begin, end);
          EXPECT_GE(end - begin, std::min(grain, n));
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
          std::lock_guard<std::mutex> lock(mu);
          ids.insert(std::this_thread::get_id());
          ++calls;
        });
        for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
        EXPECT_LE(calls, threads);
        EXPECT_EQ(static_cast<int>(ids.size()), calls);
        if (n / grain >= threads) {
          EXPECT_EQ(calls, threads) << n << " " << grain;
        }
      }
    }
  }
  SetComputePoolThreads(1);
}

TEST(ComputePoolTest, ConcurrentCallersAreServedOneAfterTheOther) {
  SetComputePoolThreads(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int k = 0; k < 200; ++k) {
      ParallelFor(100, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 200 * 100);
  SetComputePoolThreads(1);
}

}  // namespace
}  // namespace nightshift::engine
