// The checkpoint's safetensors files, memory-mapped read-only and read in
// place: no copy on disk, no conversion step. The engine gathers the
// embedding rows of the tokens in a pass from the mapping (asking for their
// pages together first, PrefetchRows, and touching only those) and gives the
// pages back (Release), so neither resident memory nor page cache grows with
// the checkpoint. Layers are read by LayerLoader.
//
// libtorch-free. After Open the object is immutable apart from the kernel's
// page state: Data(), PrefetchRows and Release are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

class MappedCheckpoint {
 public:
  // Maps every file of `checkpoint`; tensors passed later must come from it.
  // DataLoss naming the file when a file cannot be opened or mapped or its
  // size changed since the header was validated.
  static StatusOr<std::unique_ptr<MappedCheckpoint>> Open(const checkpoint::Checkpoint& checkpoint);
  ~MappedCheckpoint();
  MappedCheckpoint(const MappedCheckpoint&) = delete;
  MappedCheckpoint& operator=(const MappedCheckpoint&) = delete;

  // The first byte of `tensor`'s data (no alignment guarantee beyond the
  // file's). Valid while this object lives.
  const unsigned char* Data(const checkpoint::TensorInfo& tensor) const;

  // Asks for the pages holding rows `rows` (any order, repeats allowed) of
  // `tensor`, whose rows are `row_bytes` apart, all at once
  // (POSIX_FADV_WILLNEED: the reads are queued together and this returns
  // without waiting for them), and makes a touch of `tensor`'s mapping read
  // only the page touched (MADV_RANDOM). A fault in a mapping otherwise reads
  // the device's read-ahead around the page, one fault after another: on this
  // project's virtio disk (read_ahead_kb 8192) the 64 embedding rows of a
  // 64-sequence pass of bench-1.7b, 4 KB each, read ~100 MB and took 0.2 s,
  // while the layer loader, waiting for that pass's first layer to be taken,
  // read nothing (2026-12-03).
  void PrefetchRows(const checkpoint::TensorInfo& tensor, const std::vector<int64_t>& rows,
                    uint64_t row_bytes) const;

  // Drops the tensors' pages from this process (MADV_DONTNEED) and from the
  // page cache (POSIX_FADV_DONTNEED). Data() stays valid: a later access reads
  // the file again.
  void Release(const std::vector<const checkpoint::TensorInfo*>& tensors) const;

 private:
  struct Mapping {
    int fd = -1;
    unsigned char* base = nullptr;
    uint64_t size = 0;
  };
  MappedCheckpoint() = default;

  std::vector<Mapping> files_;  // parallel to Checkpoint::files
};

}  // namespace nightshift::engine
