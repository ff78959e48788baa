#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

#include "common/metrics_test_util.h"

namespace nightshift::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(CounterTest, IncrementsAndIgnoresNegativeAndNaN) {
  Counter c;
  EXPECT_EQ(c.Value(), 0);
  c.Increment();
  c.Increment(2.5);
  c.Increment(-10);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 3.5);
}

TEST(GaugeTest, SetIncrementDecrement) {
  Gauge g;
  g.Set(10);
  g.Increment();
  g.Decrement(4);
  EXPECT_EQ(g.Value(), 7);
  g.Increment(-8);
  EXPECT_EQ(g.Value(), -1);
}

TEST(HistogramTest, BucketsAreInclusiveUpperBoundsAndCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 7.0}) h.Observe(v);
  h.Observe(std::nan(""));
  const ClientMetric m = h.Collect();
  ASSERT_EQ(m.buckets.size(), 4u);
  EXPECT_EQ(m.buckets[0].upper_bound, 1);
  EXPECT_EQ(m.buckets[0].cumulative_count, 2u);  // 0.5, 1.0
  EXPECT_EQ(m.buckets[1].cumulative_count, 4u);  // + 1.5, 2.0
  EXPECT_EQ(m.buckets[2].cumulative_count, 5u);  // + 4.0
  EXPECT_EQ(m.buckets[3].upper_bound, kInf);
  EXPECT_EQ(m.buckets[3].cumulative_count, 6u);  // + 7.0
  EXPECT_EQ(m.sample_count, 6u);
  EXPECT_DOUBLE_EQ(m.sample_sum, 16.0);
}

TEST(HistogramTest, RefusesUnsortedOrInfiniteBuckets) {
  EXPECT_THROW(Histogram({2, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, kInf}), std::invalid_argument);
  EXPECT_NO_THROW(Histogram({}));
}

TEST(FamilyTest, AddReturnsTheSameMetricForTheSameLabels) {
  Registry registry;
  Family<Counter>& f = BuildCounter().Name("x_total").Help("h").Register(registry);
  Counter& a = f.Add({{"model", "m"}});
  Counter& b = f.Add({{"model", "m"}});
  Counter& c = f.Add({{"model", "n"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  EXPECT_TRUE(f.Has({{"model", "n"}}));
  f.Remove(&c);
  EXPECT_FALSE(f.Has({{"model", "n"}}));
  EXPECT_EQ(f.Collect().metric.size(), 1u);
}

TEST(FamilyTest, RefusesBadLabelNames) {
  Registry registry;
  Family<Gauge>& g = BuildGauge().Name("g").Help("h").Register(registry);
  EXPECT_THROW(g.Add({{"1abc", "v"}}), std::invalid_argument);
  EXPECT_THROW(g.Add({{"__reserved", "v"}}), std::invalid_argument);
  EXPECT_THROW(g.Add({{"a-b", "v"}}), std::invalid_argument);
  EXPECT_NO_THROW(g.Add({{"le", "v"}}));  // only reserved on histograms
  Family<Histogram>& h = BuildHistogram().Name("h").Help("h").Register(registry);
  EXPECT_THROW(h.Add({{"le", "1"}}, Histogram::BucketBoundaries{1}), std::invalid_argument);
}

TEST(RegistryTest, ReRegisteringReturnsTheFamilyAndClashesThrow) {
  Registry registry;
  Family<Counter>& a = BuildCounter().Name("a_total").Help("h").Register(registry);
  EXPECT_EQ(&a, &BuildCounter().Name("a_total").Help("h").Register(registry));
  EXPECT_THROW(BuildGauge().Name("a_total").Help("h").Register(registry), std::invalid_argument);
  EXPECT_THROW(BuildCounter().Name("a_total").Help("other").Register(registry),
               std::invalid_argument);
  EXPECT_THROW(BuildCounter().Name("bad name").Help("h").Register(registry), std::invalid_argument);
  EXPECT_THROW(BuildCounter().Name("").Help("h").Register(registry), std::invalid_argument);
  EXPECT_NO_THROW(BuildCounter().Name("ns:recorded_total").Help("h").Register(registry));
}

TEST(FormatValueTest, ShortestRoundTripAndSpecialValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(1e6), "1e+06");
  EXPECT_EQ(FormatValue(123456789), "123456789");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(std::stod(FormatValue(1.0 / 3)), 1.0 / 3);
  EXPECT_EQ(FormatValue(kInf), "+Inf");
  EXPECT_EQ(FormatValue(-kInf), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(EscapeTest, LabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");
}

TEST(TextSerializerTest, WritesTheExpositionFormat) {
  Registry registry;
  BuildCounter()
      .Name("t_requests_total")
      .Help("Requests.\nSecond line \\ here.")
      .Register(registry)
      .Add({{"model", "a\"b"}, {"worker", "w1"}})
      .Increment(2);
  Gauge& g = BuildGauge().Name("t_memory_bytes").Help("G.").Register(registry).Add({});
  g.Set(std::nan(""));
  Histogram& h = BuildHistogram()
                     .Name("t_pass_seconds")
                     .Help("H.")
                     .Register(registry)
                     .Add({{"model", "m"}}, Histogram::BucketBoundaries{0.5, 1});
  h.Observe(0.25);
  h.Observe(3);
  BuildGauge().Name("t_empty").Help("No samples yet.").Register(registry);

  const std::string expected =
      "# HELP t_empty No samples yet.\n"
      "# TYPE t_empty gauge\n"
      "# HELP t_memory_bytes G.\n"
      "# TYPE t_memory_bytes gauge\n"
      "t_memory_bytes NaN\n"
      "# HELP t_pass_seconds H.\n"
      "# TYPE t_pass_seconds histogram\n"
      "t_pass_seconds_bucket{model=\"m\",le=\"0.5\"} 1\n"
      "t_pass_seconds_bucket{model=\"m\",le=\"1\"} 1\n"
      "t_pass_seconds_bucket{model=\"m\",le=\"+Inf\"} 2\n"
      "t_pass_seconds_sum{model=\"m\"} 3.25\n"
      "t_pass_seconds_count{model=\"m\"} 2\n"
      "# HELP t_requests_total Requests.\\nSecond line \\\\ here.\n"
      "# TYPE t_requests_total counter\n"
      "t_requests_total{model=\"a\\\"b\",worker=\"w1\"} 2\n";
  const std::string text = TextSerializer().Serialize(registry.Collect());
  EXPECT_EQ(text, expected);
  const testing::CommandResult check = testing::PromtoolCheckMetrics(text);
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

TEST(ConcurrencyTest, UpdatesFromManyThreadsAreNotLost) {
  Registry registry;
  Family<Counter>& counters = BuildCounter().Name("c_total").Help("h").Register(registry);
  Family<Histogram>& histograms = BuildHistogram().Name("h_seconds").Help("h").Register(registry);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter& c = counters.Add({{"model", "m"}});
      Histogram& h = histograms.Add({}, Histogram::BucketBoundaries{1, 2});
      for (int i = 0; i < kPerThread; ++i) {
        c.Increment();
        h.Observe(t % 3);                       // 0, 1, 2, 0
        if (i % 1000 == 0) registry.Collect();  // concurrent scrapes
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counters.Add({{"model", "m"}}).Value(), kThreads * kPerThread);
  const ClientMetric m = histograms.Add({}, Histogram::BucketBoundaries{1, 2}).Collect();
  EXPECT_EQ(m.sample_count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(m.buckets[0].cumulative_count, static_cast<uint64_t>(3 * kPerThread));  // 0,1,0
  EXPECT_DOUBLE_EQ(m.sample_sum, 3.0 * kPerThread);  // 0+1+2+0 per step
}

}  // namespace
}  // namespace nightshift::metrics
