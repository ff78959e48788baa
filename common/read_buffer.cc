#include "common/read_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace nightshift {

void* AllocateReadBuffer(uint64_t bytes) {
  const uint64_t align = bytes >= kHugePageBytes ? kHugePageBytes : 4096;
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
  // Advice: a kernel without transparent huge pages refuses it, and the
  // buffer works the same.
  if (p != nullptr && align == kHugePageBytes) (void)::madvise(p, size, MADV_HUGEPAGE);
  return p;
}

}  // namespace nightshift
