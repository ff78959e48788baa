#include "worker/daemon/resources.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace nightshift::worker {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<uint64_t> TotalRam() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> FreeGpuMemory(const std::string& device) {
  const size_t colon = device.find(':');
  const std::string index = colon == std::string::npos ? "0" : device.substr(colon + 1);
  const std::string command =
      "nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i " + index +
      " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  char line[128] = {};
  const bool read = std::fgets(line, sizeof(line), pipe) != nullptr;
  const int rc = pclose(pipe);
  if (!read || rc != 0) return std::nullopt;
  char* end = nullptr;
  const double mib = std::strtod(line, &end);
  if (end == line || !(mib > 0)) return std::nullopt;
  return static_cast<uint64_t>(mib * 1024 * 1024);
}

}  // namespace

StatusOr<std::string> ResolveDevice(std::string_view requested, bool cuda_available) {
  const std::string r = Lower(requested);
  if (r.empty() || r == "auto") return std::string(cuda_available ? "cuda" : "cpu");
  if (r == "cpu") return r;
  bool cuda = r == "cuda";
  if (!cuda && r.rfind("cuda:", 0) == 0 && r.size() > 5) {
    cuda = r.find_first_not_of("0123456789", 5) == std::string::npos;
  }
  if (!cuda) {
    return InvalidArgument("device '" + std::string(requested) +
                           "' is not auto, cpu, cuda or cuda:N");
  }
  if (!cuda_available) {
    return FailedPrecondition("device " + r +
                              " asked for, but this build has no CUDA or sees no GPU");
  }
  return r;
}

namespace {

std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> SplitOn(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  return parts;
}

// A limit file's value: nullopt for "max", v1's "no limit" (2^62 and up) or
// anything not a number.
std::optional<uint64_t> ParseLimit(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string word;
  if (!(in >> word) || word.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const uint64_t value = std::stoull(word);
  if (value >= (1ull << 62)) return std::nullopt;
  return value;
}

// The smallest limit in `file_name` of `dir` and its parents up to `root`.
std::optional<CgroupLimit> SmallestUpTo(
    std::string dir, const std::string& root, const std::string& file_name,
    const std::function<std::optional<std::string>(const std::string&)>& read_file) {
  std::optional<CgroupLimit> best;
  while (true) {
    const std::string file = dir + "/" + file_name;
    if (auto value = ParseLimit(read_file(file)); value && (!best || *value < best->bytes)) {
      best = CgroupLimit{*value, file};
    }
    if (dir.size() <= root.size()) break;
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos || slash < root.size()) {
      dir = root;
    } else {
      dir = dir.substr(0, slash);
    }
  }
  return best;
}

}  // namespace

std::optional<CgroupLimit> CgroupMemoryLimitFrom(
    const std::string& proc_cgroup, const std::string& mountinfo,
    const std::function<std::optional<std::string>(const std::string&)>& read_file) {
  // /proc/self/cgroup: "ID:controllers:path"; v2 is "0::path", v1's memory
  // hierarchy lists "memory" among its controllers.
  std::string v2_path, v1_path;
  bool has_v2 = false, has_v1 = false;
  for (const std::string& line : SplitOn(proc_cgroup, '\n')) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.substr(0, first) == "0" && controllers.empty()) {
      has_v2 = true;
      v2_path = path;
    }
    for (const std::string& c : SplitOn(controllers, ',')) {
      if (c == "memory") {
        has_v1 = true;
        v1_path = path;
      }
    }
  }
  // mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - FSTYPE SOURCE SUPEROPTIONS".
  std::optional<CgroupLimit> v2, v1;
  for (const std::string& line : SplitOn(mountinfo, '\n')) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    const auto dash = std::find(words.begin(), words.end(), "-");
    if (words.size() < 5 || words.end() - dash < 4) continue;
    const std::string& root = words[3];
    const std::string& mount = words[4];
    const std::string& type = *(dash + 1);
    const std::string& options = *(dash + 3);
    // The process's cgroup below the mount: its path less the mount's root
    // (a container sees its own cgroup as "/").
    auto dir_of = [&](const std::string& path) {
      std::string rest = path;
      if (root != "/" && rest.rfind(root, 0) == 0) rest = rest.substr(root.size());
      if (rest == "/") rest.clear();
      return mount + rest;
    };
    if (type == "cgroup2" && has_v2 && !v2) {
      v2 = SmallestUpTo(dir_of(v2_path), mount, "memory.max", read_file);
    } else if (type == "cgroup" && has_v1 && !v1) {
      bool memory = false;
      for (const std::string& o : SplitOn(options, ',')) memory = memory || o == "memory";
      if (memory) v1 = SmallestUpTo(dir_of(v1_path), mount, "memory.limit_in_bytes", read_file);
    }
  }
  if (v2 && v1) return v2->bytes <= v1->bytes ? v2 : v1;
  return v2 ? v2 : v1;
}

std::optional<CgroupLimit> CgroupMemoryLimit() {
  const std::optional<std::string> cgroup = ReadWholeFile("/proc/self/cgroup");
  const std::optional<std::string> mounts = ReadWholeFile("/proc/self/mountinfo");
  if (cgroup && mounts) {
    if (auto limit = CgroupMemoryLimitFrom(*cgroup, *mounts, ReadWholeFile)) return limit;
  }
  // Without /proc: the usual mount points, as a container sees its own cgroup.
  for (const char* file :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (auto value = ParseLimit(ReadWholeFile(file))) return CgroupLimit{*value, file};
  }
  return std::nullopt;
}

StatusOr<uint64_t> PlannedMemory(uint64_t budget, const std::optional<CgroupLimit>& cgroup,
                                 uint64_t runtime_allowance, bool* cut) {
  *cut = false;
  if (!cgroup) return budget;
  if (cgroup->bytes <= runtime_allowance) {
    return ResourceExhausted("the cgroup's memory limit of " + std::to_string(cgroup->bytes) +
                             " bytes (" + cgroup->file +
                             ") leaves nothing after the runtime's "
                             "allowance of " +
                             std::to_string(runtime_allowance) + " bytes (--runtime-allowance)");
  }
  const uint64_t room = cgroup->bytes - runtime_allowance;
  if (budget <= room) return budget;
  *cut = true;
  return room;
}

StatusOr<uint64_t> DetectMemoryBudget(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) {
    if (auto free = FreeGpuMemory(device)) return *free;
  }
  std::optional<uint64_t> ram = TotalRam();
  const std::optional<CgroupLimit> cgroup = CgroupMemoryLimit();
  if (cgroup && (!ram || cgroup->bytes < *ram)) ram = cgroup->bytes;
  if (!ram) return Unavailable("cannot read the memory size: give --memory-budget");
  return static_cast<uint64_t>(*ram * 0.8);
}

}  // namespace nightshift::worker
