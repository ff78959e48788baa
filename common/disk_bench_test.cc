#include "common/disk_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include "tests/testing/paths.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class DiskBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("disk_bench_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file of `bytes` bytes of a repeating pattern.
  std::string Write(const std::string& name, size_t bytes) {
    fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    std::string block(1 << 16, '\0');
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 31 + 7);
    for (size_t left = bytes; left > 0;) {
      size_t n = std::min(left, block.size());
      out.write(block.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
    return path.string();
  }

  fs::path dir_;
};

DiskBenchOptions SmallChunks() {
  DiskBenchOptions options;
  options.chunk_bytes = 1 << 20;
  options.parallel_reads = 3;
  return options;
}

TEST_F(DiskBenchTest, FileReadInEveryMode) {
  const size_t size = (5 << 20) + 123;  // an unaligned tail for O_DIRECT
  std::string file = Write("model.safetensors", size);
  StatusOr<DiskBenchResult> r = RunDiskBench(file, SmallChunks());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, std::vector<std::string>{file});
  EXPECT_EQ(r->total_bytes, size);
  EXPECT_EQ(r->bytes_per_mode, size);
  ASSERT_EQ(r->modes.size(), 4u);
  EXPECT_EQ(r->modes[0].name, "1 stream, O_DIRECT");
  EXPECT_EQ(r->modes[1].name, "3 streams, O_DIRECT");
  EXPECT_EQ(r->modes[2].name, "1 stream, buffered");
  EXPECT_EQ(r->modes[3].name, "3 streams, buffered");
  double best = 0;
  for (const DiskBenchMode& m : r->modes) {
    if (!m.ran) {
      EXPECT_TRUE(m.direct) << m.name;  // only O_DIRECT may be refused
      EXPECT_FALSE(m.skipped_reason.empty());
      continue;
    }
    EXPECT_EQ(m.bytes, size) << m.name;
    EXPECT_GT(m.seconds, 0) << m.name;
    EXPECT_GT(m.gbs, 0) << m.name;
    // Every round's figure, the kept one the fastest of them.
    ASSERT_EQ(m.round_gbs.size(), static_cast<size_t>(DiskBenchOptions{}.rounds)) << m.name;
    EXPECT_EQ(m.gbs, *std::max_element(m.round_gbs.begin(), m.round_gbs.end())) << m.name;
    EXPECT_DOUBLE_EQ(m.gbs, static_cast<double>(m.bytes) / m.seconds / 1e9) << m.name;
    EXPECT_GE(m.cached_fraction, 0) << m.name;
    EXPECT_LE(m.cached_fraction, 1) << m.name;
    best = std::max(best, m.gbs);
  }
  EXPECT_TRUE(r->modes[2].ran && r->modes[3].ran);
  EXPECT_EQ(r->single_stream_gbs, std::max(r->modes[0].gbs, r->modes[2].gbs));
  EXPECT_EQ(r->parallel_gbs, std::max(r->modes[1].gbs, r->modes[3].gbs));
  EXPECT_EQ(r->parallel_chosen, r->parallel_gbs >= kParallelReadMargin * r->single_stream_gbs);
  ASSERT_GE(r->fastest, 0);
  EXPECT_TRUE(r->modes[static_cast<size_t>(r->fastest)].ran);
  EXPECT_EQ(r->read_gbs, r->modes[static_cast<size_t>(r->fastest)].gbs);
  EXPECT_GE(r->read_gbs * kParallelReadMargin, best);
}

// Modes as the bench fills them: name, O_DIRECT, streams, ran, GB/s.
DiskBenchResult Modes(std::initializer_list<std::tuple<bool, int, bool, double>> modes) {
  DiskBenchResult r;
  for (const auto& [direct, streams, ran, gbs] : modes) {
    DiskBenchMode m;
    m.direct = direct;
    m.streams = streams;
    m.ran = ran;
    m.gbs = gbs;
    r.modes.push_back(m);
  }
  ChooseReadMode(r);
  return r;
}

TEST(ChooseReadModeTest, ParallelReadsOnlyWhenTheyBeatOneStreamByTheMargin) {
  // 2026-12-03's near tie: four O_DIRECT streams 0.7% faster; one stream wins.
  DiskBenchResult tie = Modes({{true, 1, true, 2.68},
                               {true, 4, true, 2.70},
                               {false, 1, true, 0.56},
                               {false, 4, true, 1.77}});
  EXPECT_EQ(tie.fastest, 0);
  EXPECT_FALSE(tie.parallel_chosen);
  EXPECT_DOUBLE_EQ(tie.read_gbs, 2.68);
  EXPECT_DOUBLE_EQ(tie.single_stream_gbs, 2.68);
  EXPECT_DOUBLE_EQ(tie.parallel_gbs, 2.70);
  EXPECT_DOUBLE_EQ(tie.FastestGbs(), 2.70);  // the disk's limit, though not chosen

  // Where several reads in flight pay, by far more than the margin.
  DiskBenchResult pays = Modes(
      {{true, 1, true, 0.8}, {true, 4, true, 1.9}, {false, 1, true, 0.7}, {false, 4, true, 2.3}});
  EXPECT_EQ(pays.fastest, 3);
  EXPECT_TRUE(pays.parallel_chosen);
  EXPECT_DOUBLE_EQ(pays.read_gbs, 2.3);

  // Exactly the margin is enough; just under it is not.
  EXPECT_TRUE(Modes({{true, 1, true, 1.0}, {true, 4, true, kParallelReadMargin}}).parallel_chosen);
  EXPECT_FALSE(
      Modes({{true, 1, true, 1.0}, {true, 4, true, kParallelReadMargin - 0.01}}).parallel_chosen);

  // The fastest single stream may be buffered.
  EXPECT_EQ(Modes({{true, 1, true, 1.0}, {true, 4, true, 1.05}, {false, 1, true, 1.2}}).fastest, 2);
}

TEST(ChooseReadModeTest, ModesThatDidNotRunArePassedOver) {
  // O_DIRECT refused: the buffered modes decide.
  DiskBenchResult buffered = Modes(
      {{true, 1, false, 0}, {true, 4, false, 0}, {false, 1, true, 1.0}, {false, 4, true, 1.05}});
  EXPECT_EQ(buffered.fastest, 2);
  // No single stream ran: the parallel mode, whatever its speed.
  DiskBenchResult only_parallel = Modes({{true, 1, false, 0}, {true, 4, true, 0.5}});
  EXPECT_EQ(only_parallel.fastest, 1);
  EXPECT_TRUE(only_parallel.parallel_chosen);
  DiskBenchResult none = Modes({{true, 1, false, 0}, {true, 4, false, 0}});
  EXPECT_EQ(none.fastest, -1);
  EXPECT_EQ(none.read_gbs, 0);
}

TEST_F(DiskBenchTest, DirectoryReadsEveryFileInNameOrder) {
  std::string b = Write("b.safetensors", 3 << 20);
  std::string a = Write("a.safetensors", 1 << 20);
  std::string nested = Write("sub/c.bin", 4096 + 1);
  Write("empty", 0);
  StatusOr<DiskBenchResult> r = RunDiskBench(dir_.string(), SmallChunks());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->files.size(), 4u);
  EXPECT_EQ(r->files[0], a);
  EXPECT_EQ(r->files[1], b);
  EXPECT_EQ(r->files[3], nested);
  EXPECT_EQ(r->total_bytes, (4u << 20) + 4097);
  EXPECT_EQ(r->modes[2].bytes, (4u << 20) + 4097);
}

TEST_F(DiskBenchTest, MaxBytesCapsEachMode) {
  Write("a", 3 << 20);
  Write("b", 3 << 20);
  DiskBenchOptions options = SmallChunks();
  options.max_bytes = (4 << 20) + 5;
  StatusOr<DiskBenchResult> r = RunDiskBench(dir_.string(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->total_bytes, 6u << 20);
  EXPECT_EQ(r->bytes_per_mode, (4u << 20) + 5);
  for (const DiskBenchMode& m : r->modes) {
    if (m.ran) {
      EXPECT_EQ(m.bytes, (4u << 20) + 5) << m.name;
    }
  }
}

TEST_F(DiskBenchTest, Errors) {
  StatusOr<DiskBenchResult> missing = RunDiskBench((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  StatusOr<DiskBenchResult> empty = RunDiskBench(dir_.string());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);

  std::string file = Write("x", 4096);
  DiskBenchOptions options;
  options.parallel_reads = 1;
  EXPECT_EQ(RunDiskBench(file, options).status().code(), StatusCode::kInvalidArgument);
  options.parallel_reads = 4;
  options.chunk_bytes = 0;
  EXPECT_EQ(RunDiskBench(file, options).status().code(), StatusCode::kInvalidArgument);
  options.chunk_bytes = 4096;
  for (int rounds : {0, 11}) {
    options.rounds = rounds;
    StatusOr<DiskBenchResult> r = RunDiskBench(file, options);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << rounds;
    EXPECT_NE(r.status().message().find("rounds"), std::string::npos) << rounds;
  }
  options.rounds = 1;
  StatusOr<DiskBenchResult> once = RunDiskBench(file, options);
  ASSERT_TRUE(once.ok()) << once.status().ToString();
  EXPECT_EQ(once->modes[2].round_gbs.size(), 1u);
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult DiskBenchCommand(const std::string& args, const fs::path& scratch) {
  fs::path err_file = scratch / "stderr";
  std::string cmd =
      testutil::BinPath("nightshift") + " disk-bench " + args + " 2>" + err_file.string();
  CommandResult run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) run.out.append(buf, n);
  int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream ss;
  ss << err.rdbuf();
  run.err = ss.str();
  return run;
}

TEST_F(DiskBenchTest, CommandJson) {
  std::string file = Write("model.safetensors", 3 << 20);
  CommandResult run = DiskBenchCommand(file + " --json --chunk-mb 1 --parallel 2", dir_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["path"], file);
  EXPECT_EQ(j["bytes_per_mode"], 3 << 20);
  EXPECT_EQ(j["parallel_reads"], 2);
  EXPECT_EQ(j["rounds"], 3);
  ASSERT_EQ(j["modes"].size(), 4u);
  EXPECT_EQ(j["modes"][2]["round_gbs"].size(), 3u);
  EXPECT_GT(j["read_gbs"].get<double>(), 0);
  EXPECT_TRUE(j["chosen"] == "parallel" || j["chosen"] == "single stream");
  EXPECT_EQ(j["read_gbs"], j["chosen"] == "parallel" ? j["parallel_gbs"] : j["single_stream_gbs"]);
  EXPECT_TRUE(j["chosen_mode"].is_string());
}

TEST_F(DiskBenchTest, CommandHumanAndErrors) {
  std::string file = Write("model.safetensors", 1 << 20);
  CommandResult human = DiskBenchCommand(file + " --chunk-mb 1", dir_);
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("1 stream, buffered"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("GB/s"), std::string::npos) << human.out;

  CommandResult missing = DiskBenchCommand((dir_ / "nope").string(), dir_);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err.find('\n'), missing.err.size() - 1) << missing.err;
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;

  CommandResult no_path = DiskBenchCommand("", dir_);
  EXPECT_EQ(no_path.exit_code, 2);
  CommandResult bad_flag = DiskBenchCommand(file + " --parallel 0", dir_);
  EXPECT_EQ(bad_flag.exit_code, 2);
  CommandResult bad_rounds = DiskBenchCommand(file + " --rounds 0", dir_);
  EXPECT_NE(bad_rounds.exit_code, 0);
  EXPECT_NE(bad_rounds.err.find("--rounds"), std::string::npos) << bad_rounds.err;
  CommandResult one_round = DiskBenchCommand(file + " --chunk-mb 1 --rounds 1", dir_);
  ASSERT_EQ(one_round.exit_code, 0) << one_round.err;
  EXPECT_NE(one_round.out.find("1 round\n"), std::string::npos) << one_round.out;
}

}  // namespace
}  // namespace nightshift
