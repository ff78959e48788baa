#include "worker/daemon/read_bandwidth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "worker/daemon/test_util.h"

namespace nightshift::worker {
namespace {

using testing::MakeStoriesModel;
using testing::TempDir;

TEST(ReadBandwidthTest, MeasuresOnceThenUsesTheCachePerRoot) {
  TempDir root;
  TempDir state;
  MakeStoriesModel(root.path(), "m");
  bool cached = true;
  auto first = MeasureReadBandwidth(root.path(), {state.file("cache")}, &cached);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(*first, 0);
  EXPECT_FALSE(cached);
  EXPECT_TRUE(std::filesystem::exists(BandwidthCachePath(root.path(), state.file("cache"))));

  auto second = MeasureReadBandwidth(root.path(), {state.file("cache")}, &cached);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(cached);
  EXPECT_DOUBLE_EQ(*second, *first);

  // Another root has its own entry.
  TempDir other;
  MakeStoriesModel(other.path(), "m");
  EXPECT_NE(BandwidthCachePath(other.path(), state.path()),
            BandwidthCachePath(root.path(), state.path()));
  ASSERT_TRUE(MeasureReadBandwidth(other.path(), {state.file("cache")}, &cached).ok());
  EXPECT_FALSE(cached);
}

TEST(ReadBandwidthTest, IgnoresACorruptCacheAndReportsBenchErrors) {
  TempDir root;
  TempDir state;
  MakeStoriesModel(root.path(), "m");
  const std::string cache = BandwidthCachePath(root.path(), state.path());
  { std::ofstream(cache) << "{broken"; }
  bool cached = true;
  auto figure = MeasureReadBandwidth(root.path(), {state.path()}, &cached);
  ASSERT_TRUE(figure.ok()) << figure.status().ToString();
  EXPECT_FALSE(cached);

  TempDir empty;
  EXPECT_FALSE(MeasureReadBandwidth(empty.path(), {state.path()}).ok());
  EXPECT_EQ(MeasureReadBandwidth(empty.file("absent"), {state.path()}).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace nightshift::worker
