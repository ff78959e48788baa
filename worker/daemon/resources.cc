#include "worker/daemon/resources.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace nightshift::worker {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The first line of `path` as a number of bytes; nullopt when unreadable or
// not a number ("max").
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.empty() || !std::isdigit(static_cast<unsigned char>(word[0]))) {
    return std::nullopt;
  }
  return std::stoull(word);
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

std::optional<uint64_t> CgroupMemoryLimit() {
  if (auto v2 = ReadNumber("/sys/fs/cgroup/memory.max")) return v2;
  auto v1 = ReadNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  // v1 reports "no limit" as a huge number (about 2^63).
  if (v1 && *v1 < (1ull << 62)) return v1;
  return std::nullopt;
}

StatusOr<uint64_t> DetectMemoryBudget(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) {
    if (auto free = FreeGpuMemory(device)) return *free;
  }
  std::optional<uint64_t> ram = TotalRam();
  const std::optional<uint64_t> cgroup = CgroupMemoryLimit();
  if (cgroup && (!ram || *cgroup < *ram)) ram = cgroup;
  if (!ram) return Unavailable("cannot read the memory size: give --memory-budget");
  return static_cast<uint64_t>(*ram * 0.8);
}

}  // namespace nightshift::worker
