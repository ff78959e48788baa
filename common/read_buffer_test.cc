#include "common/read_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace nightshift {
namespace {

// The VmFlags of the mapping of this process that holds `p`.
std::string VmFlagsOf(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(ReadBufferTest, SmallBuffersArePageAlignedAndLargeOnesHugePageAlignedAndAdvised) {
  void* small = AllocateReadBuffer(10000);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 4096, 0u);
  std::free(small);

  const uint64_t bytes = 3 * kHugePageBytes + 12345;  // rounded up to whole huge pages
  auto* large = static_cast<unsigned char*>(AllocateReadBuffer(bytes));
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % kHugePageBytes, 0u);
  large[0] = 1;
  large[bytes - 1] = 2;  // all of it is usable
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
    // "hg": the range is madvise(MADV_HUGEPAGE)d, to its last byte.
    EXPECT_NE(VmFlagsOf(large).find(" hg"), std::string::npos) << VmFlagsOf(large);
    EXPECT_NE(VmFlagsOf(large + bytes - 1).find(" hg"), std::string::npos);
  }
  std::free(large);
}

}  // namespace
}  // namespace nightshift
