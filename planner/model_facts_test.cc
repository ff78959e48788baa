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

TEST(DefaultKvDtypeBytesTest, SixteenBitOnlyOnTheAcceleratorPathForSixteenBitWeights) {
  EXPECT_EQ(DefaultKvDtypeBytes(/*accelerator_path=*/false, 2), 4);
  EXPECT_EQ(DefaultKvDtypeBytes(false, 4), 4);
  EXPECT_EQ(DefaultKvDtypeBytes(true, 2), 2);  // BF16 or F16 weights
  EXPECT_EQ(DefaultKvDtypeBytes(true, 4), 4);  // float32 weights compute in float32
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

TEST(PassSecondsWithComputeTest, TheSlowerOfTheReadAndTheCompute) {
  // 1 GB at 2 GB/s is 0.5 s; 100 GFLOP at 400 GFLOP/s is 0.25 s: I/O-bound.
  EXPECT_DOUBLE_EQ(PassSecondsWithCompute(1'000'000'000, 2e9, 100e9, 400e9), 0.5);
  // 1 TFLOP at 400 GFLOP/s is 2.5 s: compute-bound, priced as such.
  EXPECT_DOUBLE_EQ(PassSecondsWithCompute(1'000'000'000, 2e9, 1e12, 400e9), 2.5);
  // An unknown rate or no FLOPs: the read alone (PassSeconds).
  EXPECT_DOUBLE_EQ(PassSecondsWithCompute(1'000'000'000, 2e9, 1e12, 0), 0.5);
  EXPECT_DOUBLE_EQ(PassSecondsWithCompute(1'000'000'000, 2e9, 0, 400e9), 0.5);
  EXPECT_DOUBLE_EQ(
      PassSecondsWithCompute(1'000'000'000, 2e9, 1e12, std::numeric_limits<double>::quiet_NaN()),
      0.5);
  // An unknown bandwidth: the compute alone; both unknown: 0.
  EXPECT_DOUBLE_EQ(PassSecondsWithCompute(1'000'000'000, 0, 1e12, 400e9), 2.5);
  EXPECT_EQ(PassSecondsWithCompute(1'000'000'000, 0, 1e12, 0), 0.0);
}

// Two layers of a q [8, 4] F16 and a norm [4], an untied head [10, 4] BF16.
checkpoint::Checkpoint FlopsCheckpoint() {
  checkpoint::Checkpoint ckpt;
  auto tensor = [&](std::string name, checkpoint::DType dtype, std::vector<int64_t> shape) {
    checkpoint::TensorInfo t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = std::move(shape);
    ckpt.tensors.push_back(t);
    return static_cast<int>(ckpt.tensors.size() - 1);
  };
  for (int l = 0; l < 2; ++l) {
    checkpoint::TensorGroup layer;
    layer.kind = checkpoint::TensorGroup::Kind::kLayer;
    layer.layer = l;
    layer.tensors = {tensor("q" + std::to_string(l), checkpoint::DType::kF16, {8, 4}),
                     tensor("norm" + std::to_string(l), checkpoint::DType::kF16, {4})};
    ckpt.layers.push_back(layer);
  }
  ckpt.embedding.tensors = {tensor("embed", checkpoint::DType::kBF16, {10, 4})};
  ckpt.lm_head = tensor("lm_head", checkpoint::DType::kBF16, {10, 4});
  ckpt.head.tensors = {ckpt.lm_head};
  return ckpt;
}

// A quantized module multiplies its logical [out, in] like a float one: an
// int4 and an FP8 checkpoint cost the FLOPs of their shapes, not none.
TEST(PassFlopsTest, QuantizedModulesCountAtTheirLogicalShape) {
  for (const char* fixture : {"awq-int4", "fp8-block"}) {
    StatusOr<checkpoint::Checkpoint> ckpt =
        checkpoint::ReadCheckpoint(testutil::DataPath(std::string("models/") + fixture));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    double expected = 0;
    int quantized = 0;
    for (const checkpoint::TensorGroup& layer : ckpt->layers) {
      for (int t : layer.tensors) {
        const checkpoint::TensorInfo& info = ckpt->tensors[static_cast<size_t>(t)];
        if (info.shape.size() != 2) continue;
        expected += 2.0 * static_cast<double>(info.shape[0] * info.shape[1]);
        quantized += info.quant != nullptr;
      }
    }
    EXPECT_GT(quantized, 0) << fixture;
    EXPECT_DOUBLE_EQ(LayerFlopsPerToken(*ckpt), expected) << fixture;
  }
}

TEST(PassFlopsTest, TwiceTheMatrixElementsPerTokenAndPerLogitRow) {
  checkpoint::Checkpoint ckpt = FlopsCheckpoint();
  EXPECT_DOUBLE_EQ(LayerFlopsPerToken(ckpt), 2.0 * 2 * 8 * 4);  // norms are not counted
  EXPECT_DOUBLE_EQ(HeadFlopsPerRow(ckpt), 2.0 * 10 * 4);
  EXPECT_DOUBLE_EQ(PassFlops(ckpt, 3, 1), 3 * 128.0 + 80.0);
  EXPECT_DOUBLE_EQ(PassFlops(ckpt, 0, 0), 0.0);
  ckpt.lm_head = -1;  // tied: the embedding is the head
  EXPECT_DOUBLE_EQ(HeadFlopsPerRow(ckpt), 80.0);
}

TEST(HeadSliceRowsTest, SlicesNoLargerThanTheLargestLayer) {
  EXPECT_EQ(HeadSliceRows(32000, 131072000, 90185728), 16000);  // bench-1.7b: two slices
  EXPECT_EQ(HeadSliceRows(100, 1000, 1000), 100);               // fits: one slice
  EXPECT_EQ(HeadSliceRows(100, 1000, 0), 100);                  // no layer: one slice
  EXPECT_EQ(HeadSliceRows(10, 1000, 300), 3);                   // 4 slices of <= 3 rows
}

TEST(ChoosePinnedGroupsTest, SpreadHeadOrTailWithinTheBudget) {
  const std::vector<uint64_t> groups(8, 10);
  EXPECT_EQ(ChoosePinnedGroups(groups, 0), std::vector<bool>(8, false));
  EXPECT_EQ(ChoosePinnedGroups(groups, 1000), std::vector<bool>(8, true));
  // Half: every other group, spread over the pass.
  std::vector<bool> spread = ChoosePinnedGroups(groups, 45);
  EXPECT_EQ(PinnedBytes(groups, spread), 40u);
  EXPECT_EQ(spread, (std::vector<bool>{true, false, true, false, true, false, true, false}));
  EXPECT_EQ(ChoosePinnedGroups(groups, 25, PinPlacement::kHead),
            (std::vector<bool>{true, true, false, false, false, false, false, false}));
  EXPECT_EQ(ChoosePinnedGroups(groups, 25, PinPlacement::kTail),
            (std::vector<bool>{false, false, false, false, false, false, true, true}));
  // A group that does not fit is passed over for a smaller one that does.
  EXPECT_EQ(ChoosePinnedGroups({10, 30, 5}, 16), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(ParsePinPlacement("tail").value(), PinPlacement::kTail);
  EXPECT_FALSE(ParsePinPlacement("middle").ok());
}

TEST(PinBudgetTest, WhatTheWorkingSetLeaves) {
  EXPECT_EQ(PinBudgetBytes(100, 20, 30, 10), 40u);
  EXPECT_EQ(PinBudgetBytes(50, 20, 30, 10), 0u);  // saturates
  EXPECT_EQ(StreamBufferBytes({10, 30, 5}, {}, true), 60u);
  EXPECT_EQ(StreamBufferBytes({10, 30, 5}, {false, true, false}, true), 20u);
  EXPECT_EQ(StreamBufferBytes({10, 30, 5}, {false, true, false}, false), 10u);
  EXPECT_EQ(StreamBufferBytes({10, 30, 5}, {true, true, true}, true), 0u);
}

TEST(ChooseHostTierGroupsTest, WhatTheDeviceLeavesWithinTheBudgetLessTheStreamBuffers) {
  const std::vector<uint64_t> groups(8, 10);
  // Nothing on the device: 2 stream buffers of 10, 25 more keeps 2 groups.
  const std::vector<bool> host = ChooseHostTierGroups(groups, {}, 45, /*prefetch=*/true);
  EXPECT_EQ(PinnedBytes(groups, host), 20u);
  EXPECT_EQ(host, ChoosePinnedGroups(groups, 25));
  // The device keeps groups 0, 2, 4 and 6: the host tier picks among the rest.
  const std::vector<bool> device = ChoosePinnedGroups(groups, 45);
  const std::vector<bool> rest = ChooseHostTierGroups(groups, device, 1000, true);
  for (size_t g = 0; g < groups.size(); ++g) EXPECT_NE(rest[g], device[g]) << g;
  // Buffers alone fill the budget: nothing kept.
  EXPECT_EQ(ChooseHostTierGroups(groups, {}, 20, true), std::vector<bool>(8, false));
  EXPECT_EQ(ChooseHostTierGroups(groups, {}, 20, /*prefetch=*/false),
            ChoosePinnedGroups(groups, 10));
}

TEST(StreamedBytesPerPassTest, PinnedBytesAreNotStreamed) {
  checkpoint::Checkpoint ckpt;
  ckpt.total_bytes = 1000;
  EXPECT_EQ(StreamedBytesPerPass(ckpt), 1000u);
  EXPECT_EQ(StreamedBytesPerPass(ckpt, 400), 600u);
  EXPECT_EQ(StreamedBytesPerPass(ckpt, 2000), 0u);
  ckpt.embedding.bytes = 100;  // never pinned: a tied head's copy still leaves its rows read
  EXPECT_EQ(StreamedBytesPerPass(ckpt, 950), 100u);
  EXPECT_EQ(StreamedBytesPerPass(ckpt, 400), 600u);
  EXPECT_DOUBLE_EQ(PassSeconds(StreamedBytesPerPass(ckpt, 400), 1200), 0.5);
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
    // The loader's groups: every tensor but the embedding (and what the
    // engine ignores), a tied head counting the embedding once more.
    const std::vector<uint64_t> groups = StreamedGroupBytes(*ckpt);
    EXPECT_GT(groups.size(), ckpt->layers.size());
    uint64_t grouped = 0;
    for (uint64_t g : groups) grouped += g;
    const uint64_t untied = tensors - ckpt->embedding.bytes - ckpt->other.bytes;
    EXPECT_EQ(grouped, ckpt->tied_embeddings ? untied + ckpt->embedding.bytes : untied);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace nightshift::planner
