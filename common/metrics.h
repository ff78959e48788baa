// A small Prometheus metrics registry: counters, gauges and histograms with
// labels, and the text exposition format 0.0.4.
//
// The API is shaped like prometheus-cpp's so that library can replace this one
// when it is packaged:
//
//   auto registry = std::make_shared<metrics::Registry>();
//   metrics::Family<metrics::Counter>& family = metrics::BuildCounter()
//       .Name("nightshift_jobs_finished_total")
//       .Help("Jobs that reached a terminal state.")
//       .Register(*registry);
//   metrics::Counter& ok = family.Add({{"model", "llama"}, {"outcome", "succeeded"}});
//   ok.Increment();
//   std::string text = metrics::TextSerializer().Serialize(registry->Collect());
//
// Nightshift code registers its families from the catalogue in
// common/metric_names.h, never with ad-hoc names.
//
// Thread-safety: everything here is thread-safe. Updating a metric
// (Increment, Set, Observe) is lock-free (atomics); Family::Add and
// Registry::Collect take a mutex, so hot paths keep the reference Add returns.
//
// Errors: a malformed metric or label name, a reserved label name ("le" on a
// histogram, names starting with "__"), a name registered twice with another
// type or help text, or unsorted histogram buckets are programming errors,
// reported as std::invalid_argument exactly where prometheus-cpp throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace nightshift::metrics {

using Labels = std::map<std::string, std::string>;

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge", "histogram": the spelling of the # TYPE line.
const char* MetricTypeName(MetricType type);

// True for a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*).
bool IsValidMetricName(std::string_view name);
// True for a valid, non-reserved label name ([a-zA-Z_][a-zA-Z0-9_]*, not "__...").
bool IsValidLabelName(std::string_view name);

// A point-in-time copy of one labelled metric, as Collect returns it.
struct ClientMetric {
  struct Bucket {
    uint64_t cumulative_count = 0;
    double upper_bound = 0;  // +Inf for the last bucket
  };
  Labels labels;
  double value = 0;  // counter and gauge
  // histogram
  uint64_t sample_count = 0;
  double sample_sum = 0;
  std::vector<Bucket> buckets;  // ascending, ending with +Inf
};

// A point-in-time copy of one family.
struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<ClientMetric> metric;  // sorted by labels
};

// A monotonically increasing value. Starts at 0.
class Counter {
 public:
  static constexpr MetricType kType = MetricType::kCounter;
  Counter() = default;
  // Adds `value`; a negative or NaN value is ignored (a counter never decreases).
  void Increment(double value = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }
  ClientMetric Collect() const;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down. Starts at 0.
class Gauge {
 public:
  static constexpr MetricType kType = MetricType::kGauge;
  Gauge() = default;
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double value = 1.0);
  void Decrement(double value = 1.0) { Increment(-value); }
  double Value() const { return value_.load(std::memory_order_relaxed); }
  ClientMetric Collect() const;

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets with fixed upper bounds (inclusive, as
// Prometheus' `le`), plus their sum and count.
class Histogram {
 public:
  static constexpr MetricType kType = MetricType::kHistogram;
  using BucketBoundaries = std::vector<double>;
  // `boundaries` must be strictly increasing and finite (the +Inf bucket is
  // implicit); otherwise std::invalid_argument.
  explicit Histogram(const BucketBoundaries& boundaries);
  // Records one observation. NaN is ignored.
  void Observe(double value);
  // The cumulative buckets' last entry, the +Inf one, always equals
  // sample_count, even while other threads observe.
  ClientMetric Collect() const;

 private:
  const BucketBoundaries bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0.0};
};

// All metrics of one name, one per label set. Created by a builder's Register.
// Children live as long as the family (the registry), so the references Add
// returns stay valid until Remove or the registry's destruction.
template <typename T>
class Family {
 public:
  Family(std::string name, std::string help);
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The metric with these labels, created on first use. `args` are T's
  // constructor arguments beyond the labels (a Histogram's buckets); for an
  // existing label set they are ignored. std::invalid_argument for an invalid
  // label name (or "le" on a histogram).
  template <typename... Args>
  T& Add(const Labels& labels, Args&&... args);
  // Drops the metric (it disappears from the exposition); `metric` must not be
  // used afterwards. A pointer this family does not hold is ignored.
  void Remove(T* metric);
  bool Has(const Labels& labels) const;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricFamily Collect() const;

 private:
  void CheckLabels(const Labels& labels) const;

  const std::string name_;
  const std::string help_;
  mutable std::mutex mu_;
  std::map<Labels, std::unique_ptr<T>> children_;
};

// Owns families. Collect snapshots them all, sorted by name.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family or returns the one already registered under `name`
  // with the same type and help. std::invalid_argument for an invalid name, or
  // a name registered before with another type or help.
  template <typename T>
  Family<T>& AddFamily(const std::string& name, const std::string& help);

  std::vector<MetricFamily> Collect() const;

 private:
  struct Entry {
    MetricType type;
    std::string help;
    std::shared_ptr<void> family;  // Family<T> for the entry's type
    MetricFamily (*collect)(const void* family);
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> families_;
};

// BuildCounter().Name(n).Help(h).Register(registry), as prometheus-cpp.
template <typename T>
class Builder {
 public:
  Builder& Name(const std::string& name) {
    name_ = name;
    return *this;
  }
  Builder& Help(const std::string& help) {
    help_ = help;
    return *this;
  }
  Family<T>& Register(Registry& registry) { return registry.AddFamily<T>(name_, help_); }

 private:
  std::string name_;
  std::string help_;
};

inline Builder<Counter> BuildCounter() { return {}; }
inline Builder<Gauge> BuildGauge() { return {}; }
inline Builder<Histogram> BuildHistogram() { return {}; }

// Prometheus text exposition format, version 0.0.4.
class TextSerializer {
 public:
  // The Content-Type header value an HTTP server sends with Serialize's text.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";
  // HELP and TYPE lines, then the samples; histograms as _bucket{le} (ending
  // with le="+Inf"), _sum and _count. Never fails.
  std::string Serialize(const std::vector<MetricFamily>& families) const;
};

// A sample value as the text format writes it: the shortest decimal that
// reads back as the same double, "+Inf", "-Inf" or "NaN".
std::string FormatValue(double value);
// A label value with \, " and newline escaped, for use inside quotes.
std::string EscapeLabelValue(std::string_view value);
// A HELP text with \ and newline escaped.
std::string EscapeHelp(std::string_view help);

// ---- template implementations ----

template <typename T>
Family<T>::Family(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

template <typename T>
template <typename... Args>
T& Family<T>::Add(const Labels& labels, Args&&... args) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(labels);
  if (it != children_.end()) return *it->second;
  CheckLabels(labels);
  auto child = std::make_unique<T>(std::forward<Args>(args)...);
  T& ref = *child;
  children_.emplace(labels, std::move(child));
  return ref;
}

template <typename T>
void Family<T>::Remove(T* metric) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = children_.begin(); it != children_.end(); ++it) {
    if (it->second.get() == metric) {
      children_.erase(it);
      return;
    }
  }
}

template <typename T>
bool Family<T>::Has(const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  return children_.count(labels) > 0;
}

template <typename T>
MetricFamily Family<T>::Collect() const {
  MetricFamily family{name_, help_, T::kType, {}};
  std::lock_guard<std::mutex> lock(mu_);
  family.metric.reserve(children_.size());
  for (const auto& [labels, child] : children_) {
    family.metric.push_back(child->Collect());
    family.metric.back().labels = labels;
  }
  return family;
}

// Defined in metrics.cc for the three metric types.
void CheckLabelSet(const Labels& labels, MetricType type);

template <typename T>
void Family<T>::CheckLabels(const Labels& labels) const {
  CheckLabelSet(labels, T::kType);
}

// Throws std::invalid_argument for an invalid metric name or a clash.
void CheckRegistration(const std::string& name, MetricType type, const std::string& help,
                       bool exists, MetricType existing_type, const std::string& existing_help);

template <typename T>
Family<T>& Registry::AddFamily(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  const bool exists = it != families_.end();
  CheckRegistration(name, T::kType, help, exists, exists ? it->second.type : T::kType,
                    exists ? it->second.help : help);
  if (exists) return *static_cast<Family<T>*>(it->second.family.get());
  auto family = std::make_shared<Family<T>>(name, help);
  Family<T>& ref = *family;
  families_.emplace(name, Entry{T::kType, help, std::move(family), [](const void* f) {
                                  return static_cast<const Family<T>*>(f)->Collect();
                                }});
  return ref;
}

}  // namespace nightshift::metrics
