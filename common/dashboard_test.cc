// Checks the Grafana dashboard shipped with the Helm chart against the metric
// catalogue: every panel query names only metrics the code exports, with
// their labels, histograms through _bucket/_sum/_count and counters through
// rate/increase.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/metric_names.h"
#include "tests/testing/paths.h"

namespace nightshift::metrics {
namespace {

using nlohmann::json;

json LoadDashboard() {
  std::ifstream in(testutil::SourcePath("helm/nightshift/dashboards/nightshift.json"));
  EXPECT_TRUE(in.good()) << "cannot open the dashboard";
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Every panel, rows' nested panels included.
void CollectPanels(const json& panels, std::vector<json>* out) {
  for (const json& p : panels) {
    out->push_back(p);
    if (p.contains("panels")) CollectPanels(p["panels"], out);
  }
}

// How a metric name in a query resolves against the catalogue.
struct MetricUse {
  const MetricDef* def = nullptr;  // nullptr: not in the catalogue
  std::string suffix;              // "_bucket", "_sum", "_count" or ""
};

MetricUse Resolve(const std::string& name) {
  if (const MetricDef* def = FindMetric(name)) return {def, ""};
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const MetricDef* def = FindMetric(name.substr(0, name.size() - s.size()));
      if (def != nullptr && def->type == prometheus::MetricType::Histogram) return {def, s};
    }
  }
  return {};
}

const std::set<std::string> kFunctions = {
    "rate",      "irate",        "increase",      "histogram_quantile",
    "sum",       "max",          "min",           "avg",
    "count",     "topk",         "bottomk",       "clamp_min",
    "clamp_max", "abs",          "delta",         "deriv",
    "time",      "label_values", "avg_over_time", "max_over_time"};
const std::set<std::string> kLabelListKeywords = {"by",       "without",    "on",
                                                  "ignoring", "group_left", "group_right"};
const std::set<std::string> kCounterFunctions = {"rate", "irate", "increase"};

// What one query uses, found by a small PromQL scanner: metric names (with the
// innermost function around each), label names in matchers and groupings.
struct QueryFacts {
  std::vector<std::pair<std::string, std::string>> metrics;  // name, enclosing function
  std::set<std::string> labels;
  std::vector<std::string> errors;
};

QueryFacts Scan(const std::string& expr) {
  QueryFacts facts;
  std::vector<std::string> calls;  // the function (or keyword, or "") of each open paren
  bool in_braces = false;
  std::string last_word;  // the identifier just before the next '('
  for (size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (c == '"' || c == '\'') {  // a string literal: skip it
      const size_t end = expr.find(c, i + 1);
      i = end == std::string::npos ? expr.size() : end + 1;
      continue;
    }
    if (c == '[') {  // a range: [5m], [$__rate_interval]
      i = expr.find(']', i);
      i = i == std::string::npos ? expr.size() : i + 1;
      continue;
    }
    if (c == '$') {  // a Grafana variable outside a string
      ++i;
      while (i < expr.size() && (std::isalnum(expr[i]) || expr[i] == '_')) ++i;
      continue;
    }
    if (std::isalpha(c) || c == '_' || c == ':') {
      size_t end = i;
      while (end < expr.size() && (std::isalnum(expr[end]) || expr[end] == '_' || expr[end] == ':'))
        ++end;
      const std::string word = expr.substr(i, end - i);
      i = end;
      while (i < expr.size() && expr[i] == ' ') ++i;
      const bool call = i < expr.size() && expr[i] == '(';
      const bool label_list = !calls.empty() && kLabelListKeywords.count(calls.back()) > 0;
      if (in_braces || label_list) {
        facts.labels.insert(word);
      } else if (call) {
        if (kFunctions.count(word) == 0 && kLabelListKeywords.count(word) == 0) {
          facts.errors.push_back("unknown function " + word);
        }
        last_word = word;
      } else if (kFunctions.count(word) == 0 && kLabelListKeywords.count(word) == 0 &&
                 word != "bool") {  // an aggregation before its `by` clause is no metric
        std::string enclosing;
        for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
          if (kFunctions.count(*it) > 0) {
            enclosing = *it;
            break;
          }
        }
        facts.metrics.emplace_back(word, enclosing);
      }
      continue;
    }
    if (c == '{') in_braces = true;
    if (c == '}') in_braces = false;
    if (c == '(') {
      calls.push_back(last_word);
      last_word.clear();
    }
    if (c == ')' && !calls.empty()) calls.pop_back();
    ++i;
  }
  return facts;
}

// The problems with one query; empty when it is sound.
std::vector<std::string> CheckQuery(const std::string& expr) {
  QueryFacts facts = Scan(expr);
  std::vector<std::string> problems = facts.errors;
  std::set<std::string> allowed_labels;
  bool uses_bucket = false;
  if (facts.metrics.empty()) problems.push_back("names no metric");
  for (const auto& [name, enclosing] : facts.metrics) {
    const MetricUse use = Resolve(name);
    if (use.def == nullptr) {
      problems.push_back(name + " is not a metric nightshift exports");
      continue;
    }
    allowed_labels.insert(use.def->labels.begin(), use.def->labels.end());
    if (use.suffix == "_bucket") {
      uses_bucket = true;
      allowed_labels.insert("le");
    }
    if (use.def->type == prometheus::MetricType::Histogram && use.suffix.empty()) {
      problems.push_back(name + " is a histogram: query _bucket, _sum or _count");
    }
    const bool cumulative = use.def->type == prometheus::MetricType::Counter || !use.suffix.empty();
    if (cumulative && kCounterFunctions.count(enclosing) == 0) {
      problems.push_back(name + " is cumulative: wrap it in rate() or increase()");
    }
  }
  for (const std::string& label : facts.labels) {
    if (allowed_labels.count(label) == 0) problems.push_back("label " + label + " is not exported");
  }
  const bool quantile = expr.find("histogram_quantile") != std::string::npos;
  if (quantile && (!uses_bucket || facts.labels.count("le") == 0)) {
    problems.push_back("histogram_quantile needs a _bucket rate summed by le");
  }
  if (uses_bucket && !quantile) problems.push_back("_bucket used outside histogram_quantile");
  return problems;
}

TEST(DashboardQueryCheckTest, CatchesTheMistakesItLooksFor) {
  EXPECT_TRUE(CheckQuery("sum by (model) (rate(nightshift_generated_tokens_total[5m]))").empty());
  EXPECT_TRUE(CheckQuery("histogram_quantile(0.9, sum by (le, model) "
                         "(rate(nightshift_job_queue_seconds_bucket{model=~\"$model\"}[5m])))")
                  .empty());
  EXPECT_FALSE(CheckQuery("rate(nightshift_made_up_total[5m])").empty());
  EXPECT_FALSE(CheckQuery("nightshift_generated_tokens_total").empty());  // counter, no rate
  EXPECT_FALSE(CheckQuery("nightshift_pass_duration_seconds").empty());   // bare histogram
  EXPECT_FALSE(CheckQuery("histogram_quantile(0.9, sum by (model) "
                          "(rate(nightshift_job_queue_seconds_bucket[5m])))")
                   .empty());  // no le
  EXPECT_FALSE(CheckQuery("histogram_quantile(0.9, sum by (le) "
                          "(rate(nightshift_job_queue_seconds_sum[5m])))")
                   .empty());                                         // not _bucket
  EXPECT_FALSE(CheckQuery("nightshift_jobs{job_id=\"1\"}").empty());  // label not exported
  EXPECT_FALSE(CheckQuery("sum by (instance) (nightshift_jobs)").empty());
  EXPECT_FALSE(CheckQuery("up").empty());
}

TEST(DashboardTest, EveryPanelQueryNamesOnlyExportedMetrics) {
  const json dashboard = LoadDashboard();
  ASSERT_TRUE(dashboard.contains("panels"));
  std::vector<json> panels;
  CollectPanels(dashboard["panels"], &panels);
  std::set<std::string> used;
  int queries = 0;
  for (const json& panel : panels) {
    if (panel.value("type", "") == "row") continue;
    const std::string title = panel.value("title", "");
    SCOPED_TRACE(title);
    EXPECT_FALSE(title.empty());
    ASSERT_TRUE(panel.contains("targets") && !panel["targets"].empty());
    EXPECT_EQ(panel["datasource"]["uid"], "${datasource}");
    for (const json& target : panel["targets"]) {
      const std::string expr = target.value("expr", "");
      for (const std::string& problem : CheckQuery(expr)) ADD_FAILURE() << expr << ": " << problem;
      for (const auto& [name, enclosing] : Scan(expr).metrics) {
        if (const MetricDef* def = Resolve(name).def) used.insert(std::string(def->name));
      }
      ++queries;
    }
  }
  EXPECT_GE(queries, 15);
  // The panels the issue asks for: their metrics must appear.
  for (std::string_view name :
       {names::kPassDurationSeconds, names::kCheckpointReadBytesTotal,
        names::kReadBandwidthBytesPerSecond, names::kGeneratedTokensTotal, names::kPassSequences,
        names::kJobs, names::kSubmissionEtaSeconds, names::kLeaseExpirationsTotal,
        names::kJobRetriesTotal, names::kKvInUseBytes, names::kKvBudgetBytes,
        names::kEtaRelativeErrorRatio}) {
    EXPECT_EQ(used.count(std::string(name)), 1u) << "no panel shows " << name;
  }
}

TEST(DashboardTest, TemplateVariablesQueryExportedLabels) {
  const json dashboard = LoadDashboard();
  ASSERT_TRUE(dashboard.contains("templating"));
  int label_queries = 0;
  for (const json& variable : dashboard["templating"]["list"]) {
    if (variable.value("type", "") != "query") continue;
    const std::string query = variable["query"]["query"];
    SCOPED_TRACE(query);
    // label_values(METRIC, LABEL)
    const size_t open = query.find('('), comma = query.find(','), close = query.find(')');
    ASSERT_EQ(query.substr(0, open), "label_values");
    ASSERT_TRUE(open < comma && comma < close);
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    const MetricUse use = Resolve(trim(query.substr(open + 1, comma - open - 1)));
    ASSERT_NE(use.def, nullptr);
    const std::string label = trim(query.substr(comma + 1, close - comma - 1));
    EXPECT_NE(std::find(use.def->labels.begin(), use.def->labels.end(), label),
              use.def->labels.end());
    ++label_queries;
  }
  EXPECT_EQ(label_queries, 2);  // model and worker
}

}  // namespace
}  // namespace nightshift::metrics
