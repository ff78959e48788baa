#include "worker/daemon/resources.h"

#include <gtest/gtest.h>

#include <map>

namespace nightshift::worker {
namespace {

TEST(ResolveDeviceTest, AutoFollowsCudaAndExplicitChoicesAreChecked) {
  EXPECT_EQ(*ResolveDevice("auto", false), "cpu");
  EXPECT_EQ(*ResolveDevice("", true), "cuda");
  EXPECT_EQ(*ResolveDevice("CPU", true), "cpu");
  EXPECT_EQ(*ResolveDevice("cuda:1", true), "cuda:1");
  EXPECT_EQ(ResolveDevice("cuda", false).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveDevice("cuda:x", true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveDevice("tpu", true).status().code(), StatusCode::kInvalidArgument);
}

TEST(DetectMemoryBudgetTest, CpuBudgetIsAtMostEightyPercentOfTheLimit) {
  auto budget = DetectMemoryBudget("cpu");
  ASSERT_TRUE(budget.ok()) << budget.status().ToString();
  EXPECT_GT(*budget, 0u);
  if (auto limit = CgroupMemoryLimit()) {
    EXPECT_LE(*budget, limit->bytes * 0.8 + 1);
  }
}

// Files of a fake /sys/fs/cgroup.
class FakeFiles {
 public:
  FakeFiles& Add(const std::string& path, const std::string& text) {
    files_[path] = text;
    return *this;
  }
  std::function<std::optional<std::string>(const std::string&)> Reader() const {
    return [this](const std::string& path) -> std::optional<std::string> {
      auto it = files_.find(path);
      if (it == files_.end()) return std::nullopt;
      return it->second;
    };
  }

 private:
  std::map<std::string, std::string> files_;
};

constexpr char kV1Mounts[] =
    "30 25 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 25 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 25 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(CgroupMemoryLimitTest, V1TakesTheSmallestLimitOfTheProcesssCgroupAndItsParents) {
  FakeFiles files;
  files.Add("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
      .Add("/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "2147483648\n")
      .Add("/sys/fs/cgroup/memory/box/test/memory.limit_in_bytes", "1073741824\n");
  const std::string cgroup = "4:memory:/box/test\n1:cpu:/\n0::/\n";
  auto limit = CgroupMemoryLimitFrom(cgroup, kV1Mounts, files.Reader());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 1073741824u);
  EXPECT_EQ(limit->file, "/sys/fs/cgroup/memory/box/test/memory.limit_in_bytes");
  // A parent's smaller limit binds the child too.
  files.Add("/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "536870912");
  limit = CgroupMemoryLimitFrom(cgroup, kV1Mounts, files.Reader());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 536870912u);
  // No limit anywhere (v1's huge value, v2's "max"): none.
  EXPECT_FALSE(CgroupMemoryLimitFrom("4:memory:/\n0::/\n", kV1Mounts, files.Reader()));
}

TEST(CgroupMemoryLimitTest, V2ReadsMemoryMaxBelowTheMountsRoot) {
  FakeFiles files;
  files.Add("/sys/fs/cgroup/memory.max", "max\n")
      .Add("/sys/fs/cgroup/work/memory.max", "max\n")
      .Add("/sys/fs/cgroup/work/job/memory.max", "805306368\n");
  const std::string mounts = "25 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
  auto limit = CgroupMemoryLimitFrom("0::/work/job\n", mounts, files.Reader());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 805306368u);
  // A container's mount of its own cgroup: the mount's root is the path's start.
  const std::string bound = "25 1 0:26 /work /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
  FakeFiles inside;
  inside.Add("/sys/fs/cgroup/job/memory.max", "805306368");
  limit = CgroupMemoryLimitFrom("0::/work/job\n", bound, inside.Reader());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->file, "/sys/fs/cgroup/job/memory.max");
  EXPECT_FALSE(CgroupMemoryLimitFrom("0::/work\n", mounts, files.Reader()));
}

TEST(PlannedMemoryTest, TheCgroupLessTheAllowanceCutsALargerBudget) {
  bool cut = true;
  EXPECT_EQ(*PlannedMemory(8ull << 30, std::nullopt, 512ull << 20, &cut), 8ull << 30);
  EXPECT_FALSE(cut);
  const CgroupLimit gig{1ull << 30, "memory.max"};
  EXPECT_EQ(*PlannedMemory(8ull << 30, gig, 512ull << 20, &cut), 512ull << 20);
  EXPECT_TRUE(cut);
  EXPECT_EQ(*PlannedMemory(256ull << 20, gig, 512ull << 20, &cut), 256ull << 20);
  EXPECT_FALSE(cut);
  auto none = PlannedMemory(8ull << 30, gig, 1ull << 30, &cut);
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("memory.max"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::worker
