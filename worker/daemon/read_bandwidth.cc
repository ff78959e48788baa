#include "worker/daemon/read_bandwidth.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/disk_bench.h"

namespace nightshift::worker {
namespace {

namespace fs = std::filesystem;

std::string CanonicalOrSelf(const std::string& path) {
  std::error_code ec;
  fs::path canonical = fs::canonical(path, ec);
  return ec ? path : canonical.string();
}

// The cached figure, or 0 when there is none (or it is unreadable).
double ReadCache(const std::string& path, const std::string& root) {
  std::ifstream in(path);
  if (!in) return 0;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("root", "") != root) return 0;
  const nlohmann::json& figure = j["read_bytes_per_second"];
  return figure.is_number() && figure.get<double>() > 0 ? figure.get<double>() : 0;
}

void WriteCache(const std::string& path, const std::string& root, double bytes_per_second) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << nlohmann::json{{"root", root}, {"read_bytes_per_second", bytes_per_second}}.dump()
        << "\n";
    if (!out) return;
  }
  fs::rename(temp, path, ec);
}

}  // namespace

std::string BandwidthCachePath(const std::string& root, const std::string& state_dir) {
  const size_t hash = std::hash<std::string>{}(CanonicalOrSelf(root));
  std::ostringstream name;
  name << "bandwidth-" << std::hex << hash << ".json";
  return (fs::path(state_dir) / name.str()).string();
}

StatusOr<double> MeasureReadBandwidth(const std::string& root, const BandwidthOptions& options,
                                      bool* cached) {
  const std::string canonical = CanonicalOrSelf(root);
  const std::string cache = BandwidthCachePath(root, options.state_dir);
  if (const double figure = ReadCache(cache, canonical); figure > 0) {
    if (cached != nullptr) *cached = true;
    return figure;
  }
  DiskBenchOptions bench;
  bench.max_bytes = options.max_bytes;
  NS_ASSIGN_OR_RETURN(DiskBenchResult result, RunDiskBench(canonical, bench));
  const double bytes_per_second = result.read_gbs * 1e9;
  if (bytes_per_second <= 0) return Unavailable("no read mode of the disk bench ran on " + root);
  WriteCache(cache, canonical, bytes_per_second);
  if (cached != nullptr) *cached = false;
  return bytes_per_second;
}

}  // namespace nightshift::worker
