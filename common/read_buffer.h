// Memory for reads straight from a disk (O_DIRECT) into user space.
//
// 4096-aligned, as O_DIRECT requires. From kHugePageBytes up it is aligned
// to a huge page and advised MADV_HUGEPAGE (a system whose transparent huge
// pages are "madvise" gives them only so): each read then pins and maps the
// buffer 2 MB, not 4 KB, at a time. Measured on bench-1.7b (AMD EPYC family
// 26, 2 cores, one O_DIRECT stream): a 1-sequence pass 0.43-0.57 s with 4 KB
// pages, 0.36-0.37 s with huge ones.
//
// Dependency-free.
#pragma once

#include <cstdint>

namespace nightshift {

inline constexpr uint64_t kHugePageBytes = 2 << 20;

// At least `bytes` (rounded up to the alignment); null when none is left.
// Freed with std::free.
void* AllocateReadBuffer(uint64_t bytes);

}  // namespace nightshift
