#include "worker/daemon/resources.h"

#include <gtest/gtest.h>

namespace nightshift::worker {
namespace {

TEST(ParseBytesTest, AcceptsSuffixesPeopleWrite) {
  EXPECT_EQ(*ParseBytes("2048"), 2048u);
  EXPECT_EQ(*ParseBytes("8G"), 8ull << 30);
  EXPECT_EQ(*ParseBytes("8g"), 8ull << 30);
  EXPECT_EQ(*ParseBytes("512M"), 512ull << 20);
  EXPECT_EQ(*ParseBytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseBytes("64KB"), 64ull << 10);
  EXPECT_EQ(*ParseBytes("1T"), 1ull << 40);
}

TEST(ParseBytesTest, RefusesNonsense) {
  for (const char* bad : {"", "G", "8X", "-1G", "0", "8 G G", "1e40", "nan"}) {
    EXPECT_EQ(ParseBytes(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

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
    EXPECT_LE(*budget, *limit * 0.8 + 1);
  }
}

}  // namespace
}  // namespace nightshift::worker
