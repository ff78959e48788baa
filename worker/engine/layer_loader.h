// Reads a checkpoint's layers into memory one group of tensors at a time, the
// next group while the caller computes on this one.
//
// A group is the tensors streamed together (one decoder layer, or the final
// norm and LM head). Reading is done by I/O threads with `pread` of large
// chunks into buffers this object owns, `read_streams` reads in flight (at
// least four for small ones): on the machines this was written on one read
// stream gets ~0.8 GB/s and four ~2 GB/s (see common/disk_bench.h); later
// disks read fastest with one. The reads in flight are all of
// one group: the next group's start when its last has finished, so each
// group arrives as soon as the disk can deliver it (two groups read at once
// arrive together, and the disk then idles while the first computes; see
// ReadLoop). A group smaller than a chunk is one read. Buffered reads drop their
// page-cache pages after each chunk (POSIX_FADV_DONTNEED); O_DIRECT reads
// (optional) bypass it. Either way neither the process nor the page cache
// grows with the checkpoint.
//
// Streaming (the default) holds at most two groups: the one acquired and the
// one being prefetched, each in one of two buffers sized to the largest group
// and reused pass after pass. A mixture of experts' loader also has two
// look-ahead buffers, each sized to the largest dense part of a sparse layer
// that follows another (planner::LookAheadGroups): such a part is read into
// them, even while the expert slices before it wait for their routing. A pinned group (`pinned`, or
// every group when `resident`) is read once into a buffer of its own and kept as stored, so later
// passes read only the groups not pinned (partial residency).
//
//   Acquire(0) ... compute ... Release(0); Acquire(1) ... Release(1); ...
//
// With `prefetch`, Acquire(i) also starts reading the next groups that are
// not in memory yet (after the last group, those of the next pass), as many
// as there are free stream buffers: pinned groups already read are skipped,
// so the disk keeps reading while pinned groups compute. Without it, Acquire
// reads group i and waits for it. Groups must be acquired in order, wrapping
// after the last one (skipping those given to Skip), with the previous group
// released first.
//
// libtorch-free. Not thread-safe: one thread calls Acquire and Release; the
// I/O threads are internal.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/disk_bench.h"
#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

using TensorList = std::vector<const checkpoint::TensorInfo*>;

struct LayerLoaderOptions {
  bool resident = false;  // keep each group after its first read (all pinned)
  // Per group (empty, or one flag per group): keep it after its first read,
  // in a buffer of its own. SetPinned sets this later, between passes.
  std::vector<bool> pinned;
  // Per group (empty, or one flag per group): a pass decides as it runs
  // whether it reads the group, and which of its units (Decide): the
  // prefetch stops before such a group until then (but for the look-ahead
  // group after it), and Acquire passes over one the pass does not read. A mixture-of-experts
  // layer's expert slices, read once the pass's rows are routed.
  std::vector<bool> deferred;
  // Per group (empty, or one list per group, each empty or one entry per
  // tensor): the unit each tensor belongs to (an expert). A read never spans
  // two units, so that a deferred group can read some of them.
  std::vector<std::vector<int>> units;
  bool prefetch = true;  // read group i + 1 while group i is in use
  // Large reads in flight at once (1..64), all chunks of the same group.
  // Reads of at most 16 MiB (a quantized tensor's parts, mostly kilobytes)
  // go at least four at a time whatever this is: they wait on the disk's
  // latency, not its bandwidth.
  int read_streams = 4;
  // Read with O_DIRECT where the filesystem allows it: no page cache to fill
  // (and be charged for under a memory cgroup) and no copy out of it. Else,
  // or when false, reads go through the page cache and each read's pages are
  // dropped after it. Off by default (a worker turns it on where its disk
  // bench found O_DIRECT fastest): on the virtio disk this was first
  // measured on, four O_DIRECT streams of 16 MB reads read 0.74-1.20 GB/s
  // and four buffered ones 1.32-1.92; with 128 MB reads one O_DIRECT stream
  // later read 4.42-4.85 GB/s (common/disk_bench.h).
  bool direct = false;
  // Bytes per read (> 0). On this project's virtio disk the size of a read,
  // not the reads in flight, set the speed: a cold 1-sequence pass of
  // bench-1.7b (1.5 GB, 94 MB layers) took a median 0.64 s with 16 MB reads,
  // 0.45 s with 64 MB, 0.36 s with 128 MB; 64 sequences 0.76 / 0.53 / 0.51 s
  // (interleaved rounds, AMD EPYC family 26, 2026-12-02). A read lands in
  // the group's own buffer, so the size costs no memory beyond it.
  // The disk bench measures at this size too (common/disk_bench.h).
  uint64_t chunk_bytes = kDefaultReadChunkBytes;
  // Allocates each buffer: at least `bytes`, 4096-aligned, freed when the
  // last copy of the pointer goes (it may throw std::bad_alloc). Empty:
  // std::aligned_alloc. The engine passes page-locked memory when it copies
  // the buffers to a GPU, so that those copies run asynchronously.
  std::function<std::shared_ptr<unsigned char>(uint64_t bytes)> allocate;
};

// One acquired group.
struct LoadedGroup {
  std::vector<const unsigned char*> data;  // per tensor of the group, in its order
  // The part of the buffer holding the group: every data pointer lies in
  // [base, base + bytes), with the tensors' file alignment kept (modulo 4096).
  const unsigned char* base = nullptr;
  uint64_t bytes = 0;
  uint64_t bytes_read = 0;  // the group's tensor bytes when read for this acquire; 0 when resident
  double wait_seconds = 0;  // how long Acquire blocked
  double load_seconds = 0;  // from the group's first read starting to its last finishing
  // When read for this acquire: its first read started and its last finished
  // (load_seconds apart); the clock's epoch otherwise.
  std::chrono::steady_clock::time_point read_began;
  std::chrono::steady_clock::time_point read_ended;
  // A deferred group's units (LayerLoaderOptions::units) read for this
  // acquire, per unit (past the end: not read): those the decision asked
  // for, and guessed ones (Guess) it did not. When `guessed`, its reads
  // began before the decision, so load_seconds includes the wait for it.
  std::vector<bool> units_read;
  bool guessed = false;
};

class LayerLoader {
 public:
  // Opens the files of `checkpoint` (which must outlive the loader, as must
  // the TensorInfo the groups point to) and starts the I/O threads.
  // InvalidArgument for no groups, an empty group, read_streams outside
  // 1..64 or chunk_bytes 0; DataLoss naming the file when one cannot be
  // opened.
  static StatusOr<std::unique_ptr<LayerLoader>> Open(const checkpoint::Checkpoint& checkpoint,
                                                     std::vector<TensorList> groups,
                                                     const LayerLoaderOptions& options);
  // Waits for reads in flight, then frees every buffer.
  ~LayerLoader();
  LayerLoader(const LayerLoader&) = delete;
  LayerLoader& operator=(const LayerLoader&) = delete;

  // Group `index`'s tensors in memory, valid until Release(index). Blocks
  // until they are read. FailedPrecondition when `index` is not the group
  // after the last one acquired (0 first, wrapping after the last) or the
  // previous group is still held; DataLoss naming the file for a failed or
  // short read (the loader is then unusable: every later call fails).
  StatusOr<LoadedGroup> Acquire(size_t index);

  // Gives group `index` back: streaming reuses its buffer for a later group;
  // a pinned one is kept. A group not held is ignored.
  void Release(size_t index);

  // Pins the groups `pinned` marks (one flag per group; see
  // LayerLoaderOptions::pinned), before the first Acquire or between two
  // (no group held: at a pass boundary), after the reads in flight finish.
  // A group that stays pinned keeps its buffer and what it holds; one no
  // longer pinned has its buffer freed now and is read again when next
  // acquired; a newly pinned one is kept from its next read, or at once when
  // it was already read ahead into a stream buffer (copied out of it). A
  // group read ahead that stays streamed keeps its data unless the stream
  // buffers change size. FailedPrecondition while a group is held;
  // InvalidArgument for a wrong count.
  Status SetPinned(std::vector<bool> pinned);

  // This pass's decision for deferred group `index` (LayerLoaderOptions::
  // deferred; ignored for others): `units` empty passes over it (Acquire
  // goes around it); else it reads the units marked true (a unit past the
  // end is not read), or all of them when the group is pinned (kept for
  // later passes). LoadedGroup::bytes_read then counts what was read; the
  // data of units not read is undefined. The decision lasts until the group
  // is acquired or passed over. Between acquisitions, with no group held or
  // while the group before it is held.
  void Decide(size_t index, std::vector<bool> units);

  // A guess at deferred group `index`'s next decision: the units it likely
  // asks for (as Decide's `units`). When the prefetch finds the group the
  // next one undecided and a stream buffer free, it reads them, queued after
  // every read already asked for (so in time the disk would otherwise idle
  // while the rows route). Decide then takes back the reads of guessed units
  // it does not ask for that have not started, and reads the units it asks
  // for that were not guessed; a group passed over gives its buffer back
  // once the reads in flight end. Guessed units read and not asked for are
  // read for nothing (in LoadedGroup::units_read, not asked for). Spent by
  // the decision; ignored for a pinned group, which reads every unit.
  void Guess(size_t index, std::vector<bool> units);

  // Group `index`, released, is never read again: Acquire's order and
  // prefetch go around it (the caller keeps its own copy, e.g. on a device).
  // When every group is skipped, nothing is read. A pinned group's buffer is
  // freed.
  void Skip(size_t index);
  // Group `index` is read again, in its place in the order (the caller gave
  // up its copy). Between passes: the next Acquire is the next pass's first,
  // the first group not skipped. A group not skipped is ignored.
  void Unskip(size_t index);

  size_t groups() const;
  // LayerLoaderOptions::deferred, one flag per group (all false when empty).
  std::vector<bool> deferred_groups() const;
  // Bytes of the largest group: one buffer's worth of tensor data.
  uint64_t largest_group_bytes() const;
  // Tensor bytes of group `index` (LoadedGroup::bytes_read when it is read).
  uint64_t group_tensor_bytes(size_t index) const;
  // Bytes of the stream buffers a pass needs: the largest buffer of a group
  // not pinned, x 2 with prefetch (x 1 without); 0 when every group is
  // pinned; plus, with prefetch, the two look-ahead buffers.
  uint64_t stream_buffer_bytes() const;
  // Bytes of group `index`'s part of a buffer (LoadedGroup::bytes): its
  // tensors and the alignment around them.
  uint64_t buffer_bytes(size_t index) const;

 private:
  struct Impl;
  explicit LayerLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nightshift::engine
