#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace nightshift::metrics {
namespace {

// std::atomic<double>::fetch_add is C++20; a compare-exchange loop is the same.
void AtomicAdd(std::atomic<double>& target, double value) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + value, std::memory_order_relaxed)) {
  }
}

bool IsNameChar(char c, bool first, bool allow_colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (allow_colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

std::string Escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} with an optional extra label appended (a bucket's le); empty
// when there are no labels at all.
std::string LabelBlock(const Labels& labels, const char* extra_name = nullptr,
                       const std::string& extra_value = {}) {
  if (labels.empty() && extra_name == nullptr) return {};
  std::string out = "{";
  bool first = true;
  auto append = [&](const std::string& name, std::string_view value) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    out += EscapeLabelValue(value);
    out += '"';
  };
  for (const auto& [name, value] : labels) append(name, value);
  if (extra_name != nullptr) append(extra_name, extra_value);
  out += '}';
  return out;
}

void WriteSample(std::string& out, const std::string& name, const std::string& labels,
                 const std::string& value) {
  out += name;
  out += labels;
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool IsValidMetricName(std::string_view name) { return IsValidName(name, true); }

bool IsValidLabelName(std::string_view name) {
  return IsValidName(name, false) && name.substr(0, 2) != "__";
}

void CheckLabelSet(const Labels& labels, MetricType type) {
  for (const auto& [name, value] : labels) {
    if (!IsValidLabelName(name)) throw std::invalid_argument("invalid label name '" + name + "'");
    if (type == MetricType::kHistogram && name == "le") {
      throw std::invalid_argument("label 'le' is reserved for histogram buckets");
    }
  }
}

void CheckRegistration(const std::string& name, MetricType type, const std::string& help,
                       bool exists, MetricType existing_type, const std::string& existing_help) {
  if (!IsValidMetricName(name)) throw std::invalid_argument("invalid metric name '" + name + "'");
  if (!exists) return;
  if (existing_type != type || existing_help != help) {
    throw std::invalid_argument("metric '" + name + "' is already registered as a " +
                                MetricTypeName(existing_type) + " with other help text");
  }
}

void Counter::Increment(double value) {
  if (!(value >= 0)) return;  // negative or NaN
  AtomicAdd(value_, value);
}

ClientMetric Counter::Collect() const {
  ClientMetric m;
  m.value = Value();
  return m;
}

void Gauge::Increment(double value) { AtomicAdd(value_, value); }

ClientMetric Gauge::Collect() const {
  ClientMetric m;
  m.value = Value();
  return m;
}

Histogram::Histogram(const BucketBoundaries& boundaries)
    : bounds_(boundaries), counts_(new std::atomic<uint64_t>[boundaries.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i - 1] < bounds_[i]))) {
      throw std::invalid_argument("histogram buckets must be finite and strictly increasing");
    }
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // The first bound >= value: buckets are inclusive upper bounds (le).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

ClientMetric Histogram::Collect() const {
  ClientMetric m;
  m.buckets.reserve(bounds_.size() + 1);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const double bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    m.buckets.push_back({cumulative, bound});
  }
  m.sample_count = cumulative;
  m.sample_sum = sum_.load(std::memory_order_relaxed);
  return m;
}

std::vector<MetricFamily> Registry::Collect() const {
  std::vector<MetricFamily> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.reserve(families_.size());
  for (const auto& [name, entry] : families_) out.push_back(entry.collect(entry.family.get()));
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string EscapeLabelValue(std::string_view value) { return Escape(value, true); }

std::string EscapeHelp(std::string_view help) { return Escape(help, false); }

std::string TextSerializer::Serialize(const std::vector<MetricFamily>& families) const {
  std::string out;
  for (const MetricFamily& family : families) {
    out += "# HELP " + family.name + ' ' + EscapeHelp(family.help) + '\n';
    out += "# TYPE " + family.name + ' ' + MetricTypeName(family.type) + '\n';
    for (const ClientMetric& m : family.metric) {
      if (family.type != MetricType::kHistogram) {
        WriteSample(out, family.name, LabelBlock(m.labels), FormatValue(m.value));
        continue;
      }
      for (const ClientMetric::Bucket& b : m.buckets) {
        WriteSample(out, family.name + "_bucket",
                    LabelBlock(m.labels, "le", FormatValue(b.upper_bound)),
                    std::to_string(b.cumulative_count));
      }
      const std::string labels = LabelBlock(m.labels);
      WriteSample(out, family.name + "_sum", labels, FormatValue(m.sample_sum));
      WriteSample(out, family.name + "_count", labels, std::to_string(m.sample_count));
    }
  }
  return out;
}

}  // namespace nightshift::metrics
