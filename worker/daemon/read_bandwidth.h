// The read bandwidth a worker advertises, and how its engines read: cold-cache
// reads of the checkpoints under a model root in each of the disk bench's
// modes (common/disk_bench.h), measured once and cached on disk per root, so a
// restart does not read gigabytes again. The chosen mode's figure (the
// fastest, parallel reads only by a margin: ChooseReadMode) is the one
// advertised and its way of reading (O_DIRECT or not, reads in flight) the one
// the engines stream with, so that a pass reads at the figure its ETA assumes.
// On this project's virtio disk (2026-12-02, two runs of disk-bench) one
// O_DIRECT stream read 3.50 and 3.69 GB/s, four buffered streams 3.11 and
// 2.00; the copy out of the page cache also costs a compute-bound pass CPU
// time (a 1024-token prefill of bench-1.7b: median 4.30 s buffered, 3.93 s
// O_DIRECT, AMD EPYC family 26, 2 threads).
//
// The cache is one small file per root in the state directory
// (`bandwidth-<hash of the canonical root>.json`, holding the root, the figure,
// the mode, the one-stream figure, and the read size, parallel-read margin
// and rounds measured with); a cached figure is used as long as that file
// exists, holds all of them and they are the disk bench's now.
//
// Thread-safety: free functions; concurrent calls for the same root may both
// measure (the last write wins, both figures valid).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace nightshift::worker {

// The way the disk bench chose to read a root, and its speed.
struct ReadBandwidth {
  double bytes_per_second = 0;
  bool direct = false;  // that mode read with O_DIRECT
  int streams = 1;      // with this many reads in flight
  // One stream of the same kind (O_DIRECT or not): how a checkpoint whose
  // every streamed group fits in one read streams, whatever `streams` (the
  // loader reads one group at a time, worker/engine/layer_loader.h). Equal
  // to bytes_per_second when one stream was chosen.
  double one_read_bytes_per_second = 0;
};

struct BandwidthOptions {
  std::string state_dir;  // where the cache files live; created when missing
  // Bytes each disk-bench mode reads at most per round (bounds the start-up
  // time: 4 modes x 3 rounds, 12 GiB at most, 8.7 s on the disk of
  // 2026-12-03).
  uint64_t max_bytes = 1ull << 30;
};

// The measured figure for `root`: the cached one when present, else a fresh
// measurement of every mode over the files under `root`, written to the
// cache. `*cached` (when given) says which.
// Errors: RunDiskBench's (NotFound for a missing root, InvalidArgument when
// there is nothing to read, Unavailable on read errors). A cache file that
// cannot be read or written is ignored (measured again; the write failure is
// not an error).
StatusOr<ReadBandwidth> MeasureReadBandwidth(const std::string& root,
                                             const BandwidthOptions& options,
                                             bool* cached = nullptr);

// The cache file used for `root` (canonical when it exists).
std::string BandwidthCachePath(const std::string& root, const std::string& state_dir);

}  // namespace nightshift::worker
