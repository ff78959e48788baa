// The engine's compute choice (EngineOptions::compute_dtype): auto measures
// 16-bit checkpoints once and caches the figures; without batch invariance
// it never chooses a kernel its measurement found slower than float32, with
// it (the default) it runs one invariant kernel at every row count; F32
// checkpoints stay float32; every pass reports what its projections ran and
// their FLOPs.
#include <gtest/gtest.h>

#include <filesystem>

#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/bf16_matmul.h"
#include "worker/engine/compute_choice.h"
#include "worker/engine/engine.h"
#include "worker/engine/small_matmul.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using checkpoint::testing::TempDir;
using testing::Drain;
using testing::GreedyRequest;
using testing::OpenEngine;

EngineOptions Options(ComputeDType dtype, const std::string& state_dir = "") {
  EngineOptions options;
  options.threads = 1;
  options.compute_dtype = dtype;
  options.compute_state_dir = state_dir;
  return options;
}

TEST(ComputeEngineTest, AutoMeasuresA16BitCheckpointAndCachesTheChoice) {
  TempDir state;
  EngineOptions per_bucket = Options(ComputeDType::kAuto, state.path());
  per_bucket.batch_invariant = false;
  std::unique_ptr<Engine> first = OpenEngine(FixtureDir("llama-bf16"), per_bucket);
  ASSERT_NE(first, nullptr);
  const ComputeChoice& choice = first->compute();
  ASSERT_TRUE(choice.measurement.has_value());
  ASSERT_FALSE(choice.cache_path.empty());
  EXPECT_EQ(std::filesystem::path(choice.cache_path).parent_path(), state.path());
  std::optional<ComputeMeasurement> file =
      ReadComputeCache(choice.cache_path, choice.measurement->key);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->seconds, choice.measurement->seconds);
  // Never a kernel its own measurement found slower than float32's best.
  for (size_t b = 0; b < kRowBucketCount; ++b) {
    const double chosen = choice.measurement->Seconds(choice.plan[b], b);
    EXPECT_GT(chosen, 0) << b;
    for (ProjectionKernel k : {ProjectionKernel::kF32Small, ProjectionKernel::kF32Gemm}) {
      const double f32 = choice.measurement->Seconds(k, b);
      if (f32 > 0) {
        EXPECT_LE(chosen, f32) << b;
      }
    }
  }
  // The next engine (here, and in another process through the file) takes the same plan.
  std::unique_ptr<Engine> second = OpenEngine(FixtureDir("llama-bf16"), per_bucket);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(second->compute().cached);
  EXPECT_EQ(second->compute().plan, choice.plan);
  EXPECT_EQ(second->compute().measurement->seconds, choice.measurement->seconds);
  // By default the same measurement (read back) prices the passes, and the
  // plan is one invariant kernel, whatever it says.
  std::unique_ptr<Engine> invariant =
      OpenEngine(FixtureDir("llama-bf16"), Options(ComputeDType::kAuto, state.path()));
  ASSERT_NE(invariant, nullptr);
  EXPECT_TRUE(invariant->compute().cached);
  EXPECT_TRUE(invariant->compute().batch_invariant);
  EXPECT_TRUE(IsInvariantPlan(invariant->compute().plan)) << invariant->compute().Describe();
  EXPECT_EQ(invariant->compute().plan[0],
            Bf16MatmulSupported() ? ProjectionKernel::kBf16Avx512 : ProjectionKernel::kF32Tile);
}

TEST(ComputeEngineTest, F32CheckpointsStayFloat32AndAreNotMeasured) {
  TempDir state;
  for (ComputeDType dtype : {ComputeDType::kAuto, ComputeDType::kBFloat16}) {
    std::unique_ptr<Engine> engine =
        OpenEngine(FixtureDir("llama-gqa-sharded"), Options(dtype, state.path()));
    ASSERT_NE(engine, nullptr);
    EXPECT_FALSE(engine->compute().measurement.has_value());
    EXPECT_STREQ(engine->compute().PlanDType(), "f32");
    ASSERT_TRUE(engine->Add(GreedyRequest({1, 2, 3}, 2)).ok());
    for (const PassStats& p : [&] {
           std::vector<PassStats> passes;
           Drain(*engine, &passes);
           return passes;
         }()) {
      EXPECT_EQ(p.compute_dtype, "f32");
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(state.path()));  // nothing measured, nothing cached
}

TEST(ComputeEngineTest, EveryPassSaysWhatItsProjectionsRanAndTheirFlops) {
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir("llama-bf16"));
  ASSERT_TRUE(ckpt.ok());
  struct Case {
    ComputeDType dtype;
    bool accelerator;
    bool batch_invariant;
    std::string dtype_name, kernels;
  };
  const std::string f32_small = SmallMatmulFast() ? "f32-small" : "f32-gemm";
  const std::string invariant_bf16 = Bf16MatmulSupported() ? "bf16-avx512" : "f32-tile";
  for (const Case& c : {Case{ComputeDType::kBFloat16, false, false, "bf16",
                             ProjectionKernelName(DefaultBf16Kernel())},
                        Case{ComputeDType::kFloat32, false, false, "f32", f32_small},
                        Case{ComputeDType::kBFloat16, false, true,
                             Bf16MatmulSupported() ? "bf16" : "f32", invariant_bf16},
                        Case{ComputeDType::kFloat32, false, true, "f32", "f32-tile"},
                        Case{ComputeDType::kBFloat16, true, true, "accelerator", "accelerator"}}) {
    EngineOptions options = Options(c.dtype);
    options.accelerator_path_on_cpu = c.accelerator;
    options.batch_invariant = c.batch_invariant;
    std::unique_ptr<Engine> engine = OpenEngine(FixtureDir("llama-bf16"), options);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->Add(GreedyRequest({1, 2, 3, 4, 5}, 3)).ok());
    ASSERT_TRUE(engine->Add(GreedyRequest({7, 8}, 3)).ok());
    std::vector<PassStats> passes;
    Drain(*engine, &passes);
    ASSERT_EQ(passes.size(), 3u);
    for (const PassStats& p : passes) {
      EXPECT_EQ(p.compute_dtype, c.dtype_name);
      EXPECT_EQ(p.projection_kernels, c.kernels);
      EXPECT_DOUBLE_EQ(p.projection_flops, planner::PassFlops(*ckpt, p.tokens, p.logit_rows));
    }
    EXPECT_EQ(passes[0].tokens, 7);
    EXPECT_GT(passes[0].projection_flops, passes[1].projection_flops);
  }
}

TEST(ComputeEngineTest, MeasureComputeAlwaysMeasuresAndPricesThePass) {
  TempDir state;
  EngineOptions options = Options(ComputeDType::kFloat32, state.path());
  StatusOr<ComputeChoice> choice = MeasureCompute(FixtureDir("llama-gqa-sharded"), options);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  ASSERT_TRUE(choice->measurement.has_value());
  EXPECT_STREQ(choice->PlanDType(), "f32");
  EXPECT_GT(choice->FlopsPerSecond(1), 0);
  EXPECT_GT(choice->FlopsPerSecond(64), 0);
  EXPECT_TRUE(std::filesystem::exists(choice->cache_path));
  EXPECT_FALSE(MeasureCompute(FixtureDir("no-such-fixture"), options).ok());
}

}  // namespace
}  // namespace nightshift::engine
