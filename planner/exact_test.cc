// Exact mode on hand-built shapes: the KV and activation formulas, and how
// they become a sizing and a plan.
#include "planner/exact.h"

#include <gtest/gtest.h>

namespace nightshift::planner {
namespace {

// Llama-3-70B's published shapes, bf16.
CheckpointShape Llama3_70b() {
  CheckpointShape s;
  s.layers = 80;
  s.hidden = 8192;
  s.heads = 64;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.intermediate = 28672;
  s.vocab = 128256;
  s.stored_dtype_bytes = 2;
  s.parameters = 70'553'706'496ull;
  s.tensor_bytes = 2 * s.parameters;
  s.file_bytes = s.tensor_bytes + 1'000'000;     // plus headers
  s.largest_group_bytes = 2ull * 128256 * 8192;  // embedding = LM head (untied)
  return s;
}

TEST(ExactTest, ComputeDtypeIsFp32OnCpuAndStoredOnGpu) {
  EXPECT_EQ(ComputeDtypeBytes(Llama3_70b(), Device::kCpu), 4);
  EXPECT_EQ(ComputeDtypeBytes(Llama3_70b(), Device::kGpu), 2);
}

TEST(ExactTest, ContextTokensRoundUp) {
  EXPECT_EQ(ContextTokens(4), 4096);
  EXPECT_EQ(ContextTokens(0.5), 512);
  EXPECT_EQ(ContextTokens(0.001), 2);  // 1.024 tokens
}

TEST(ExactTest, KvBytesPerToken) {
  // 2 x 80 layers x 8 KV heads x 128 x 2 bytes
  EXPECT_EQ(KvBytesPerToken(Llama3_70b(), 2), 327'680u);
  EXPECT_EQ(KvBytesPerToken(Llama3_70b(), 4), 655'360u);
  CheckpointShape mha = Llama3_70b();
  mha.kv_heads = mha.heads;  // no grouped-query attention: 8x the cache
  EXPECT_EQ(KvBytesPerToken(mha, 2), 8 * 327'680u);
}

TEST(ExactTest, ActivationBytesFollowTheDocumentedFormula) {
  const CheckpointShape s = Llama3_70b();
  // W = 2x8192 + 2x8192 + 2x1024 + 2x28672 = 92160
  // decode pass, batch 1: 4 x (92160 + 64 x 1 x 4096 + 128256) + 256 MiB
  EXPECT_EQ(ActivationBytes(s, 4, 1, 0, 4096), 4ull * (92160 + 262144 + 128256) + (256ull << 20));
  // batch 8 with 1000-token prompts: T = 8000, scores 64 x 1000 x 4096, logits 8 x vocab
  EXPECT_EQ(ActivationBytes(s, 4, 8, 1000, 4096),
            4ull * (8000ull * 92160 + 64ull * 1000 * 4096 + 8ull * 128256) + (256ull << 20));
  // On a GPU in bf16 every tensor term halves; the runtime allowance does not.
  EXPECT_EQ(ActivationBytes(s, 2, 8, 1000, 4096) - (256ull << 20),
            (ActivationBytes(s, 4, 8, 1000, 4096) - (256ull << 20)) / 2);
}

TEST(ExactTest, SizingOnGpu) {
  PlanOptions options;  // 4k context, batch 1, prefetch, no prompt length
  Sizing s = ExactSizing(Llama3_70b(), options, Device::kGpu);
  EXPECT_EQ(s.checkpoint_gb, 141.107413);  // 141107412992 bytes
  EXPECT_EQ(s.disk.peak_gb, 141.108413);
  EXPECT_EQ(s.disk.steady_gb, s.disk.peak_gb);
  EXPECT_EQ(s.kv_cache_gb, 1.342177);  // 327680 x 4096 bytes
  EXPECT_EQ(s.layers, 80);
  EXPECT_FALSE(s.layers_estimated);
  // activations: 2 x (92160 + 262144 + 128256) + 268435456 = 269400576 bytes
  EXPECT_EQ(s.activation_gb, 0.269401);
  // 2 x 2101346304 + 269400576 + 1342177280
  EXPECT_EQ(s.resident_gb, 5.814270);
}

TEST(ExactTest, SizingOnCpuDoublesKvAndScalesWithBatch) {
  PlanOptions options;
  options.batch = 4;
  options.prefetching = false;
  Sizing s = ExactSizing(Llama3_70b(), options, Device::kCpu);
  EXPECT_EQ(s.kv_cache_gb, 2.684355);  // 655360 x 4096, per sequence
  // activations: 4 x (4 x 92160 + 262144 + 4 x 128256) + 268435456 = 273010688
  EXPECT_EQ(s.activation_gb, 0.273011);
  // 1 x 2101346304 + 273010688 + 4 x 2684354560
  EXPECT_EQ(s.resident_gb, 13.111775);
}

TEST(ExactTest, PlanFromExactSizing) {
  PlanOptions options;
  options.budget_gb = 11.0;
  options.disk = {4.0, 900.0};
  PlanResult p = PlanSized(ExactSizing(Llama3_70b(), options, Device::kGpu), options);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(p.disk_fits);
  EXPECT_TRUE(p.usable);
  EXPECT_EQ(p.seconds_per_pass, 41.502);  // 141.107413 / 4 / 0.85
  EXPECT_EQ(p.est_tokens_per_s, 0.024);
}

TEST(ExactTest, TinyCheckpointStillHasFiniteRates) {
  CheckpointShape tiny = Llama3_70b();
  tiny.tensor_bytes = tiny.file_bytes = 300'000;
  PlanOptions options;
  options.disk = {1.0, 10.0};
  PlanResult p = PlanSized(ExactSizing(tiny, options, Device::kCpu), options);
  EXPECT_EQ(p.checkpoint_gb, 0.0003);
  EXPECT_EQ(p.seconds_per_pass, 0.001);  // the floor
  EXPECT_EQ(p.est_tokens_per_s, 1000.0);
}

TEST(ExactTest, HeuristicSpecMirrorsTheCheckpoint) {
  ModelSpec spec = HeuristicSpec(Llama3_70b());
  EXPECT_DOUBLE_EQ(spec.size_b, 70.553706496);
  EXPECT_EQ(spec.layers, 80);
  EXPECT_DOUBLE_EQ(spec.bytes_per_param, 2.0);
  EXPECT_EQ(HeuristicSpec(CheckpointShape{}).size_b, 0.0);
}

TEST(ExactTest, PinSplitMaximisesJobsPerSecondForTheQueue) {
  // 8 groups of 100 bytes, a 1000-byte checkpoint, 1 byte/s, KV 50 per job.
  const std::vector<uint64_t> groups(8, 100);
  PinSplitPlan plan = PlanPinSplit(groups, 1000, 200, 1000, 200, 50, 3, 1.0);
  ASSERT_FALSE(plan.alternatives.empty());
  EXPECT_EQ(plan.working_set_bytes, 200u);
  // 800 left: 1, 2, 3 (the queue), 4, 8 and 16 (all) sequences.
  std::vector<int64_t> counts;
  for (const PinSplit& a : plan.alternatives) counts.push_back(a.kv_sequences);
  EXPECT_EQ(counts, (std::vector<int64_t>{1, 2, 3, 4, 8, 16}));
  const PinSplit& chosen = plan.alternatives[plan.chosen];
  EXPECT_EQ(chosen.kv_sequences, 3);  // 150 of KV, 600 pinned: 400 streamed, 3 jobs / 400 s
  EXPECT_EQ(chosen.pinned_bytes, 600u);
  EXPECT_EQ(chosen.streamed_bytes, 400u);
  EXPECT_DOUBLE_EQ(chosen.seconds_per_pass, 400.0);
  EXPECT_EQ(chosen.jobs_per_pass, 3);
  const PinSplit& all_kv = plan.alternatives.back();
  EXPECT_EQ(all_kv.pinned_bytes, 0u);
  EXPECT_EQ(all_kv.jobs_per_pass, 3);  // more KV than the queue fills
  EXPECT_LT(all_kv.jobs_per_second, chosen.jobs_per_second);
  // Nothing beside the working set: no split.
  EXPECT_TRUE(PlanPinSplit(groups, 1000, 200, 220, 200, 50, 3, 1.0).alternatives.empty());
}

// A mixture of experts by hand: 100 GB, of it a 4 GB embedding, one sparse
// layer of a 16 GB dense part and 8 experts of 10 GB (a slice each), top 2.
CheckpointShape Moe() {
  CheckpointShape s = Llama3_70b();
  s.tensor_bytes = 100'000'000'000ull;
  s.file_bytes = s.tensor_bytes;
  MoeFacts& f = s.moe;
  f.sparse_layers = 1;
  f.experts = 8;
  f.top_k = 2;
  f.total_bytes = s.tensor_bytes;
  f.embedding_bytes = 4'000'000'000ull;
  f.expert_bytes = 80'000'000'000ull;
  f.dense_bytes = 20'000'000'000ull;
  f.group_bytes = {16'000'000'000ull};
  f.group_experts = {0};
  for (int e = 0; e < 8; ++e) {
    f.group_bytes.push_back(10'000'000'000ull);
    f.group_experts.push_back(1);
  }
  return s;
}

TEST(ExactTest, AMixtureOfExpertsReadsTheExpertsItsBatchTouches) {
  PlanOptions options;
  options.budget_gb = 100.0;
  options.disk = {4.0, 900.0};
  // One row runs 2 of 8 experts: 20 GB dense + 2 x 10 GB.
  Sizing one = ExactSizing(Moe(), options, Device::kGpu);
  EXPECT_EQ(one.checkpoint_gb, 100.0);  // the disk and the checkpoint stay whole
  EXPECT_EQ(one.disk.peak_gb, 100.0);
  ASSERT_TRUE(one.pass_read_gb.has_value());
  EXPECT_EQ(*one.pass_read_gb, 40.0);
  PlanResult p = PlanSized(one, options);
  EXPECT_EQ(p.checkpoint_gb, 100.0);
  EXPECT_EQ(p.pass_read_gb, 40.0);
  EXPECT_EQ(p.seconds_per_pass, 11.765);  // 40 / 4 / 0.85
  EXPECT_EQ(p.est_tokens_per_s, 0.085);
  // Four rows (the batch): 20 + 80 x (1 - 0.75^4) GB.
  options.batch = 4;
  Sizing four = ExactSizing(Moe(), options, Device::kGpu);
  EXPECT_EQ(*four.pass_read_gb, 74.6875);
  EXPECT_EQ(PlanSized(four, options).seconds_per_pass, 21.967);  // 74.6875 / 4 / 0.85
  // A dense checkpoint reads all of itself, as before.
  EXPECT_FALSE(ExactSizing(Llama3_70b(), options, Device::kGpu).pass_read_gb.has_value());
  EXPECT_FALSE(PlanSized(ExactSizing(Llama3_70b(), options, Device::kGpu), options)
                   .pass_read_gb.has_value());
}

TEST(ExactTest, AMixtureOfExpertsSplitPricesEachPassAtItsJobs) {
  const MoeFacts f = Moe().moe;
  // 10 GB of KV per job, 100 GB after the working set.
  PinSplitPlan plan =
      PlanPinSplit(f, 110'000'000'000ull, 10'000'000'000ull, 10'000'000'000ull, 4, 1e9);
  ASSERT_FALSE(plan.alternatives.empty());
  for (const PinSplit& a : plan.alternatives) {
    SCOPED_TRACE(a.kv_sequences);
    const std::vector<bool> pinned =
        ChoosePinnedGroups(f.group_bytes, 100'000'000'000ull - a.kv_budget_bytes);
    EXPECT_EQ(a.pinned_bytes, PinnedBytes(f.group_bytes, pinned));
    EXPECT_EQ(a.streamed_bytes, ExpectedStreamedBytesPerPass(f, a.jobs_per_pass, pinned));
    EXPECT_LE(a.streamed_bytes,
              StreamedBytesPerPass(f.total_bytes, a.pinned_bytes, f.embedding_bytes));
    EXPECT_DOUBLE_EQ(a.seconds_per_pass, static_cast<double>(a.streamed_bytes) / 1e9);
  }
  // Dense facts give the dense split.
  const std::vector<uint64_t> groups(8, 100);
  MoeFacts dense;
  dense.total_bytes = 1000;
  dense.embedding_bytes = 200;
  dense.group_bytes = groups;
  dense.group_experts.assign(8, 0);
  const PinSplitPlan a = PlanPinSplit(groups, 1000, 200, 1000, 200, 50, 3, 1.0);
  const PinSplitPlan b = PlanPinSplit(dense, 1000, 200, 50, 3, 1.0);
  ASSERT_EQ(a.alternatives.size(), b.alternatives.size());
  EXPECT_EQ(a.chosen, b.chosen);
  for (size_t i = 0; i < a.alternatives.size(); ++i) {
    EXPECT_EQ(a.alternatives[i].streamed_bytes, b.alternatives[i].streamed_bytes) << i;
  }
}

}  // namespace
}  // namespace nightshift::planner
