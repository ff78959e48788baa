#include "planner/model_facts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

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

TEST(SharedFirstPassTokensTest, ThePrefixOnceThenEachPromptsOwnTokens) {
  // The issue's night: 64 prompts of 1,500 shared + 50 own tokens.
  EXPECT_EQ(SharedFirstPassTokens(64, 1550, 1500), 1500 + 64 * 50);
  EXPECT_EQ(SharedFirstPassTokens(64, 1550, 0), 64 * 1550);
  EXPECT_EQ(SharedFirstPassTokens(1, 1550, 1500), 1550);
  EXPECT_EQ(SharedFirstPassTokens(3, 20, 20), 20);  // three identical prompts
  EXPECT_EQ(SharedFirstPassTokens(0, 20, 10), 0);
}

TEST(KeepPrefixFromPinsTest, KeepsWhenTheComputeSavedOutweighsTheBytesStreamedMore) {
  // 1,500 tokens of bench-1.7b's float32 KV (131 kB each, 197 MB): 43 ms
  // more streaming at 4.6 GB/s against ~1 ms of compute per token saved.
  EXPECT_TRUE(KeepPrefixFromPins(1500, 1500 * 131072, 1e-3, 4.6e9));
  // A model whose tokens cost little to compute and a slow disk.
  EXPECT_FALSE(KeepPrefixFromPins(1500, 1500 * 131072, 1e-6, 0.2e9));
  EXPECT_FALSE(KeepPrefixFromPins(1500, 1500 * 131072, 0, 4.6e9));  // nothing measured yet
  EXPECT_FALSE(KeepPrefixFromPins(1500, 1500 * 131072, 1e-3, 0));
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

TEST(ExpertTouchedProbabilityTest, UniformUntilMeasuredThenTheExpertsShare) {
  // Nothing seen: one expert's part of ExpectedExpertsTouched.
  for (int64_t rows : {1, 4, 16, 64}) {
    EXPECT_NEAR(ExpertTouchedProbability(64, 8, 0, 0, rows),
                ExpectedExpertsTouched(64, 8, rows) / 64, 1e-12)
        << rows;
  }
  EXPECT_NEAR(ExpertTouchedProbability(64, 8, 0, 0, 1), 0.125, 1e-12);
  EXPECT_NEAR(ExpertTouchedProbability(64, 8, 0, 0, 16), 1 - std::pow(0.875, 16), 1e-12);
  // An expert that took 600 of 1000 tokens: share (600 + 8) / 1064.
  EXPECT_NEAR(ExpertTouchedProbability(64, 8, 600, 1000, 1), 608.0 / 1064, 1e-12);
  // One never routed to in 10000 tokens: share 8 / 10064.
  EXPECT_NEAR(ExpertTouchedProbability(64, 8, 0, 10000, 16), 1 - std::pow(1 - 8.0 / 10064, 16),
              1e-12);
  // Two tokens routed the same way are not yet a habit: 10 / 66.
  EXPECT_NEAR(ExpertTouchedProbability(64, 8, 2, 2, 1), 10.0 / 66, 1e-12);
  EXPECT_EQ(ExpertTouchedProbability(64, 8, 5, 10, 0), 0);
  EXPECT_EQ(ExpertTouchedProbability(0, 8, 5, 10, 4), 0);
}

TEST(HeadSliceRowsTest, SlicesNoLargerThanTheLargestLayer) {
  EXPECT_EQ(HeadSliceRows(100, 1000, 1000), 100);  // small and fits: one slice
  EXPECT_EQ(HeadSliceRows(100, 1000, 0), 100);     // no layer: one slice
  EXPECT_EQ(HeadSliceRows(10, 1000, 300), 3);      // 4 slices of <= 3 rows
  EXPECT_EQ(HeadSliceRows(10, 1000, 120), 1);      // 2 rows would be 200 bytes
  EXPECT_EQ(HeadSliceRows(0, 1000, 300), 1);
}

TEST(HeadSliceRowsTest, ALargeHeadIsCutSoThatItsLastSliceIsSmall) {
  constexpr uint64_t kMiB = 1 << 20;
  // A 131 MB head (32000 rows) against 256 MiB expert slices: 4 of 33 MB.
  EXPECT_EQ(HeadSliceRows(32000, 131072000, 256 * kMiB), 8000);
  // bench-1.7b's head against its 90 MB layers: 4 slices, not 2.
  EXPECT_EQ(HeadSliceRows(32000, 131072000, 90185728), 8000);
  // A larger head keeps the bound of the largest layer: 5 slices.
  EXPECT_EQ(HeadSliceRows(152064, 1245708288, 256 * kMiB), 30413);
  // Slices of at least 16 MiB: a 40 MiB head in 2, a 15 MiB one whole.
  EXPECT_EQ(HeadSliceRows(1000, 40 * kMiB, 256 * kMiB), 500);
  EXPECT_EQ(HeadSliceRows(1000, 15 * kMiB, 256 * kMiB), 1000);
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

TEST(LookAheadGroupsTest, DensePartsBetweenTwoSparseLayersHaveBuffersOfTheirOwn) {
  // dense 0 | slices | dense 1 | slices | dense-only layer | dense 3 | slices | head
  const std::vector<bool> deferred = {false, true, true, false, true, false, false, true, false};
  EXPECT_EQ(LookAheadGroups(deferred),
            (std::vector<bool>{false, false, false, true, false, false, false, false, false}));
  const std::vector<uint64_t> bytes = {6, 40, 40, 7, 40, 50, 8, 40, 9};
  // 2 x the largest group (50) and 2 x the one look-ahead group (7).
  EXPECT_EQ(StreamBufferBytes(bytes, {}, true, deferred), 114u);
  EXPECT_EQ(StreamBufferBytes(bytes, {}, false, deferred), 50u);  // no prefetch, no look-ahead
  std::vector<bool> pinned(9, false);
  pinned[3] = true;  // pinned: read once, no look-ahead buffer
  EXPECT_EQ(StreamBufferBytes(bytes, pinned, true, deferred), 100u);
  EXPECT_EQ(StreamBufferBytes(bytes, {}, true), 100u);  // a dense model's groups
  // A dense part wraps around to the pass's end: the first group follows the last.
  EXPECT_EQ(LookAheadGroups({false, true, true}), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(LookAheadGroups({true, false}), (std::vector<bool>{false, false}));
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

TEST(ExpertSlicesTest, RunsOfWholeExpertsInIndexOrder) {
  // Three of 3 bytes fit in 7 two at a time: no expert is ever split.
  std::vector<ExpertSlice> slices = ExpertSlices({3, 3, 3, 3, 3}, 7);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].first, 0);
  EXPECT_EQ(slices[0].end, 2);
  EXPECT_EQ(slices[0].bytes, 6u);
  EXPECT_EQ(slices[1].first, 2);
  EXPECT_EQ(slices[1].end, 4);
  EXPECT_EQ(slices[2].first, 4);
  EXPECT_EQ(slices[2].end, 5);
  EXPECT_EQ(slices[2].bytes, 3u);
  // Exactly the slice size: one slice.
  slices = ExpertSlices({5, 5}, 10);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].bytes, 10u);
  EXPECT_TRUE(ExpertSlices({}, 10).empty());
}

TEST(ExpertSlicesTest, AsFewSlicesAsTheSizeAllowsAndAsEven) {
  // 64 experts of 9.4 MB at 256 MiB: 3 slices, not 28 + 28 + 8 but 22 + 22 + 20.
  const std::vector<uint64_t> experts(64, 9437184);
  const std::vector<ExpertSlice> slices = ExpertSlices(experts, 256ull << 20);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].end - slices[0].first, 22);
  EXPECT_EQ(slices[1].end - slices[1].first, 22);
  EXPECT_EQ(slices[2].end - slices[2].first, 20);
  EXPECT_EQ(slices[2].end, 64);
  // Unequal experts: 4 + 4 | 1 + 6 | 8 with at most 9, not 4 + 4 + 1 | 6 | 8.
  const std::vector<ExpertSlice> uneven = ExpertSlices({4, 4, 1, 6, 8}, 9);
  ASSERT_EQ(uneven.size(), 3u);
  EXPECT_EQ(uneven[0].bytes, 8u);
  EXPECT_EQ(uneven[1].bytes, 7u);
  EXPECT_EQ(uneven[2].bytes, 8u);
}

TEST(ExpertSlicesTest, AnOversizeExpertIsASliceOfItsOwn) {
  const std::vector<uint64_t> experts = {2, 12, 2, 2, 11};
  const std::vector<ExpertSlice> slices = ExpertSlices(experts, 5);
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[0].end - slices[0].first, 1);  // 2, then 12 would overflow it
  EXPECT_EQ(slices[1].bytes, 12u);                // alone
  EXPECT_EQ(slices[1].end - slices[1].first, 1);
  EXPECT_EQ(slices[2].bytes, 4u);  // 2 + 2
  EXPECT_EQ(slices[3].bytes, 11u);
  // Contiguous, covering every expert once; the bytes sum to the experts'.
  uint64_t sum = 0;
  int64_t next = 0;
  for (const ExpertSlice& s : slices) {
    EXPECT_EQ(s.first, next);
    EXPECT_GT(s.end, s.first);
    next = s.end;
    sum += s.bytes;
    uint64_t bytes = 0;
    for (int64_t e = s.first; e < s.end; ++e) bytes += experts[static_cast<size_t>(e)];
    EXPECT_EQ(s.bytes, bytes);
    EXPECT_TRUE(s.bytes <= 5 || s.end - s.first == 1) << s.first;
  }
  EXPECT_EQ(next, 5);
  EXPECT_EQ(sum, 29u);
}

// The issue's figures: 128 experts, top-8 (Qwen3-30B-A3B): a token alone
// touches 6% of a layer's experts, 4 rows 23%, 16 rows 64%, 64 rows 98%.
TEST(ExpectedExpertsTouchedTest, TheIssuesFigures) {
  auto percent = [](int64_t rows) {
    return std::lround(100.0 * ExpectedExpertsTouched(128, 8, rows) / 128.0);
  };
  EXPECT_EQ(percent(1), 6);
  EXPECT_EQ(percent(4), 23);
  EXPECT_EQ(percent(16), 64);
  EXPECT_EQ(percent(64), 98);
  EXPECT_DOUBLE_EQ(ExpectedExpertsTouched(128, 8, 1), 8.0);  // one token: exactly its k
  EXPECT_EQ(ExpectedExpertsTouched(128, 8, 0), 0.0);
  EXPECT_DOUBLE_EQ(ExpectedExpertsTouched(8, 8, 1), 8.0);   // every expert runs
  EXPECT_DOUBLE_EQ(ExpectedExpertsTouched(8, 20, 3), 8.0);  // k past E: all of them
}

TEST(SliceTouchedProbabilityTest, AnySliceExpertRoutedUniformly) {
  // One expert to a slice: ExpectedExpertsTouched / E.
  for (int64_t rows : {1, 4, 16, 64}) {
    EXPECT_NEAR(SliceTouchedProbability(128, 8, 1, rows),
                ExpectedExpertsTouched(128, 8, rows) / 128.0, 1e-12)
        << rows;
  }
  // 8 experts, top 2, a slice of 3: a token misses it with C(5,2)/C(8,2) = 10/28.
  EXPECT_NEAR(SliceTouchedProbability(8, 2, 3, 1), 1.0 - 10.0 / 28.0, 1e-12);
  EXPECT_NEAR(SliceTouchedProbability(8, 2, 3, 2), 1.0 - (10.0 / 28.0) * (10.0 / 28.0), 1e-12);
  // A slice the k cannot all avoid: always read.
  EXPECT_EQ(SliceTouchedProbability(8, 2, 7, 1), 1.0);
  EXPECT_EQ(SliceTouchedProbability(8, 2, 8, 1), 1.0);
  EXPECT_EQ(SliceTouchedProbability(8, 0, 1, 1), 1.0);  // top_k unknown: read
  EXPECT_EQ(SliceTouchedProbability(8, 2, 3, 0), 0.0);  // no rows
  EXPECT_EQ(SliceTouchedProbability(8, 2, 0, 5), 0.0);  // an empty slice
}

// A layer's tensors split as the engine's loader reads it: the dense part
// (everything that is not an expert's) and each expert's bytes by index.
struct FixtureLayer {
  uint64_t bytes = 0;
  uint64_t dense = 0;
  std::map<int, uint64_t> experts;
  uint64_t expert_elements = 0;
  double dense_flops = 0, expert_flops = 0;
};

FixtureLayer SplitFixtureLayer(const checkpoint::Checkpoint& ckpt,
                               const checkpoint::TensorGroup& layer) {
  FixtureLayer f;
  for (int t : layer.tensors) {
    const checkpoint::TensorInfo& info = ckpt.tensors[static_cast<size_t>(t)];
    const double flops =
        info.shape.size() == 2 ? 2.0 * static_cast<double>(info.shape[0] * info.shape[1]) : 0;
    f.bytes += info.size;
    const int e = checkpoint::ExpertIndex(info.name);
    if (e < 0) {
      f.dense += info.size;
      f.dense_flops += flops;
    } else {
      f.experts[e] += info.size;
      f.expert_elements += static_cast<uint64_t>(info.numel());
      f.expert_flops += flops;
    }
  }
  return f;
}

StatusOr<checkpoint::Checkpoint> ReadFixture(const std::string& name) {
  return checkpoint::ReadCheckpoint(testutil::DataPath("models/" + name));
}

// qwen3-moe: layers 1 and 3 sparse (8 experts), 0 and 2 dense. At a slice of
// two experts' bytes a sparse layer is its dense part then four slices; a
// dense layer one group; each layer's groups sum to its bytes.
TEST(StreamedGroupBytesTest, ASparseLayerIsItsDensePartThenItsExpertSlices) {
  StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture("qwen3-moe");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const FixtureLayer sparse = SplitFixtureLayer(*ckpt, ckpt->layers[1]);
  ASSERT_EQ(sparse.experts.size(), 8u);
  const uint64_t expert = sparse.experts.at(0);
  for (const auto& [e, bytes] : sparse.experts) EXPECT_EQ(bytes, expert) << e;

  const std::vector<uint64_t> groups = StreamedGroupBytes(*ckpt, 2 * expert);
  size_t g = 0;
  uint64_t largest = 0;
  for (const checkpoint::TensorGroup& layer : ckpt->layers) {
    SCOPED_TRACE(layer.layer);
    const FixtureLayer split = SplitFixtureLayer(*ckpt, layer);
    const bool is_sparse = layer.layer % 2 == 1;
    EXPECT_EQ(split.experts.empty(), !is_sparse);
    ASSERT_LT(g, groups.size());
    EXPECT_EQ(groups[g], split.dense);
    uint64_t sum = groups[g];
    largest = std::max(largest, groups[g]);
    ++g;
    if (is_sparse) {
      for (int slice = 0; slice < 4; ++slice, ++g) {
        ASSERT_LT(g, groups.size());
        EXPECT_EQ(groups[g], 2 * expert) << slice;
        sum += groups[g];
        largest = std::max(largest, groups[g]);
      }
    }
    EXPECT_EQ(sum, split.bytes);
    EXPECT_EQ(sum, layer.bytes);
  }
  // Then the head: the final norm with the LM head's row slices, sized
  // against the largest group before it.
  const checkpoint::TensorInfo& head = ckpt->tensors[static_cast<size_t>(ckpt->lm_head)];
  const int64_t per_slice = HeadSliceRows(head.shape[0], head.size, largest);
  const size_t head_slices = static_cast<size_t>((head.shape[0] + per_slice - 1) / per_slice);
  EXPECT_EQ(groups.size(), g + head_slices);
  uint64_t head_sum = 0;
  for (; g < groups.size(); ++g) head_sum += groups[g];
  EXPECT_EQ(head_sum, ckpt->head.bytes);

  // At the default slice (256 MiB) all 8 experts share one slice.
  const std::vector<uint64_t> coarse = StreamedGroupBytes(*ckpt);
  EXPECT_EQ(coarse[0], ckpt->layers[0].bytes);  // dense layer 0
  EXPECT_EQ(coarse[1], sparse.dense);           // layer 1's dense part
  EXPECT_EQ(coarse[2], 8 * expert);             // and its experts
  EXPECT_EQ(coarse[3], ckpt->layers[2].bytes);
}

// A dense checkpoint's groups are its layers, then the head: unchanged.
TEST(StreamedGroupBytesTest, DenseLayersAreOneGroupEach) {
  for (const char* fixture :
       {"llama-gqa-sharded", "qwen3-qknorm", "llama3-tied-invfreq", "awq-int4"}) {
    StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture(fixture);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    const std::vector<uint64_t> groups = StreamedGroupBytes(*ckpt, 1);  // any slice size
    ASSERT_GT(groups.size(), ckpt->layers.size()) << fixture;
    for (size_t l = 0; l < ckpt->layers.size(); ++l) {
      EXPECT_EQ(groups[l], ckpt->layers[l].bytes) << fixture << " layer " << l;
    }
    EXPECT_EQ(groups, StreamedGroupBytes(*ckpt)) << fixture;
  }
}

// MoeFacts of each MoE fixture, against what the tensors and the config say.
TEST(MoeFactsTest, TheFixturesFacts) {
  for (const char* fixture : {"mixtral", "qwen2-moe", "qwen3-moe"}) {
    SCOPED_TRACE(fixture);
    StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture(fixture);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    StatusOr<checkpoint::ModelConfig> config = checkpoint::ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    ASSERT_TRUE(config->is_moe());

    int64_t sparse = 0;
    uint64_t expert_bytes = 0, largest_expert = 0, widest = 0, params = 0, inactive = 0;
    for (const checkpoint::TensorInfo& t : ckpt->tensors)
      params += static_cast<uint64_t>(t.numel());
    for (const checkpoint::TensorGroup& layer : ckpt->layers) {
      const FixtureLayer split = SplitFixtureLayer(*ckpt, layer);
      EXPECT_EQ(!split.experts.empty(), config->IsSparseLayer(layer.layer)) << layer.layer;
      if (split.experts.empty()) continue;
      ++sparse;
      EXPECT_EQ(static_cast<int64_t>(split.experts.size()), config->moe.num_experts);
      uint64_t layer_experts = 0;
      for (const auto& [e, bytes] : split.experts) {
        layer_experts += bytes;
        largest_expert = std::max(largest_expert, bytes);
      }
      expert_bytes += layer_experts;
      widest = std::max(widest, layer_experts);  // tiny experts: one slice a layer
      const uint64_t e = split.experts.size();
      inactive += split.expert_elements / e * (e - static_cast<uint64_t>(config->moe.top_k));
    }

    const MoeFacts f = MoeFactsOf(*ckpt);
    EXPECT_TRUE(f.is_moe());
    EXPECT_EQ(f.sparse_layers, sparse);
    EXPECT_EQ(f.experts, config->moe.num_experts);
    EXPECT_EQ(f.top_k, config->moe.top_k);
    EXPECT_EQ(f.total_bytes, ckpt->total_bytes);
    EXPECT_EQ(f.embedding_bytes, ckpt->embedding.bytes);
    EXPECT_EQ(f.expert_bytes, expert_bytes);
    EXPECT_EQ(f.dense_bytes, ckpt->total_bytes - expert_bytes);
    EXPECT_EQ(f.largest_expert_bytes, largest_expert);
    EXPECT_EQ(f.widest_slice_bytes, widest);
    EXPECT_EQ(f.total_parameters, params);
    EXPECT_EQ(f.active_parameters, params - inactive);
    EXPECT_LT(f.active_parameters, f.total_parameters);
    EXPECT_EQ(f.group_bytes, StreamedGroupBytes(*ckpt));
    ASSERT_EQ(f.group_experts.size(), f.group_bytes.size());

    // One expert to a slice: the widest slice is one expert.
    const MoeFacts fine = MoeFactsOf(*ckpt, largest_expert);
    EXPECT_EQ(fine.widest_slice_bytes, largest_expert);
    EXPECT_EQ(fine.group_bytes, StreamedGroupBytes(*ckpt, largest_expert));
    int64_t slices = 0;
    for (int64_t experts : fine.group_experts) {
      EXPECT_LE(experts, 1);
      slices += experts;
    }
    EXPECT_EQ(slices, sparse * config->moe.num_experts);
  }
}

TEST(MoeFactsTest, ADenseCheckpointHasNoSparseLayer) {
  StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture("qwen3-qknorm");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const MoeFacts f = MoeFactsOf(*ckpt);
  EXPECT_FALSE(f.is_moe());
  EXPECT_EQ(f.sparse_layers, 0);
  EXPECT_EQ(f.expert_bytes, 0u);
  EXPECT_EQ(f.dense_bytes, ckpt->total_bytes);
  EXPECT_EQ(f.active_parameters, f.total_parameters);
  EXPECT_EQ(f.group_bytes, StreamedGroupBytes(*ckpt));
  // Expected bytes are the streamed bytes at any rows, pinned or not.
  for (int64_t rows : {1, 16, 256}) {
    EXPECT_EQ(ExpectedStreamedBytesPerPass(f, rows), StreamedBytesPerPass(*ckpt)) << rows;
    EXPECT_EQ(ExpectedStreamedBytesPerPass(*ckpt, rows), StreamedBytesPerPass(*ckpt)) << rows;
  }
  const std::vector<bool> pinned = ChoosePinnedGroups(f.group_bytes, ckpt->total_bytes / 2);
  EXPECT_EQ(ExpectedStreamedBytesPerPass(f, 7, pinned),
            StreamedBytesPerPass(*ckpt, PinnedBytes(f.group_bytes, pinned)));
}

// One expert to a slice: a pass of B rows reads the dense bytes and, per
// sparse layer, ExpectedExpertsTouched(E, k, B) experts' bytes.
TEST(ExpectedStreamedBytesPerPassTest, DenseBytesPlusTheExpertsTouched) {
  for (const char* fixture : {"mixtral", "qwen2-moe", "qwen3-moe"}) {
    SCOPED_TRACE(fixture);
    StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture(fixture);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    const MoeFacts coarse = MoeFactsOf(*ckpt);
    const MoeFacts f = MoeFactsOf(*ckpt, coarse.largest_expert_bytes);
    const double expert = static_cast<double>(f.expert_bytes) /
                          static_cast<double>(f.sparse_layers * f.experts);  // all of one size
    uint64_t previous = 0;
    for (int64_t rows : {1, 2, 4, 16, 64, 256}) {
      const double expected = static_cast<double>(f.dense_bytes) +
                              static_cast<double>(f.sparse_layers) *
                                  ExpectedExpertsTouched(f.experts, f.top_k, rows) * expert;
      const uint64_t bytes = ExpectedStreamedBytesPerPass(f, rows);
      EXPECT_NEAR(static_cast<double>(bytes), expected, 1.0) << rows;
      EXPECT_GE(bytes, previous) << rows;  // more rows, more experts
      EXPECT_LE(bytes, f.total_bytes) << rows;
      previous = bytes;
    }
    // One token runs exactly top_k experts a layer.
    EXPECT_EQ(ExpectedStreamedBytesPerPass(f, 1),
              f.dense_bytes +
                  static_cast<uint64_t>(f.sparse_layers * f.top_k) * static_cast<uint64_t>(expert));
    EXPECT_EQ(ExpectedStreamedBytesPerPass(f, 0), ExpectedStreamedBytesPerPass(f, 1));
    // All 8 in one slice (the default, for these tiny experts): the loader
    // still reads only the routed experts of a slice, so the same bytes.
    for (int64_t rows : {1, 16, 256}) {
      EXPECT_NEAR(static_cast<double>(ExpectedStreamedBytesPerPass(coarse, rows)),
                  static_cast<double>(ExpectedStreamedBytesPerPass(f, rows)), 2.0)
          << rows;
      EXPECT_EQ(ExpectedStreamedBytesPerPass(*ckpt, rows),
                ExpectedStreamedBytesPerPass(coarse, rows))
          << rows;
    }
  }
}

// Two experts to a slice: of a slice only its routed experts are read; a
// pinned group is never read.
TEST(ExpectedStreamedBytesPerPassTest, OnlyRoutedExpertsOfASliceAreReadAndPinnedOnesNever) {
  StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture("qwen3-moe");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const uint64_t expert = MoeFactsOf(*ckpt).largest_expert_bytes;
  const MoeFacts f = MoeFactsOf(*ckpt, 2 * expert);
  ASSERT_EQ(f.sparse_layers, 2);
  ASSERT_EQ(f.widest_slice_bytes, 2 * expert);
  for (int64_t rows : {1, 3, 16}) {
    // 8 experts per sparse layer, each read unless all rows avoid it.
    const double unread =
        2 * 8 * static_cast<double>(expert) * (1.0 - SliceTouchedProbability(8, 2, 1, rows));
    EXPECT_NEAR(static_cast<double>(ExpectedStreamedBytesPerPass(f, rows)),
                static_cast<double>(ckpt->total_bytes) - unread, 1.0)
        << rows;
  }
  // Pin the first slice of layer 1 (group 2: layer 0, layer 1's dense part,
  // then its slices) and layer 0: their bytes are never read.
  std::vector<bool> pinned(f.group_bytes.size(), false);
  ASSERT_EQ(f.group_experts[2], 2);
  pinned[0] = pinned[2] = true;
  const double p = SliceTouchedProbability(8, 2, 1, 1);
  const double expected = static_cast<double>(ckpt->total_bytes - f.group_bytes[0]) -
                          static_cast<double>(2 * expert) -              // the pinned slice
                          14 * static_cast<double>(expert) * (1.0 - p);  // the others' unrouted
  EXPECT_NEAR(static_cast<double>(ExpectedStreamedBytesPerPass(f, 1, pinned)), expected, 1.0);
}

// Active FLOPs: a sparse layer counts its dense matrices (attention, the
// router, a shared expert) and top_k / E of its experts'.
TEST(PassFlopsTest, AMixtureOfExpertsCountsOnlyTheActiveExperts) {
  for (const char* fixture : {"mixtral", "qwen2-moe", "qwen3-moe"}) {
    SCOPED_TRACE(fixture);
    StatusOr<checkpoint::Checkpoint> ckpt = ReadFixture(fixture);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    StatusOr<checkpoint::ModelConfig> config = checkpoint::ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    double expected = 0, all = 0;
    for (const checkpoint::TensorGroup& layer : ckpt->layers) {
      const FixtureLayer split = SplitFixtureLayer(*ckpt, layer);
      expected += split.dense_flops;
      all += split.dense_flops + split.expert_flops;
      if (!split.experts.empty()) {
        expected += split.expert_flops * static_cast<double>(config->moe.top_k) /
                    static_cast<double>(split.experts.size());
      }
    }
    EXPECT_DOUBLE_EQ(LayerFlopsPerToken(*ckpt), expected);
    EXPECT_LT(LayerFlopsPerToken(*ckpt), all);
  }
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
