#include "worker/engine/expert_usage.h"

#include <gtest/gtest.h>

#include <fstream>

#include "worker/checkpoint/test_util.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::TempDir;

TEST(ExpertUsageTest, CountsRoundTripThroughTheStateDirectoryForTheirShapeOnly) {
  TempDir dir;
  const std::string path = ExpertUsagePath(dir.path(), "/models/a");
  EXPECT_NE(path, ExpertUsagePath(dir.path(), "/models/b"));
  EXPECT_EQ(ReadExpertUsage(path, 3, 4), std::nullopt);  // none yet
  const ExpertUsage usage = {{}, {5, 0, 7, 1}, {2, 2, 0, 9}};
  ASSERT_TRUE(WriteExpertUsage(path, usage));
  EXPECT_EQ(ReadExpertUsage(path, 3, 4), usage);
  EXPECT_EQ(ReadExpertUsage(path, 2, 4), std::nullopt);  // another depth
  EXPECT_EQ(ReadExpertUsage(path, 3, 8), std::nullopt);  // another expert count
  std::ofstream(path) << "{not json";
  EXPECT_EQ(ReadExpertUsage(path, 3, 4), std::nullopt);
}

// Groups: dense 100, slice 50 (used 10), slice 50 (used 40), dense 100,
// slice 25 (used 20). Always-read groups first, then use per byte: slice 4
// (0.8/byte), slice 2 (0.8/byte; later), slice 1 (0.2/byte).
TEST(ExpertUsageTest, AlwaysReadGroupsFirstThenTheMostUsedPerByte) {
  const std::vector<uint64_t> bytes = {100, 50, 50, 100, 25};
  const std::vector<bool> dense = {true, false, false, true, false};
  const std::vector<uint64_t> use = {0, 10, 40, 0, 20};
  using planner::PinPlacement;
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, use, 0, PinPlacement::kSpread),
            (std::vector<bool>{false, false, false, false, false}));
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, use, 100, PinPlacement::kHead),
            (std::vector<bool>{true, false, false, false, false}));
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, use, 225, PinPlacement::kSpread),
            (std::vector<bool>{true, false, false, true, true}));
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, use, 275, PinPlacement::kSpread),
            (std::vector<bool>{true, false, true, true, true}));
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, use, 325, PinPlacement::kSpread),
            (std::vector<bool>{true, true, true, true, true}));
  // A slice that does not fit leaves room for a smaller, less used one.
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, use, 240, PinPlacement::kSpread),
            (std::vector<bool>{true, false, false, true, true}));
  // Without counts: position order among the slices.
  EXPECT_EQ(ChooseExpertAwarePins(bytes, dense, {}, 250, PinPlacement::kSpread),
            (std::vector<bool>{true, true, false, true, false}));
}

}  // namespace
}  // namespace nightshift::engine
