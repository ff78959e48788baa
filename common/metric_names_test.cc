#include "common/metric_names.h"

#include <gtest/gtest.h>
#include <prometheus/check_names.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "common/metrics_http.h"
#include "common/metrics_test_util.h"

namespace nightshift::metrics {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;
using prometheus::MetricType;
using prometheus::Registry;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

TEST(CatalogueTest, NamesFollowTheConventions) {
  std::set<std::string_view> seen;
  const std::set<std::string> allowed_labels = {"model", "worker",  "state",   "outcome",
                                                "mode",  "compute", "progress"};
  for (const MetricDef& def : Catalogue()) {
    SCOPED_TRACE(std::string(def.name));
    EXPECT_TRUE(seen.insert(def.name).second) << "duplicate name";
    EXPECT_TRUE(prometheus::CheckMetricName(std::string(def.name)));
    EXPECT_TRUE(StartsWith(def.name, "nightshift_"));
    EXPECT_FALSE(def.help.empty());
    EXPECT_TRUE(def.type == MetricType::Counter || def.type == MetricType::Gauge ||
                def.type == MetricType::Histogram);
    EXPECT_EQ(def.type == MetricType::Counter, EndsWith(def.name, "_total"));
    for (std::string_view reserved : {"_bucket", "_sum", "_count"}) {
      EXPECT_FALSE(EndsWith(def.name, reserved));
    }
    for (std::string_view non_base : {"_milliseconds", "_ms", "_kilobytes", "_megabytes", "_mb"}) {
      EXPECT_EQ(def.name.find(non_base), std::string_view::npos) << "not a base unit";
    }
    std::set<std::string> labels(def.labels.begin(), def.labels.end());
    EXPECT_EQ(labels.size(), def.labels.size()) << "repeated label";
    for (const std::string& label : def.labels) {
      EXPECT_EQ(allowed_labels.count(label), 1u) << label;
      EXPECT_TRUE(prometheus::CheckLabelName(label)) << label;
    }
    if (def.type == MetricType::Histogram) {
      ASSERT_FALSE(def.buckets.empty());
      for (size_t i = 0; i < def.buckets.size(); ++i) {
        EXPECT_TRUE(std::isfinite(def.buckets[i])) << "bucket " << i;
        if (i > 0) {
          EXPECT_LT(def.buckets[i - 1], def.buckets[i]) << "bucket " << i;
        }
      }
    } else {
      EXPECT_TRUE(def.buckets.empty());
    }
  }
  EXPECT_EQ(FindMetric("nightshift_nothing"), nullptr);
  EXPECT_EQ(FindMetric(names::kPassDurationSeconds)->type, MetricType::Histogram);
}

TEST(CatalogueTest, CoversWhatTheIssueAsksFor) {
  for (std::string_view name : {names::kPassDurationSeconds,
                                names::kLayerLoadSecondsTotal,
                                names::kLayerComputeSecondsTotal,
                                names::kIoWaitSecondsTotal,
                                names::kCheckpointReadBytesTotal,
                                names::kReadThroughputBytesPerSecond,
                                names::kPassSequences,
                                names::kPassTokens,
                                names::kPromptTokensTotal,
                                names::kPassTokensComputedTotal,
                                names::kSharedPrefixTokensTotal,
                                names::kGeneratedTokensTotal,
                                names::kJobs,
                                names::kJobsFinishedTotal,
                                names::kJobQueueSeconds,
                                names::kJobEndToEndSeconds,
                                names::kLeaseExpirationsTotal,
                                names::kResultsRefusedTotal,
                                names::kJobRetriesTotal,
                                names::kWorkersAttached,
                                names::kKvBudgetBytes,
                                names::kKvInUseBytes,
                                names::kSubmissionEtaSeconds}) {
    EXPECT_NE(FindMetric(name), nullptr) << name;
  }
}

TEST(CatalogueFamilyTest, ChecksTypeAndLabels) {
  Registry registry;
  EXPECT_THROW(CatalogueFamily<Counter>(registry, "nightshift_unknown_total"),
               std::invalid_argument);
  EXPECT_THROW(CatalogueFamily<Counter>(registry, names::kPassDurationSeconds),
               std::invalid_argument);
  CatalogueFamily<Histogram> passes(registry, names::kPassDurationSeconds);
  Histogram& h = passes.With({{"model", "m"}, {"worker", "w"}, {"mode", "streaming"}});
  h.Observe(3);
  const prometheus::ClientMetric sample = h.Collect();
  ASSERT_EQ(sample.histogram.bucket.size(), passes.def().buckets.size() + 1);  // and +Inf
  for (size_t i = 0; i < passes.def().buckets.size(); ++i) {
    EXPECT_EQ(sample.histogram.bucket[i].upper_bound, passes.def().buckets[i]);
  }
  // Missing, extra and misspelt labels, and enum values outside the set.
  EXPECT_THROW(passes.With({{"model", "m"}, {"worker", "w"}}), std::invalid_argument);
  EXPECT_THROW(passes.With({{"model", "m"}, {"worker", "w"}, {"mode", "streaming"}, {"job", "1"}}),
               std::invalid_argument);
  EXPECT_THROW(passes.With({{"model", "m"}, {"workr", "w"}, {"mode", "streaming"}}),
               std::invalid_argument);
  EXPECT_THROW(passes.With({{"model", "m"}, {"worker", "w"}, {"mode", "fast"}}),
               std::invalid_argument);
  CatalogueFamily<Gauge> jobs(registry, names::kJobs);
  EXPECT_THROW(jobs.With({{"model", "m"}, {"state", "done"}}), std::invalid_argument);
  EXPECT_NO_THROW(jobs.With({{"model", "m"}, {"state", "queued"}}));
  // Registering again finds the same family.
  CatalogueFamily<Gauge> again(registry, names::kJobs);
  EXPECT_EQ(&again.With({{"model", "m"}, {"state", "queued"}}),
            &jobs.With({{"model", "m"}, {"state", "queued"}}));
  // A name the registry holds with another type.
  prometheus::BuildCounter().Name("x_clash").Help("x").Register(registry);
  EXPECT_THROW(prometheus::BuildGauge().Name("x_clash").Help("x").Register(registry),
               std::invalid_argument);
}

TEST(CatalogueFamilyTest, RemoveDropsTheSeries) {
  Registry registry;
  CatalogueFamily<Gauge> etas(registry, names::kSubmissionEtaSeconds);
  etas.With({{"model", "a"}}).Set(1);
  etas.With({{"model", "b"}}).Set(2);
  etas.Remove(&etas.With({{"model", "a"}}));
  const std::vector<prometheus::MetricFamily> families = registry.Collect();
  ASSERT_EQ(families.size(), 1u);
  ASSERT_EQ(families[0].metric.size(), 1u);
  EXPECT_EQ(families[0].metric[0].label.at(0).value, "b");
}

TEST(CatalogueTest, MetricTypeNames) {
  EXPECT_STREQ(MetricTypeName(MetricType::Counter), "counter");
  EXPECT_STREQ(MetricTypeName(MetricType::Gauge), "gauge");
  EXPECT_STREQ(MetricTypeName(MetricType::Histogram), "histogram");
}

// Every combination of enum label values, with "m" and "w" for the free ones.
std::vector<Labels> LabelSets(const MetricDef& def) {
  std::vector<Labels> sets = {{}};
  for (const std::string& label : def.labels) {
    std::vector<std::string> values = AllowedLabelValues(label);
    if (values.empty()) values = {label == "model" ? "llama-3-8b" : "gpu-box-1"};
    std::vector<Labels> next;
    for (const Labels& set : sets) {
      for (const std::string& value : values) {
        Labels extended = set;
        extended[label] = value;
        next.push_back(extended);
      }
    }
    sets = next;
  }
  return sets;
}

// A registry holding every family `exporter` exports, each with samples.
std::shared_ptr<Registry> FilledRegistry(Exporter exporter) {
  auto registry = std::make_shared<Registry>();
  for (const MetricDef& def : Catalogue()) {
    if (def.exporter != exporter) continue;
    for (const Labels& labels : LabelSets(def)) {
      switch (def.type) {
        case MetricType::Counter:
          CatalogueFamily<Counter>(*registry, def.name).With(labels).Increment(12.5);
          break;
        case MetricType::Gauge:
          CatalogueFamily<Gauge>(*registry, def.name).With(labels).Set(1.5e9);
          break;
        case MetricType::Histogram: {
          Histogram& h = CatalogueFamily<Histogram>(*registry, def.name).With(labels);
          for (double bound : def.buckets) h.Observe(bound * 0.9);
          h.Observe(def.buckets.back() * 10);
          break;
        }
        default:
          ADD_FAILURE() << def.name << " has a type the catalogue does not use";
      }
    }
  }
  return registry;
}

class ExporterTest : public ::testing::TestWithParam<Exporter> {};

// What a scrape of the scheduler's or the worker's endpoint returns, with every
// catalogue family it exports filled in, passes promtool's checks and lints:
// our names, help texts and buckets in prometheus-cpp's exposition.
TEST_P(ExporterTest, EndpointOutputPassesPromtool) {
  auto registry = FilledRegistry(GetParam());
  auto server = MetricsServer::Start({"127.0.0.1", 0, {}}, registry);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string text = testing::HttpGet(server.value()->port(), "/metrics").body();
  for (const MetricDef& def : Catalogue()) {
    const bool present = text.find("# TYPE " + std::string(def.name) + " ") != std::string::npos;
    EXPECT_EQ(present, def.exporter == GetParam()) << def.name;
  }
  const testing::CommandResult check = testing::PromtoolCheckMetrics(text);
  EXPECT_EQ(check.exit_code, 0) << "promtool check metrics (127: promtool missing; run "
                                   "scripts/bootstrap):\n"
                                << check.output;
  EXPECT_EQ(check.output, "");
}

TEST(PromtoolTest, RejectsABrokenExposition) {
  // Guards the check above: promtool must be present and must object.
  const testing::CommandResult check =
      testing::PromtoolCheckMetrics("# TYPE nightshift_x_count counter\nnightshift_x_count 1\n");
  EXPECT_NE(check.exit_code, 127) << "promtool is not installed; run scripts/bootstrap";
  EXPECT_NE(check.exit_code, 0);
}

INSTANTIATE_TEST_SUITE_P(BothExporters, ExporterTest,
                         ::testing::Values(Exporter::kScheduler, Exporter::kWorker));

}  // namespace
}  // namespace nightshift::metrics
