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
  std::string extra;  // more engine-stream-run flags (the residency sweep's)
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
};

class Bench {
 public:
  Bench(std::string model_dir, std::string stream_run, int64_t prompt_tokens, int64_t new_tokens)
      : model_dir_(std::move(model_dir)),
        stream_run_(std::move(stream_run)),
        prompt_tokens_(prompt_tokens),
        new_tokens_(new_tokens) {}

  bool SetUpCgroup(uint64_t cap) {
    fs::create_directories(kCgroup);
    return WriteText(std::string(kCgroup) + "/memory.limit_in_bytes", std::to_string(cap));
  }

  // One child run; false when it failed (the message is printed).
  bool Run(const Config& c, Measured* m) {
    DropCaches();
    std::string command;
    if (c.capped) {
      WriteText(std::string(kCgroup) + "/memory.max_usage_in_bytes", "0");
      command = "sh -c 'echo $$ > " + std::string(kCgroup) + "/tasks && exec \"$0\" \"$@\"' ";
    }
    command += stream_run_ + " --model-dir " + model_dir_ + " --batch " + std::to_string(c.batch) +
               " --prompt-tokens " + std::to_string(prompt_tokens_) + " --max-new-tokens " +
               std::to_string(new_tokens_) + " --max-context 256" +
               (c.prefetch ? "" : " --no-prefetch") + c.extra;
    const std::string out = Capture(command);
    if (out.empty()) {
      std::cerr << "engine_bench: failed: " << command << "\n";
      return false;
    }
    nlohmann::json j = nlohmann::json::parse(out);
    std::vector<double> decode, io, compute;
    for (size_t p = 1; p < j["passes"].size(); ++p) {
      decode.push_back(j["passes"][p]["seconds"].get<double>());
      io.push_back(j["passes"][p]["io_seconds"].get<double>());
      compute.push_back(j["passes"][p]["compute_seconds"].get<double>());
    }
    m->pass_seconds = Median(decode);
    m->io_seconds = Median(io);
    m->compute_seconds = Median(compute);
    m->pinned_bytes = j["pinned_bytes"].get<uint64_t>();
    m->tokens_per_second = static_cast<double>(c.batch) / m->pass_seconds;
    m->pass_bytes = j["passes"].back()["bytes_read"].get<uint64_t>();
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
};

// <build>/bin/engine-stream-run, beside this program's <build>/bench/.
inline std::string DefaultStreamRun() {
  return (fs::canonical("/proc/self/exe").parent_path().parent_path() / "bin" / "engine-stream-run")
      .string();
}

inline double Mb(double bytes) { return bytes / (1 << 20); }

}  // namespace nightshift::bench
