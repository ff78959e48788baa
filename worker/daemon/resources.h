// What the machine offers a worker: the memory budget when none is given and
// the device choice (sizes parse with common/size.h).
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nightshift::worker {

// The worker's device from --device / NIGHTSHIFT_DEVICE: "cpu", "cuda",
// "cuda:N", or "auto" (empty = auto), which is "cuda" when `cuda_available`
// and "cpu" otherwise. InvalidArgument for anything else; FailedPrecondition
// for a CUDA device without CUDA.
StatusOr<std::string> ResolveDevice(std::string_view requested, bool cuda_available);

// Memory a worker may use by default: on a CUDA device the GPU's free memory
// (nvidia-smi), else 80% of the smaller of RAM (/proc/meminfo MemTotal) and
// this process's cgroup memory limit (CgroupMemoryLimit). Unavailable when
// none of these can be read.
StatusOr<uint64_t> DetectMemoryBudget(const std::string& device);

// A memory limit of the cgroup a process runs in, and the file it was read from.
struct CgroupLimit {
  uint64_t bytes = 0;
  std::string file;  // e.g. /sys/fs/cgroup/memory/box/memory.limit_in_bytes
};

// The memory limit of this process's cgroup: the smallest limit set on its
// cgroup or any ancestor up to the hierarchy's mount (cgroup v2
// memory.max, v1 memory.limit_in_bytes), found through /proc/self/cgroup and
// /proc/self/mountinfo. nullopt: no limit set, or nothing readable.
std::optional<CgroupLimit> CgroupMemoryLimit();

// CgroupMemoryLimit on given text: `proc_cgroup` as /proc/self/cgroup reads,
// `mountinfo` as /proc/self/mountinfo, and `read_file` returning a file's
// contents (nullopt when it cannot be read). v2 is looked at before v1; "max"
// and v1's huge "no limit" values (2^62 and up) are no limit.
std::optional<CgroupLimit> CgroupMemoryLimitFrom(
    const std::string& proc_cgroup, const std::string& mountinfo,
    const std::function<std::optional<std::string>(const std::string&)>& read_file);

// The memory a worker plans within: `budget` (--memory-budget, or the
// detected default), cut to `cgroup` less `runtime_allowance` (what the
// process needs beyond its pass plan: libraries, threads, allocator slack)
// when that is smaller. *cut says whether it was cut. ResourceExhausted when
// the cgroup leaves nothing after the allowance.
StatusOr<uint64_t> PlannedMemory(uint64_t budget, const std::optional<CgroupLimit>& cgroup,
                                 uint64_t runtime_allowance, bool* cut);

}  // namespace nightshift::worker
