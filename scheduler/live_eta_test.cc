#include "scheduler/live_eta.h"

#include <gtest/gtest.h>

#include <thread>

namespace nightshift::scheduler {
namespace {

TEST(ForecastCacheTest, ACheapForecastIsComputedEveryTime) {
  ForecastCache cache;
  int computed = 0;
  auto cheap = [&]() -> std::optional<double> { return ++computed * 10.0; };
  const int64_t t0 = 1'000'000;
  EXPECT_EQ(cache.Get("model m", t0, cheap), 10.0);
  EXPECT_EQ(cache.Get("model m", t0, cheap), 20.0);
  EXPECT_EQ(computed, 2);
}

TEST(ForecastCacheTest, ACostlyForecastIsReusedCountedDownUntilTwentyTimesItsCost) {
  ForecastCache cache;
  int computed = 0;
  auto costly = [&]() -> std::optional<double> {
    ++computed;
    std::this_thread::sleep_for(ForecastCache::kMinCost + std::chrono::milliseconds(1));
    return 100.0;
  };
  const int64_t t0 = 1'000'000;
  EXPECT_EQ(cache.Get("submission 1", t0, costly), 100.0);
  // 0.1 s later: reused (the cost was at least 6 ms, so 20x is at least
  // 0.12 s), and 0.1 s nearer.
  auto reused = cache.Get("submission 1", t0 + 100, costly);
  ASSERT_TRUE(reused.has_value());
  EXPECT_NEAR(*reused, 99.9, 1e-9);
  EXPECT_EQ(computed, 1);
  // Another key is its own forecast.
  EXPECT_EQ(cache.Get("submission 2", t0, costly), 100.0);
  EXPECT_EQ(computed, 2);
  // Long after (no sleep in a test lasts 60 s): computed again.
  EXPECT_EQ(cache.Get("submission 1", t0 + 60'000, costly), 100.0);
  EXPECT_EQ(computed, 3);
  // Forgotten (the submission ended): computed again at once.
  cache.Forget("submission 1");
  EXPECT_EQ(cache.Get("submission 1", t0 + 60'000, costly), 100.0);
  EXPECT_EQ(computed, 4);
  // Cleared (a worker attached): every key is computed again at once.
  cache.Clear();
  EXPECT_EQ(cache.Get("submission 1", t0 + 60'000, costly), 100.0);
  EXPECT_EQ(cache.Get("submission 2", t0 + 60'000, costly), 100.0);
  EXPECT_EQ(computed, 6);
}

TEST(ForecastCacheTest, AnUnknownCostlyForecastStaysUnknownWhileReused) {
  ForecastCache cache;
  auto unknown = []() -> std::optional<double> {
    std::this_thread::sleep_for(ForecastCache::kMinCost + std::chrono::milliseconds(1));
    return std::nullopt;
  };
  const int64_t t0 = 1'000'000;
  EXPECT_FALSE(cache.Get("model m", t0, unknown).has_value());
  EXPECT_FALSE(cache.Get("model m", t0, [] { return std::optional<double>(5.0); }).has_value());
}

}  // namespace
}  // namespace nightshift::scheduler
