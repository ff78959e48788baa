// The checkpoint's safetensors files, memory-mapped read-only and read in
// place: no copy on disk, no conversion step. The engine gathers the
// embedding rows of the tokens in a pass from the mapping (touching only
// their pages) and gives the pages back (Release), so neither resident memory
// nor page cache grows with the checkpoint. Layers are read by LayerLoader.
//
// libtorch-free. After Open the object is immutable apart from the kernel's
// page state: Data() and Release are thread-safe.
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
