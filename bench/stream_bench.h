// What the streaming benchmarks share (engine_bench, quant_bench): dropping
// the page cache, running bin/engine-stream-run in a child process (inside
// a memory cgroup, v1, when capped) and reading its JSON, medians.
// Needs root for the cache drop and the cgroup. Header-only; bench code.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/disk_bench.h"

namespace nightshift::bench {

namespace fs = std::filesystem;

inline constexpr char kCgroup[] = "/sys/fs/cgroup/memory/nightshift-engine-bench";

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

inline bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out.flush());
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

inline double LoadAverage() {
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

inline void DropCaches() {
  sync();
  WriteText("/proc/sys/vm/drop_caches", "3");
}

// Runs `command` and returns its standard output; empty on failure.
inline std::string Capture(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  return pclose(pipe) == 0 ? out : "";
}

struct Config {
  std::string name;
  int64_t batch = 1;
  bool capped = true;
  bool prefetch = true;
  std::string extra;            // more engine-stream-run flags (the residency sweep's)
  std::string compute = "f32";  // --compute-dtype
  int64_t prompt_tokens = 0;    // 0: the bench's --prompt-tokens
  int64_t new_tokens = 0;       // 0: the bench's --max-new-tokens
  bool first_pass = false;      // time the first pass (a prefill) instead of the decode passes
};

struct Measured {
  double pass_seconds = 0;  // median decode pass
  double io_seconds = 0;    // of it, waiting for weights
  double tokens_per_second = 0;
  double cgroup_peak_bytes = 0;
  double vm_hwm_bytes = 0;
  double compute_seconds = 0;  // of the median decode pass's kind: median compute seconds
  uint64_t pass_bytes = 0;
  uint64_t pinned_bytes = 0;
  nlohmann::json generated;
  std::string kernels;          // the timed pass's projection kernels
  double projection_flops = 0;  // of the timed pass
  double chosen_rate = 0;       // the chosen kernel's measured FLOP/s at the micro-batch rows
  nlohmann::json compute;       // engine-stream-run's "compute"
  nlohmann::json last_pass;     // engine-stream-run's last pass, as it printed it
};

class Bench {
 public:
  // `state_dir`: where the engine caches its compute measurement (empty:
  // engine-stream-run's default).
  Bench(std::string model_dir, std::string stream_run, int64_t prompt_tokens, int64_t new_tokens,
        std::string state_dir = "")
      : model_dir_(std::move(model_dir)),
        stream_run_(std::move(stream_run)),
        prompt_tokens_(prompt_tokens),
        new_tokens_(new_tokens),
        state_dir_(std::move(state_dir)) {}

  bool SetUpCgroup(uint64_t cap) {
    fs::create_directories(kCgroup);
    return WriteText(std::string(kCgroup) + "/memory.limit_in_bytes", std::to_string(cap));
  }

  // Later runs read the checkpoint the way `mode` did (a disk-bench mode:
  // O_DIRECT or not, its reads in flight), as a worker streams in the mode
  // its disk measured fastest.
  void ReadLike(const DiskBenchMode& mode) {
    read_flags_ =
        " --read-streams " + std::to_string(mode.streams) + (mode.direct ? " --direct-io" : "");
  }

  // One child run; false when it failed (the message is printed).
  bool Run(const Config& c, Measured* m) {
    DropCaches();
    std::string command;
    if (c.capped) {
      WriteText(std::string(kCgroup) + "/memory.max_usage_in_bytes", "0");
      command = "sh -c 'echo $$ > " + std::string(kCgroup) + "/tasks && exec \"$0\" \"$@\"' ";
    }
    const int64_t prompt = c.prompt_tokens > 0 ? c.prompt_tokens : prompt_tokens_;
    const int64_t fresh = c.new_tokens > 0 ? c.new_tokens : new_tokens_;
    command += stream_run_ + " --model-dir " + model_dir_ + " --batch " + std::to_string(c.batch) +
               " --prompt-tokens " + std::to_string(prompt) + " --max-new-tokens " +
               std::to_string(fresh) + " --max-context " +
               std::to_string(std::max<int64_t>(256, prompt + fresh)) +
               (c.prefetch ? "" : " --no-prefetch") + " --compute-dtype " + c.compute +
               (state_dir_.empty() ? "" : " --state-dir " + state_dir_) + read_flags_ + c.extra;
    const std::string out = Capture(command);
    if (out.empty()) {
      std::cerr << "engine_bench: failed: " << command << "\n";
      return false;
    }
    nlohmann::json j = nlohmann::json::parse(out);
    std::vector<double> decode, io, compute;
    const size_t first = c.first_pass ? 0 : 1;
    const size_t last = c.first_pass ? 1 : j["passes"].size();
    for (size_t p = first; p < last; ++p) {
      decode.push_back(j["passes"][p]["seconds"].get<double>());
      io.push_back(j["passes"][p]["io_seconds"].get<double>());
      compute.push_back(j["passes"][p]["compute_seconds"].get<double>());
    }
    const nlohmann::json& timed = j["passes"][first];
    m->kernels = timed.value("projection_kernels", "");
    m->projection_flops = timed.value("projection_flops", 0.0);
    // The measured rate of what ran at this pass's micro-batch rows.
    const int64_t rows =
        std::min<int64_t>(timed["tokens"].get<int64_t>(), j["micro_batch_rows"].get<int64_t>());
    const nlohmann::json& compute_doc = j["compute"];
    m->compute = compute_doc;
    if (compute_doc.contains("chosen_flops_per_second")) {
      const std::vector<int64_t> buckets = compute_doc["rows"];
      size_t b = 0;
      while (b + 1 < buckets.size() && buckets[b + 1] <= rows) ++b;
      m->chosen_rate = compute_doc["chosen_flops_per_second"][b].get<double>();
    }
    m->pass_seconds = Median(decode);
    m->io_seconds = Median(io);
    m->compute_seconds = Median(compute);
    m->pinned_bytes = j["pinned_bytes"].get<uint64_t>();
    // A prefill pass's tokens are its prompts; a decode pass's one per sequence.
    m->tokens_per_second =
        static_cast<double>(c.batch * (c.first_pass ? prompt : 1)) / m->pass_seconds;
    m->pass_bytes = j["passes"].back()["bytes_read"].get<uint64_t>();
    m->last_pass = j["passes"].back();
    m->vm_hwm_bytes = j["vm_hwm_bytes"].get<double>();
    m->cgroup_peak_bytes =
        c.capped ? std::stod(ReadText(std::string(kCgroup) + "/memory.max_usage_in_bytes")) : 0;
    m->generated = j["generated"];
    return true;
  }

 private:
  std::string model_dir_;
  std::string stream_run_;
  int64_t prompt_tokens_;
  int64_t new_tokens_;
  std::string state_dir_;
  std::string read_flags_;  // ReadLike's; empty: engine-stream-run's default
};

// <build>/bin/engine-stream-run, beside this program's <build>/bench/.
inline std::string DefaultStreamRun() {
  return (fs::canonical("/proc/self/exe").parent_path().parent_path() / "bin" / "engine-stream-run")
      .string();
}

inline double Mb(double bytes) { return bytes / (1 << 20); }

}  // namespace nightshift::bench
