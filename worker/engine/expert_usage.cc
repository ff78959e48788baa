#include "worker/engine/expert_usage.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

namespace nightshift::engine {

std::string ExpertUsagePath(const std::string& state_dir, const std::string& checkpoint_dir) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : checkpoint_dir) hash = (hash ^ c) * 1099511628211ull;
  char name[64];
  std::snprintf(name, sizeof name, "expert-usage-%016llx.json",
                static_cast<unsigned long long>(hash));
  return (std::filesystem::path(state_dir) / name).string();
}

std::optional<ExpertUsage> ReadExpertUsage(const std::string& path, int64_t layers,
                                           int64_t experts) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array() ||
      static_cast<int64_t>(j["layers"].size()) != layers) {
    return std::nullopt;
  }
  ExpertUsage usage;
  for (const nlohmann::json& layer : j["layers"]) {
    if (!layer.is_array() || (!layer.empty() && static_cast<int64_t>(layer.size()) != experts)) {
      return std::nullopt;
    }
    std::vector<uint64_t>& counts = usage.emplace_back();
    for (const nlohmann::json& n : layer) {
      if (!n.is_number_unsigned()) return std::nullopt;
      counts.push_back(n.get<uint64_t>());
    }
  }
  return usage;
}

bool WriteExpertUsage(const std::string& path, const ExpertUsage& usage) {
  const std::string temporary = path + ".tmp";
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << nlohmann::json{{"layers", usage}}.dump() << "\n";
    if (!out.flush()) return false;
  }
  std::filesystem::rename(temporary, path, error);
  return !error;
}

std::vector<bool> ChooseExpertAwarePins(const std::vector<uint64_t>& group_bytes,
                                        const std::vector<bool>& always_read,
                                        const std::vector<uint64_t>& use, uint64_t budget_bytes,
                                        planner::PinPlacement placement) {
  const size_t n = group_bytes.size();
  std::vector<bool> pinned(n, false);
  std::vector<size_t> first, rest;
  std::vector<uint64_t> first_bytes;
  for (size_t g = 0; g < n; ++g) {
    if (g < always_read.size() && always_read[g]) {
      first.push_back(g);
      first_bytes.push_back(group_bytes[g]);
    } else {
      rest.push_back(g);
    }
  }
  uint64_t left = budget_bytes;
  const std::vector<bool> first_pins = planner::ChoosePinnedGroups(first_bytes, left, placement);
  for (size_t i = 0; i < first.size(); ++i) {
    if (!first_pins[i]) continue;
    pinned[first[i]] = true;
    left -= group_bytes[first[i]];
  }
  auto per_byte = [&](size_t g) {
    const double uses = g < use.size() ? static_cast<double>(use[g]) : 0.0;
    return uses / static_cast<double>(std::max<uint64_t>(group_bytes[g], 1));
  };
  std::stable_sort(rest.begin(), rest.end(),
                   [&](size_t a, size_t b) { return per_byte(a) > per_byte(b); });
  for (size_t g : rest) {
    if (group_bytes[g] <= left) {
      pinned[g] = true;
      left -= group_bytes[g];
    }
  }
  return pinned;
}

}  // namespace nightshift::engine
