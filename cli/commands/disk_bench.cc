// `nightshift disk-bench PATH`: cold-cache read bandwidth of a checkpoint (or
// any file or directory), one stream against several reads in flight. The
// larger figure is what a worker advertises and what plan's --read-gbs wants.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/command_line.h"
#include "common/disk_bench.h"

namespace nightshift::cli {
namespace {

// A buffered mode that found more than this share of its bytes cached
// measured the page cache, not the disk.
constexpr double kWarmShare = 0.05;

std::string Fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

// `text` padded with blanks to `width` characters.
std::string Column(const std::string& text, size_t width) {
  return text + std::string(text.size() < width ? width - text.size() : 0, ' ');
}

// The reads the chosen mode keeps in flight (ChooseReadMode).
std::string Chosen(const DiskBenchResult& r) {
  return r.parallel_chosen ? "parallel" : "single stream";
}

nlohmann::ordered_json ResultJson(const DiskBenchResult& r, const DiskBenchOptions& options) {
  nlohmann::ordered_json j;
  j["path"] = r.path;
  j["files"] = r.files.size();
  j["total_bytes"] = r.total_bytes;
  j["bytes_per_mode"] = r.bytes_per_mode;
  j["chunk_bytes"] = options.chunk_bytes;
  j["parallel_reads"] = options.parallel_reads;
  j["rounds"] = options.rounds;
  j["modes"] = nlohmann::ordered_json::array();
  for (const DiskBenchMode& m : r.modes) {
    nlohmann::ordered_json mode;
    mode["name"] = m.name;
    mode["direct"] = m.direct;
    mode["streams"] = m.streams;
    mode["ran"] = m.ran;
    mode["skipped_reason"] =
        m.ran ? nlohmann::ordered_json() : nlohmann::ordered_json(m.skipped_reason);
    mode["bytes"] = m.bytes;
    mode["seconds"] = m.seconds;
    mode["gbs"] = m.gbs;
    mode["round_gbs"] = m.round_gbs;
    mode["cached_fraction"] =
        m.direct ? nlohmann::ordered_json() : nlohmann::ordered_json(m.cached_fraction);
    j["modes"].push_back(mode);
  }
  j["single_stream_gbs"] = r.single_stream_gbs;
  j["parallel_gbs"] = r.parallel_gbs;
  j["read_gbs"] = r.read_gbs;
  j["chosen"] = Chosen(r);
  j["chosen_mode"] = r.fastest >= 0
                         ? nlohmann::ordered_json(r.modes[static_cast<size_t>(r.fastest)].name)
                         : nlohmann::ordered_json();
  return j;
}

void PrintHuman(const DiskBenchResult& r, const DiskBenchOptions& options) {
  std::cout << "disk-bench " << r.path << ": " << r.files.size()
            << (r.files.size() == 1 ? " file, " : " files, ")
            << Fixed(static_cast<double>(r.bytes_per_mode) / 1e9, 2) << " GB read per mode (of "
            << Fixed(static_cast<double>(r.total_bytes) / 1e9, 2) << " GB), "
            << options.chunk_bytes / (1 << 20) << " MiB reads, " << options.rounds
            << (options.rounds == 1 ? " round" : " rounds") << "\n\n"
            << "  " << Column("mode", 24) << "  GB/s  cached before  each round\n";
  for (const DiskBenchMode& m : r.modes) {
    std::cout << "  " << Column(m.name, 24);
    if (!m.ran) {
      std::cout << "     -  skipped: " << m.skipped_reason << "\n";
      continue;
    }
    std::string gbs = Fixed(m.gbs, 2);
    std::cout << std::string(gbs.size() < 6 ? 6 - gbs.size() : 0, ' ') << gbs;
    const std::string cached = m.direct ? "" : Fixed(100 * m.cached_fraction, 0) + "%";
    std::cout << "  " << std::string(cached.size() < 13 ? 13 - cached.size() : 0, ' ') << cached
              << " ";
    for (double round : m.round_gbs) std::cout << " " << Fixed(round, 2);
    std::cout << "\n";
  }
  std::cout << "\nsingle stream " << Fixed(r.single_stream_gbs, 2) << " GB/s, "
            << options.parallel_reads << " reads in flight " << Fixed(r.parallel_gbs, 2)
            << " GB/s: reading with " << (r.parallel_chosen ? "parallel reads" : "one stream")
            << " (parallel reads are chosen only " << Fixed(100 * (kParallelReadMargin - 1), 0)
            << "% or more faster).\n"
            << "read bandwidth to advertise (plan --read-gbs): " << Fixed(r.read_gbs, 2)
            << " GB/s\n";
  if (r.fastest >= 0) {
    std::cout << "chosen mode: " << r.modes[static_cast<size_t>(r.fastest)].name
              << " (a worker streams checkpoints this way)\n";
  }
  for (const DiskBenchMode& m : r.modes) {
    if (m.ran && !m.direct && m.cached_fraction > kWarmShare) {
      std::cout << "warning: " << Fixed(100 * m.cached_fraction, 0) << "% of the bytes were "
                << "cached before '" << m.name << "' (the cache could not be dropped): its "
                << "figure is partly the page cache's, not the disk's.\n";
    }
  }
}

int RunDiskBenchCommand(int argc, char** argv) {
  int64_t parallel = 4, chunk_mb = static_cast<int64_t>(kDefaultReadChunkBytes >> 20),
          rounds = DiskBenchOptions{}.rounds;
  double max_gb = 4;
  bool json = false;
  CommandLine flags(
      "nightshift disk-bench PATH [--parallel N] [--chunk-mb M] [--max-gb G] [--rounds R] [--json]",
      "Measures how fast this disk delivers PATH (a file, or every file under a\n"
      "directory) when it is not cached: one read in flight, then N, each with\n"
      "O_DIRECT and buffered after dropping the files' cached pages, in a few\n"
      "rounds; each mode's fastest round counts.");
  flags.Int("parallel", &parallel, "reads in flight in the parallel modes, 2..64 (4)");
  flags.Int("chunk-mb", &chunk_mb, "MiB per read (128, what the engine's loader reads)");
  flags.Double("max-gb", &max_gb,
               "read at most this many GB per mode and round; 0 reads everything (4)");
  flags.Int("rounds", &rounds,
            "rounds, 1..10, each reading every mode; a mode's fastest round counts (3)");
  flags.Bool("json", &json, "print one JSON object");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (flags.positional().size() != 1) {
    return Fail("disk-bench", InvalidArgument("give exactly one PATH (see --help)"));
  }
  if (chunk_mb < 1 || chunk_mb > 1024) {
    return Fail("disk-bench", InvalidArgument("--chunk-mb must be between 1 and 1024"));
  }
  if (max_gb < 0) return Fail("disk-bench", InvalidArgument("--max-gb must not be negative"));
  if (rounds < 1 || rounds > 10) {
    return Fail("disk-bench", InvalidArgument("--rounds must be between 1 and 10"));
  }
  DiskBenchOptions options;
  options.parallel_reads = static_cast<int>(std::min<int64_t>(parallel, 1000));
  options.chunk_bytes = static_cast<uint64_t>(chunk_mb) << 20;
  options.max_bytes = static_cast<uint64_t>(max_gb * 1e9);
  options.rounds = static_cast<int>(rounds);
  StatusOr<DiskBenchResult> result = RunDiskBench(flags.positional()[0], options);
  if (!result.ok()) return Fail("disk-bench", result.status());
  if (json) {
    std::cout << ResultJson(*result, options).dump(2) << "\n";
  } else {
    PrintHuman(*result, options);
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("disk-bench",
                    "cold-cache read bandwidth of a checkpoint: 1 vs N reads in flight",
                    RunDiskBenchCommand);

}  // namespace nightshift::cli
