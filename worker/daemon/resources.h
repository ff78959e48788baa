// What the machine offers a worker: the memory budget when none is given and
// the device choice (sizes parse with common/size.h).
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
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
// this process's cgroup memory limit (v2 memory.max or v1
// memory.limit_in_bytes). Unavailable when none of these can be read.
StatusOr<uint64_t> DetectMemoryBudget(const std::string& device);

// The cgroup's memory limit, when one is set (nullopt: none or unreadable).
std::optional<uint64_t> CgroupMemoryLimit();

}  // namespace nightshift::worker
