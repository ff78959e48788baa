// Cold-cache read bandwidth of a file or of every file under a directory.
//
// The figure a worker advertises and ETAs are computed from: how fast this
// disk delivers a checkpoint that is not in the page cache. Four modes are
// measured over the same bytes, each after asking the kernel to drop those
// files' cached pages (posix_fadvise DONTNEED):
//   one stream,  O_DIRECT     one read in flight, bypassing the page cache
//   N streams,   O_DIRECT     N reads in flight (N threads on one work list)
//   one stream,  buffered     through the page cache, kernel read-ahead
//   N streams,   buffered
// in that order, in each of a few rounds (DiskBenchOptions::rounds). On the
// machines this was written on one stream reads ~0.8 GB/s and four reads in
// flight ~2.3 GB/s: a prefetcher must keep several large reads in flight to
// reach the disk's limit, and this is how to find out how many.
//
// DONTNEED is advice: pages that another process maps or dirties stay cached.
// Each buffered mode therefore reports the share of its bytes found cached
// before it started, so a warm figure is visible as such. O_DIRECT modes are
// skipped (with the reason) on filesystems that refuse O_DIRECT.
//
// Reads only; blocks for as long as the reads take. Thread-safe: each call
// uses its own descriptors, buffers and threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

// Bytes per read of the engine's loader (LayerLoaderOptions::chunk_bytes)
// and so of the disk bench, which measures the modes the loader can read in
// at the size it reads. The size decides which mode is fastest: on this
// project's virtio disk one O_DIRECT stream read bench-1.7b at 4.42 and
// 4.85 GB/s with 128 MB reads and 1.45 with 16 MB, four buffered streams
// 0.95-1.34 with 128 MB and 2.52 with 16 MB (2026-12-02); the loader with
// 128 MB reads ran a 64-sequence pass in 0.42-0.46 s with one O_DIRECT
// stream and 0.52-0.57 s with four buffered ones (medians of 3).
inline constexpr uint64_t kDefaultReadChunkBytes = 128ull << 20;

struct DiskBenchOptions {
  uint64_t chunk_bytes = kDefaultReadChunkBytes;  // bytes per read; rounded up to 4096
  int parallel_reads = 4;                         // reads in flight in the parallel modes (2..64)
  uint64_t max_bytes = 0;                         // read at most this much per mode; 0 = all
  // Rounds (1..10): each reads every mode once, one mode after another, and
  // a mode's figures are its fastest round's. One round is at the mercy of
  // the disk's moment: five runs of one round each on AMD EPYC family 25
  // model 17 (2026-12-03) read bench-1.7b with one O_DIRECT stream at
  // 1.39-2.25 GB/s and chose three different modes.
  int rounds = 3;
};

struct DiskBenchMode {
  std::string name;  // "1 stream, O_DIRECT", "4 streams, buffered", ...
  bool direct = false;
  int streams = 1;
  bool ran = false;  // false when skipped (see skipped_reason)
  std::string skipped_reason;
  uint64_t bytes = 0;  // bytes read
  double seconds = 0;
  double gbs = 0;              // 10^9 bytes per second
  double cached_fraction = 0;  // share of the bytes in the page cache before the mode ran
  // The figures above are the fastest round's; this is every round's GB/s,
  // in order (empty when skipped).
  std::vector<double> round_gbs;
};

struct DiskBenchResult {
  std::string path;
  std::vector<std::string> files;    // the files read, sorted
  uint64_t total_bytes = 0;          // size of all of them
  uint64_t bytes_per_mode = 0;       // what each mode reads (total, or max_bytes)
  std::vector<DiskBenchMode> modes;  // in the order listed above
  double single_stream_gbs = 0;      // fastest single-stream mode that ran
  double parallel_gbs = 0;           // fastest parallel mode that ran
  double read_gbs = 0;               // the chosen mode's: the figure to advertise
  int fastest = -1;                  // index in `modes` of the chosen mode (ChooseReadMode)
  bool parallel_chosen = false;      // the chosen mode is a parallel one

  // The fastest mode's GB/s, chosen or not: the disk's limit that benches
  // set passes against.
  double FastestGbs() const { return std::max(single_stream_gbs, parallel_gbs); }
};

// A parallel mode is chosen only when it read at least this much faster than
// the fastest single stream. Parallel reads cost a pass more than the bench
// shows: on AMD EPYC family 25 model 17 (2026-12-03) four O_DIRECT streams
// read bench-1.7b at 2.70 GB/s against one stream's 2.68, and a 64-sequence
// pass reading that way took 0.93-0.94 s against 0.66-0.71 s with one stream
// (mostly because the loader read two layers at once, which it no longer
// does: worker/engine/layer_loader.h). A layer smaller than a read is one
// read whatever the streams, so a worker that chose parallel reads prices a
// model whose layers all fit in one read at the one-stream figure of the
// same kind (worker/daemon/model_catalog.h, StreamReadBandwidth).
// Where parallel reads pay, they pay by far more (0.8 against 2.3 GB/s on
// the machines the disk bench was written on).
inline constexpr double kParallelReadMargin = 1.10;

// Fills single_stream_gbs, parallel_gbs and, from them, the mode a loader
// should read in (`fastest`, `read_gbs`, `parallel_chosen`): the fastest
// single-stream mode unless a parallel one beat it by kParallelReadMargin
// (or no single stream ran). Modes that did not run are passed over; with
// none, `fastest` stays -1 and read_gbs 0.
void ChooseReadMode(DiskBenchResult& result);

// Measures `path` (a file, or a directory whose regular files, symlinks
// followed, are read in name order), `rounds` times over. Errors: NotFound
// when `path` does not exist; InvalidArgument for options out of range
// (chunk_bytes 0, parallel_reads outside 2..64, rounds outside 1..10) or
// when there is nothing to read (no
// non-empty file); Unavailable when a file cannot be opened or read (the
// message names it and the errno text); DataLoss when a file is shorter than
// it was when listed.
StatusOr<DiskBenchResult> RunDiskBench(const std::string& path,
                                       const DiskBenchOptions& options = {});

}  // namespace nightshift
