#include "worker/daemon/resources.h"

#include <gtest/gtest.h>

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
    EXPECT_LE(*budget, *limit * 0.8 + 1);
  }
}

}  // namespace
}  // namespace nightshift::worker
