#include "worker/daemon/read_bandwidth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/disk_bench.h"
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
  EXPECT_GT(first->bytes_per_second, 0);
  EXPECT_TRUE(first->streams == 1 || first->streams == DiskBenchOptions{}.parallel_reads);
  EXPECT_GT(first->one_read_bytes_per_second, 0);
  if (first->streams == 1) {
    EXPECT_DOUBLE_EQ(first->one_read_bytes_per_second, first->bytes_per_second);
  }
  EXPECT_FALSE(cached);
  EXPECT_TRUE(std::filesystem::exists(BandwidthCachePath(root.path(), state.file("cache"))));

  // The cache gives back the figure and the mode it came from.
  auto second = MeasureReadBandwidth(root.path(), {state.file("cache")}, &cached);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(cached);
  EXPECT_DOUBLE_EQ(second->bytes_per_second, first->bytes_per_second);
  EXPECT_EQ(second->direct, first->direct);
  EXPECT_EQ(second->streams, first->streams);
  EXPECT_DOUBLE_EQ(second->one_read_bytes_per_second, first->one_read_bytes_per_second);

  // Another root has its own entry.
  TempDir other;
  MakeStoriesModel(other.path(), "m");
  EXPECT_NE(BandwidthCachePath(other.path(), state.path()),
            BandwidthCachePath(root.path(), state.path()));
  ASSERT_TRUE(MeasureReadBandwidth(other.path(), {state.file("cache")}, &cached).ok());
  EXPECT_FALSE(cached);
}

// A cache written before it held the mode (or with a mode out of range) is
// measured again: the engines must not guess how the figure was read.
TEST(ReadBandwidthTest, ACacheWithoutTheModeIsMeasuredAgain) {
  TempDir root;
  TempDir state;
  MakeStoriesModel(root.path(), "m");
  const std::string cache = BandwidthCachePath(root.path(), state.path());
  const std::string canonical = std::filesystem::canonical(root.path()).string();
  for (const std::string& extra : {std::string(), std::string(R"(,"direct":true,"streams":0)"),
                                   std::string(R"(,"direct":1,"streams":4)")}) {
    SCOPED_TRACE(extra);
    {
      std::ofstream(cache) << R"({"root":")" << canonical << R"(","read_bytes_per_second":123)"
                           << extra << "}";
    }
    bool cached = true;
    auto figure = MeasureReadBandwidth(root.path(), {state.path()}, &cached);
    ASSERT_TRUE(figure.ok()) << figure.status().ToString();
    EXPECT_FALSE(cached);
    EXPECT_NE(figure->bytes_per_second, 123);
  }
  // A complete entry is taken as written, if measured at today's read size
  // and chosen under today's margin for parallel reads, in today's rounds.
  const std::string entry = R"({"root":")" + canonical +
                            R"(","read_bytes_per_second":123,"direct":true,"streams":3,)" +
                            R"("one_read_bytes_per_second":45,)";
  bool cached = true;
  { std::ofstream(cache) << entry << R"("chunk_bytes":16777216})"; }
  ASSERT_NE(DiskBenchOptions{}.chunk_bytes, 16777216u);
  ASSERT_TRUE(MeasureReadBandwidth(root.path(), {state.path()}, &cached).ok());
  EXPECT_FALSE(cached);
  const std::string chunk = R"("chunk_bytes":)" + std::to_string(DiskBenchOptions{}.chunk_bytes);
  { std::ofstream(cache) << entry << chunk << "}"; }  // from before the margin
  ASSERT_TRUE(MeasureReadBandwidth(root.path(), {state.path()}, &cached).ok());
  EXPECT_FALSE(cached);
  const std::string margin = R"(,"parallel_margin":)" + std::to_string(kParallelReadMargin);
  { std::ofstream(cache) << entry << chunk << margin << "}"; }  // one round, before rounds
  ASSERT_TRUE(MeasureReadBandwidth(root.path(), {state.path()}, &cached).ok());
  EXPECT_FALSE(cached);
  {
    std::ofstream(cache) << entry << chunk << margin << R"(,"rounds":)" << DiskBenchOptions{}.rounds
                         << "}";
  }
  auto figure = MeasureReadBandwidth(root.path(), {state.path()}, &cached);
  ASSERT_TRUE(figure.ok());
  EXPECT_TRUE(cached);
  EXPECT_EQ(figure->bytes_per_second, 123);
  EXPECT_TRUE(figure->direct);
  EXPECT_EQ(figure->streams, 3);
  EXPECT_EQ(figure->one_read_bytes_per_second, 45);
  // One from before it held the one-stream figure is measured again.
  {
    std::ofstream(cache) << R"({"root":")" << canonical
                         << R"(","read_bytes_per_second":123,"direct":true,"streams":3,)" << chunk
                         << margin << R"(,"rounds":)" << DiskBenchOptions{}.rounds << "}";
  }
  figure = MeasureReadBandwidth(root.path(), {state.path()}, &cached);
  ASSERT_TRUE(figure.ok());
  EXPECT_FALSE(cached);
  EXPECT_NE(figure->bytes_per_second, 123);
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
