#include "worker/daemon/read_bandwidth.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
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

// The cached figure, or nullopt when there is none (or it is unreadable, or
// from before the cache held the mode and the one-stream figure).
std::optional<ReadBandwidth> ReadCache(const std::string& path, const std::string& root) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  // A figure measured at another read size says nothing about this one's
  // modes; one chosen under another margin for parallel reads may be a mode
  // this rule would not choose; one of a single round (before rounds were
  // recorded) may be one moment's disk.
  if (!j.is_object() || j.value("root", "") != root ||
      j.value("chunk_bytes", uint64_t{0}) != DiskBenchOptions{}.chunk_bytes ||
      j.value("parallel_margin", 0.0) != kParallelReadMargin ||
      j.value("rounds", 0) != DiskBenchOptions{}.rounds) {
    return std::nullopt;
  }
  const nlohmann::json& figure = j["read_bytes_per_second"];
  const nlohmann::json& direct = j["direct"];
  const nlohmann::json& streams = j["streams"];
  const nlohmann::json& one_read = j["one_read_bytes_per_second"];
  if (!figure.is_number() || !(figure.get<double>() > 0) || !direct.is_boolean() ||
      !streams.is_number_integer() || streams.get<int>() < 1 || streams.get<int>() > 64 ||
      !one_read.is_number() || !(one_read.get<double>() > 0)) {
    return std::nullopt;
  }
  return ReadBandwidth{figure.get<double>(), direct.get<bool>(), streams.get<int>(),
                       one_read.get<double>()};
}

void WriteCache(const std::string& path, const std::string& root, const ReadBandwidth& b) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << nlohmann::json{{"root", root},
                          {"read_bytes_per_second", b.bytes_per_second},
                          {"direct", b.direct},
                          {"streams", b.streams},
                          {"one_read_bytes_per_second", b.one_read_bytes_per_second},
                          {"chunk_bytes", DiskBenchOptions{}.chunk_bytes},
                          {"parallel_margin", kParallelReadMargin},
                          {"rounds", DiskBenchOptions{}.rounds}}
               .dump()
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

StatusOr<ReadBandwidth> MeasureReadBandwidth(const std::string& root,
                                             const BandwidthOptions& options, bool* cached) {
  const std::string canonical = CanonicalOrSelf(root);
  const std::string cache = BandwidthCachePath(root, options.state_dir);
  if (std::optional<ReadBandwidth> figure = ReadCache(cache, canonical)) {
    if (cached != nullptr) *cached = true;
    return *figure;
  }
  DiskBenchOptions bench;
  bench.max_bytes = options.max_bytes;
  NS_ASSIGN_OR_RETURN(DiskBenchResult result, RunDiskBench(canonical, bench));
  if (result.fastest < 0 || !(result.read_gbs > 0)) {
    return Unavailable("no read mode of the disk bench ran on " + root);
  }
  const DiskBenchMode& fastest = result.modes[static_cast<size_t>(result.fastest)];
  ReadBandwidth figure{result.read_gbs * 1e9, fastest.direct, fastest.streams,
                       result.read_gbs * 1e9};
  for (const DiskBenchMode& mode : result.modes) {
    if (mode.ran && mode.streams == 1 && mode.direct == fastest.direct && mode.gbs > 0) {
      figure.one_read_bytes_per_second = mode.gbs * 1e9;
    }
  }
  WriteCache(cache, canonical, figure);
  if (cached != nullptr) *cached = false;
  return figure;
}

}  // namespace nightshift::worker
