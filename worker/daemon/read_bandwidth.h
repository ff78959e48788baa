// The read bandwidth a worker advertises: parallel cold-cache reads of the
// checkpoints under a model root (common/disk_bench.h), measured once and
// cached on disk per root, so a restart does not read gigabytes again.
//
// The cache is one small file per root in the state directory
// (`bandwidth-<hash of the canonical root>.json`, holding the root and the
// figure); a cached figure is used as long as that file exists.
//
// Thread-safety: free functions; concurrent calls for the same root may both
// measure (the last write wins, both figures valid).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace nightshift::worker {

struct BandwidthOptions {
  std::string state_dir;  // where the cache files live; created when missing
  // Bytes each disk-bench mode reads at most (bounds the start-up time).
  uint64_t max_bytes = 1ull << 30;
};

// The measured figure for `root` in bytes per second: the cached one when
// present, else a fresh measurement of the parallel modes over the files under
// `root`, written to the cache. `*cached` (when given) says which.
// Errors: RunDiskBench's (NotFound for a missing root, InvalidArgument when
// there is nothing to read, Unavailable on read errors). A cache file that
// cannot be read or written is ignored (measured again; the write failure is
// not an error).
StatusOr<double> MeasureReadBandwidth(const std::string& root, const BandwidthOptions& options,
                                      bool* cached = nullptr);

// The cache file used for `root` (canonical when it exists).
std::string BandwidthCachePath(const std::string& root, const std::string& state_dir);

}  // namespace nightshift::worker
