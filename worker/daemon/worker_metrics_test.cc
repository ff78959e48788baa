#include "worker/daemon/worker_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <set>

#include "common/metric_names.h"

namespace nightshift::worker {
namespace {

std::string Scrape(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(WorkerMetricsTest, ExportsEveryWorkerFamilyOfTheCatalogueAndNothingElse) {
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics m(registry, "w1");
  // The per-worker gauges are there from the start, at 0.
  const std::string before = Scrape(*registry);
  EXPECT_TRUE(Has(before, "nightshift_kv_in_use_bytes{worker=\"w1\"} 0")) << before;
  m.OnPass("llama", engine::PassStats{}, 1, 1, 0);
  engine::PassStats moe;
  moe.experts_total = 64;
  m.OnPass("mixtral", moe, 1, 1, 0);
  m.OnCheckpointReadError("llama");
  m.SetModelUnhealthy("llama", true);
  std::set<std::string> exported;
  for (const prometheus::MetricFamily& family : registry->Collect()) {
    EXPECT_TRUE(exported.insert(family.name).second) << "twice: " << family.name;
    const metrics::MetricDef* def = metrics::FindMetric(family.name);
    ASSERT_NE(def, nullptr) << family.name;
    EXPECT_EQ(family.type, def->type) << family.name;
  }
  for (const metrics::MetricDef& def : metrics::Catalogue()) {
    EXPECT_EQ(exported.count(std::string(def.name)), def.exporter == metrics::Exporter::kWorker)
        << def.name;
  }
}

TEST(WorkerMetricsTest, FillsTheFamiliesFromPassesAndBudgets) {
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics m(registry, "w1");
  m.SetReadBandwidth(2e9);
  m.SetKvBudget(4096);
  engine::PassStats stats;
  stats.seconds = 0.5;
  stats.bytes_read = 1000;
  stats.io_seconds = 0.125;
  stats.load_seconds = 0.25;
  stats.compute_seconds = 0.375;
  stats.sequences = 3;
  stats.tokens = 20;
  stats.residency = engine::Residency::kResident;
  stats.compute_dtype = "bf16";
  stats.projection_flops = 1e9;
  m.OnPass("llama", stats, /*prompt_tokens=*/17, /*generated_tokens=*/3, /*kv_in_use=*/512);
  m.OnPass("llama", stats, 0, 3, 256);
  const std::string text = Scrape(*registry);
  const std::string mw = "{model=\"llama\",worker=\"w1\"}";
  EXPECT_TRUE(Has(text, "nightshift_read_bandwidth_bytes_per_second{worker=\"w1\"} 2000000000"))
      << text;
  EXPECT_TRUE(Has(text, "nightshift_kv_budget_bytes{worker=\"w1\"} 4096"));
  EXPECT_TRUE(Has(text, "nightshift_kv_in_use_bytes{worker=\"w1\"} 256"));
  EXPECT_TRUE(Has(text,
                  "nightshift_pass_duration_seconds_count{mode=\"resident\",model=\"llama\","
                  "worker=\"w1\"} 2"))
      << text;
  EXPECT_TRUE(Has(text, "nightshift_layer_load_seconds_total" + mw + " 0.5"));
  EXPECT_TRUE(Has(text, "nightshift_layer_compute_seconds_total" + mw + " 0.75"));
  EXPECT_TRUE(Has(text, "nightshift_io_wait_seconds_total" + mw + " 0.25"));
  EXPECT_TRUE(Has(text, "nightshift_checkpoint_read_bytes_total" + mw + " 2000"));
  EXPECT_TRUE(Has(text, "nightshift_read_throughput_bytes_per_second" + mw + " 2000"));
  EXPECT_TRUE(Has(text, "nightshift_pass_sequences_sum" + mw + " 6"));
  EXPECT_TRUE(Has(text, "nightshift_pass_tokens_sum" + mw + " 40"));
  EXPECT_TRUE(Has(text, "nightshift_prompt_tokens_total" + mw + " 17"));
  EXPECT_TRUE(Has(text, "nightshift_generated_tokens_total" + mw + " 6"));
  EXPECT_TRUE(Has(text,
                  "nightshift_passes_by_compute_total{compute=\"bf16\",model=\"llama\","
                  "worker=\"w1\"} 2"))
      << text;
  EXPECT_TRUE(Has(text, "nightshift_projection_flops_total" + mw + " 2000000000"));
  EXPECT_EQ(text.find("nightshift_experts_"), std::string::npos) << "a dense model has none";
}

TEST(WorkerMetricsTest, AMixtureOfExpertsCountsExpertsRoutedReadAndPinned) {
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics m(registry, "w1");
  engine::PassStats stats;
  stats.experts_total = 3 * 64;
  stats.experts_routed = 24;
  stats.experts_read = 10;
  stats.experts_pinned = 32;
  m.OnPass("qwen3-moe", stats, 1, 1, 0);
  stats.experts_routed = 30;
  stats.experts_read = 5;
  stats.experts_pinned = 48;  // more pinned as the measured routing settles
  m.OnPass("qwen3-moe", stats, 0, 1, 0);
  const std::string text = Scrape(*registry);
  const std::string mw = "{model=\"qwen3-moe\",worker=\"w1\"}";
  EXPECT_TRUE(Has(text, "nightshift_experts_routed_total" + mw + " 54")) << text;
  EXPECT_TRUE(Has(text, "nightshift_experts_read_total" + mw + " 15")) << text;
  EXPECT_TRUE(Has(text, "nightshift_experts_pinned" + mw + " 48")) << text;
}

}  // namespace
}  // namespace nightshift::worker
