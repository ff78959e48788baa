#include "planner/model_facts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>

#include "planner/checkpoint_shape.h"
#include "planner/exact.h"
#include "tests/testing/paths.h"

namespace nightshift::planner {
namespace {

std::string ModelsDir() { return testutil::DataPath("models"); }

TEST(KvBytesPerTokenTest, KAndVOfEveryLayer) {
  // Llama-3-8B: 32 layers, 8 KV heads of 128, bf16: 128 KiB per token.
  EXPECT_EQ(KvBytesPerToken(32, 8, 128, 2), 131072u);
  EXPECT_EQ(KvBytesPerToken(32, 8, 128, kEngineKvDtypeBytes), 262144u);
  checkpoint::ModelConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 1;
  c.head_dim = 32;
  EXPECT_EQ(KvBytesPerToken(c, 4), 512u);
  EXPECT_EQ(KvBytesPerToken(0, 8, 128, 2), 0u);  // unknown depth
  EXPECT_EQ(KvBytesPerToken(32, 8, 128, 0), 0u);
}

TEST(KvPositionsTest, GenerationNeverFeedsItsLastToken) {
  EXPECT_EQ(KvPositions(3, 20, {}), 3 + 19);
  EXPECT_EQ(KvPositions(3, 1, {}), 3);
  EXPECT_EQ(KvPositions(3, 0, {}), 3);  // the prompt alone (last logits)
  EXPECT_EQ(KvPositions(3, -2, {}), 3);
}

TEST(KvPositionsTest, ClassificationHoldsEveryLabel) {
  EXPECT_EQ(KvPositions(3, 20, {1, 2}), 3 + 1 + 2);  // max_new_tokens is not used
  EXPECT_EQ(KvPositions(9, 0, {1, 3}), 13);
}

TEST(ReservedKvPositionsTest, OnlyJobsThatOutliveTheirFirstPassReserveKv) {
  EXPECT_EQ(ReservedKvPositions(3, 20, {}), 3 + 19);
  EXPECT_EQ(ReservedKvPositions(3, 2, {}), 4);
  // One generated token is sampled in the prompt's pass and never fed back.
  EXPECT_TRUE(EndsInFirstPass(1, {}));
  EXPECT_EQ(ReservedKvPositions(3, 1, {}), 0);
  EXPECT_EQ(ReservedKvPositions(3, 0, {}), 0);
  EXPECT_TRUE(EndsInFirstPass(20, {1, 2}));  // labels: max_new_tokens is not used
  EXPECT_EQ(ReservedKvPositions(3, 20, {1, 2}), 0);
  EXPECT_FALSE(EndsInFirstPass(2, {}));
}

TEST(FirstPassTokensTest, ThePromptAndEveryLabel) {
  EXPECT_EQ(FirstPassTokens(500, {}), 500);
  EXPECT_EQ(FirstPassTokens(500, {1, 1, 3}), 505);
}

TEST(PassTokenBudgetTest, HiddenStateAndOneLayersKeysAndValuesPerToken) {
  checkpoint::ModelConfig c;  // bench-1.7b: hidden 2048, 4 KV heads of 128
  c.hidden_size = 2048;
  c.num_layers = 16;
  c.num_kv_heads = 4;
  c.head_dim = 128;
  EXPECT_EQ(PassTokenBytes(c), 4u * 2048 + 2u * 4 * 128 * 4);
  EXPECT_EQ(DefaultPassTokenBudget(c), (64 << 20) / 12288);
  c.hidden_size = 256;  // a hidden-256 qwen2 with 2 KV heads of 64
  c.num_kv_heads = 2;
  c.head_dim = 64;
  EXPECT_EQ(DefaultPassTokenBudget(c), 32768);
}

TEST(MaxContextTokensTest, TheShorterOfPositionsAndWindow) {
  checkpoint::ModelConfig c;
  c.max_position_embeddings = 4096;
  EXPECT_EQ(MaxContextTokens(c), 4096);
  c.sliding_window = 1024;
  EXPECT_EQ(MaxContextTokens(c), 1024);
  c.sliding_window = 32768;
  EXPECT_EQ(MaxContextTokens(c), 4096);
}

TEST(PassSecondsTest, BytesOverBandwidthWithNoEfficiencyFactor) {
  EXPECT_DOUBLE_EQ(PassSeconds(1'000'000'000, 2e9), 0.5);
  EXPECT_DOUBLE_EQ(PassSeconds(0, 2e9), 0.0);
  EXPECT_EQ(PassSeconds(1'000'000'000, 0), 0.0);  // unknown bandwidth
  EXPECT_EQ(PassSeconds(1'000'000'000, -1), 0.0);
  EXPECT_EQ(PassSeconds(1'000'000'000, std::numeric_limits<double>::quiet_NaN()), 0.0);
}

// On every fixture: the facts from the parsed config agree with exact mode's
// figures from the planner's shape of the same checkpoint.
TEST(ModelFactsFixtureTest, ConfigFactsAgreeWithExactMode) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ModelsDir())) {
    if (!entry.is_directory()) continue;
    SCOPED_TRACE(entry.path().filename().string());
    StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(entry.path().string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    StatusOr<checkpoint::ModelConfig> config = checkpoint::ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    StatusOr<CheckpointShape> shape = ShapeOf(*ckpt);
    ASSERT_TRUE(shape.ok()) << shape.status().ToString();
    for (int bytes : {2, 4}) {
      EXPECT_EQ(KvBytesPerToken(*config, bytes), KvBytesPerToken(*shape, bytes));
    }
    uint64_t tensors = 0;
    for (const checkpoint::TensorInfo& t : ckpt->tensors) tensors += t.size;
    EXPECT_EQ(StreamedBytesPerPass(*ckpt), tensors);
    EXPECT_EQ(StreamedBytesPerPass(*ckpt), shape->tensor_bytes);
    EXPECT_GT(MaxContextTokens(*config), 0);
    EXPECT_LE(MaxContextTokens(*config), config->max_position_embeddings);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace nightshift::planner
