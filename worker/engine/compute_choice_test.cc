#include "worker/engine/compute_choice.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/bf16_matmul.h"
#include "worker/engine/isa.h"

namespace nightshift::engine {
namespace {

using K = ProjectionKernel;

using Row = std::array<double, kRowBucketCount>;
constexpr Row kNotTimed = {-1, -1, -1, -1, -1, -1, -1, -1, -1};

ComputeMeasurement Measured(const Row& small, const Row& gemm, const Row& bf16,
                            const Row& avx512 = kNotTimed, const Row& tile = kNotTimed) {
  ComputeMeasurement m;
  m.key = "test";
  m.flops_per_row = 1e9;
  m.seconds[static_cast<size_t>(K::kF32Small)] = small;
  m.seconds[static_cast<size_t>(K::kF32Gemm)] = gemm;
  m.seconds[static_cast<size_t>(K::kBf16Gemm)] = bf16;
  m.seconds[static_cast<size_t>(K::kBf16Avx512)] = avx512;
  m.seconds[static_cast<size_t>(K::kF32Tile)] = tile;
  return m;
}

TEST(ComputeChoiceTest, ParsesTheThreeDtypes) {
  EXPECT_EQ(ParseComputeDType("auto").value(), ComputeDType::kAuto);
  EXPECT_EQ(ParseComputeDType("f32").value(), ComputeDType::kFloat32);
  EXPECT_EQ(ParseComputeDType("float32").value(), ComputeDType::kFloat32);
  EXPECT_EQ(ParseComputeDType("bf16").value(), ComputeDType::kBFloat16);
  EXPECT_EQ(ParseComputeDType("bfloat16").value(), ComputeDType::kBFloat16);
  StatusOr<ComputeDType> bad = ParseComputeDType("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "compute dtype 'fp8': expected auto, f32 or bf16");
  for (ComputeDType d : {ComputeDType::kAuto, ComputeDType::kFloat32, ComputeDType::kBFloat16}) {
    EXPECT_EQ(ParseComputeDType(ComputeDTypeName(d)).value(), d);
  }
}

TEST(ComputeChoiceTest, RowsFallInTheLargestBucketAtOrBelowThem) {
  EXPECT_EQ(RowBucket(0), 0u);
  EXPECT_EQ(RowBucket(1), 0u);
  EXPECT_EQ(RowBucket(3), 1u);   // 2
  EXPECT_EQ(RowBucket(16), 4u);  // 16
  EXPECT_EQ(RowBucket(17), 4u);
  EXPECT_EQ(RowBucket(256), kRowBucketCount - 1);
  EXPECT_EQ(RowBucket(5000), kRowBucketCount - 1);
}

TEST(ComputeChoiceTest, Float32PlanIsTheSmallKernelUpTo32RowsWhenTheCpuHasIt) {
  KernelPlan fast = Float32Plan(true);
  EXPECT_EQ(fast[RowBucket(32)], K::kF32Small);
  EXPECT_EQ(fast[RowBucket(64)], K::kF32Gemm);
  for (K k : Float32Plan(false)) EXPECT_EQ(k, K::kF32Gemm);
  for (K k : Bf16Plan()) EXPECT_EQ(k, DefaultBf16Kernel());
}

TEST(ComputeChoiceTest, AutoTakesTheFastestKernelPerBucketAndTiesStayFloat32) {
  // bf16 slower at 1 and 2 rows, tied at 4, faster beyond; the small kernel
  // untimed beyond 64 rows (-1).
  const ComputeMeasurement m = Measured({1, 2, 3, 4, 5, 6, 7, -1, -1}, {2, 3, 4, 5, 6, 7, 8, 9, 10},
                                        {1.5, 2.5, 3, 1, 1, 1, 1, 1, 1});
  const KernelPlan plan =
      ChoosePlan(ComputeDType::kAuto, false, true, &m, /*batch_invariant=*/false);
  EXPECT_EQ(plan[0], K::kF32Small);
  EXPECT_EQ(plan[1], K::kF32Small);
  EXPECT_EQ(plan[2], K::kF32Small);  // a tie keeps float32
  for (size_t b = 3; b < kRowBucketCount; ++b) EXPECT_EQ(plan[b], K::kBf16Gemm) << b;
  ComputeChoice choice;
  choice.plan = plan;
  choice.measurement = m;
  EXPECT_STREQ(choice.PlanDType(), "mixed");
  EXPECT_EQ(choice.Describe(), "f32-small from 1 row, bf16-gemm from 8 rows");
  EXPECT_DOUBLE_EQ(choice.FlopsPerSecond(1), 1e9 / 1.0);    // f32-small, 1 row in 1 s
  EXPECT_DOUBLE_EQ(choice.FlopsPerSecond(300), 1e9 * 256);  // bf16-gemm, 256 rows in 1 s
  // Without the small kernel (no AVX2), the GEMM is float32's figure.
  const KernelPlan no_small =
      ChoosePlan(ComputeDType::kAuto, false, false, &m, /*batch_invariant=*/false);
  EXPECT_EQ(no_small[0], K::kBf16Gemm);  // 1.5 s beats the GEMM's 2
  EXPECT_EQ(no_small[2], K::kBf16Gemm);  // 3 s beats 4

  // The engine's AVX512-BF16 kernel where it measured fastest (from 32
  // rows), a tie with oneDNN's keeping oneDNN's (at 16), untimed at 8.
  const ComputeMeasurement own =
      Measured({1, 2, 3, 4, 5, 6, 7, -1, -1}, {2, 3, 4, 5, 6, 7, 8, 9, 10},
               {1.5, 2.5, 3, 1, 1, 1, 1, 1, 1}, {9, 9, 9, -1, 1, 0.5, 0.5, 0.5, 0.5});
  choice.plan = ChoosePlan(ComputeDType::kAuto, false, true, &own, /*batch_invariant=*/false);
  choice.measurement = own;
  EXPECT_EQ(choice.Describe(),
            "f32-small from 1 row, bf16-gemm from 8 rows, bf16-avx512 from 32 rows");
  EXPECT_STREQ(choice.PlanDType(), "mixed");
  EXPECT_DOUBLE_EQ(choice.FlopsPerSecond(64), 1e9 * 64 / 0.5);
}

TEST(ComputeChoiceTest, AutoNeverPicksAKernelSlowerThanFloat32) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> seconds(0.1, 10);
  for (int trial = 0; trial < 200; ++trial) {
    Row small, gemm, bf16, avx512;
    for (size_t b = 0; b < kRowBucketCount; ++b) {
      small[b] = b >= 7 ? -1 : seconds(rng);
      gemm[b] = seconds(rng);
      bf16[b] = seconds(rng);
      avx512[b] = trial % 2 == 0 ? -1 : seconds(rng);  // untimed where the CPU lacks it
    }
    const ComputeMeasurement m = Measured(small, gemm, bf16, avx512);
    const KernelPlan plan =
        ChoosePlan(ComputeDType::kAuto, false, true, &m, /*batch_invariant=*/false);
    for (size_t b = 0; b < kRowBucketCount; ++b) {
      const double chosen = m.Seconds(plan[b], b);
      EXPECT_GT(chosen, 0);
      EXPECT_LE(chosen, gemm[b]);
      const double fastest_f32 = small[b] > 0 ? std::min(small[b], gemm[b]) : gemm[b];
      EXPECT_LE(chosen, fastest_f32);
      EXPECT_LE(chosen, bf16[b]);
      if (avx512[b] > 0) {
        EXPECT_LE(chosen, avx512[b]);
      }
      if (IsBf16Kernel(plan[b])) {
        EXPECT_LT(chosen, fastest_f32);
      }
    }
  }
}

TEST(ComputeChoiceTest, MeasuringInRoundsKeepsEachCellsFastestAndInterleavesTheKernels) {
  const std::vector<ProjectionShape> shapes = {{8, 4, checkpoint::DType::kF16, 3},
                                               {2, 4, checkpoint::DType::kF16, 1}};
  struct Call {
    size_t shape;
    K kernel;
    size_t bucket;
    int round;
  };
  std::vector<Call> calls;
  const ComputeMeasurement m =
      MeasureInRounds(shapes, 3, [&](size_t shape, K kernel, size_t bucket, int round) {
        calls.push_back({shape, kernel, bucket, round});
        if (kernel == K::kF32Small && bucket >= 7) return -1.0;  // untimed there
        // Shape 0 takes 1 s a use, shape 1 2 s; bf16-gemm twice as long.
        double seconds = (shape == 0 ? 1.0 : 2.0) * (kernel == K::kBf16Gemm ? 2 : 1);
        // A burst of noise: float32's 1-row cells 5x slower in round 0, and
        // every kernel's 4-row cell of shape 1 in round 2.
        if (round == 0 && bucket == 0 && (kernel == K::kF32Small || kernel == K::kF32Gemm)) {
          seconds *= 5;
        }
        if (round == 2 && shape == 1 && bucket == 2) seconds *= 5;
        return seconds;
      });
  // Rounds, then shapes, then buckets, then every kernel one after another.
  ASSERT_EQ(calls.size(), 3 * shapes.size() * kRowBucketCount * kProjectionKernelCount);
  size_t i = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t shape = 0; shape < shapes.size(); ++shape) {
      for (size_t bucket = 0; bucket < kRowBucketCount; ++bucket) {
        for (int k = 0; k < kProjectionKernelCount; ++k, ++i) {
          EXPECT_EQ(calls[i].round, round) << i;
          EXPECT_EQ(calls[i].shape, shape) << i;
          EXPECT_EQ(calls[i].bucket, bucket) << i;
          EXPECT_EQ(calls[i].kernel, static_cast<K>(k)) << i;
        }
      }
    }
  }
  // Each cell its fastest round, x per_pass, summed: 3 x 1 + 1 x 2 = 5 s.
  for (size_t b = 0; b < kRowBucketCount; ++b) {
    EXPECT_DOUBLE_EQ(m.Seconds(K::kF32Gemm, b), 5) << b;
    EXPECT_DOUBLE_EQ(m.Seconds(K::kBf16Avx512, b), 5) << b;
    EXPECT_DOUBLE_EQ(m.Seconds(K::kBf16Gemm, b), 10) << b;
    EXPECT_DOUBLE_EQ(m.Seconds(K::kF32Small, b), b >= 7 ? -1 : 5) << b;
  }
  EXPECT_DOUBLE_EQ(m.flops_per_row, FlopsPerRow(shapes));
  // Without the burst's round, the 1-row bucket stays float32.
  EXPECT_EQ(ChoosePlan(ComputeDType::kAuto, false, true, &m, /*batch_invariant=*/false)[0],
            K::kF32Small);
}

TEST(ComputeChoiceTest, Float32WeightsStayFloat32AndAutoWithoutAMeasurementToo) {
  const ComputeMeasurement fast_bf16 = Measured(
      {9, 9, 9, 9, 9, 9, 9, -1, -1}, {9, 9, 9, 9, 9, 9, 9, 9, 9}, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(ChoosePlan(ComputeDType::kAuto, /*all_f32=*/true, true, &fast_bf16,
                       /*batch_invariant=*/false),
            Float32Plan(true));
  EXPECT_EQ(ChoosePlan(ComputeDType::kAuto, false, true, nullptr, /*batch_invariant=*/false),
            Float32Plan(true));
  EXPECT_EQ(ChoosePlan(ComputeDType::kFloat32, false, true, &fast_bf16, /*batch_invariant=*/false),
            Float32Plan(true));
  EXPECT_EQ(ChoosePlan(ComputeDType::kBFloat16, /*all_f32=*/true, true, nullptr,
                       /*batch_invariant=*/false),
            Float32Plan(true));
  EXPECT_EQ(ChoosePlan(ComputeDType::kBFloat16, false, true, nullptr, /*batch_invariant=*/false),
            Bf16Plan());
  ComputeChoice choice;
  choice.plan = Bf16Plan();
  EXPECT_STREQ(choice.PlanDType(), "bf16");
  EXPECT_EQ(choice.FlopsPerSecond(16), 0);  // not measured
  choice.plan = Float32Plan(false);
  EXPECT_STREQ(choice.PlanDType(), "f32");
}

// Batch-invariant plans: one invariant kernel at every bucket, never one
// whose order of sums moves with the rows (f32-small, the GEMM libraries),
// and never chosen by a measurement, however fast a kernel measured.
TEST(ComputeChoiceTest, InvariantPlansRunOneInvariantKernelChosenByTheCpuAlone) {
  auto all = [](K k) {
    KernelPlan plan;
    plan.fill(k);
    return plan;
  };
  const K bf16 = Bf16MatmulSupported() ? K::kBf16Avx512 : K::kF32Tile;
  // f32-small and oneDNN measured ten times faster than either: not used.
  const ComputeMeasurement fast_variant =
      Measured({0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, -1, -1}, {1, 1, 1, 1, 1, 1, 1, 1, 1},
               {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, {1, 1, 1, 1, 1, 1, 1, 1, 1},
               {1, 1, 1, 1, 1, 1, 1, 1, 1});
  // f32-tile measured faster than bf16-avx512 everywhere: the choice stays.
  const ComputeMeasurement fast_tile = Measured(
      {1, 1, 1, 1, 1, 1, 1, -1, -1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1},
      {9, 9, 9, 9, 9, 9, 9, 9, 9}, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  for (const ComputeMeasurement* m :
       {&fast_variant, &fast_tile, static_cast<const ComputeMeasurement*>(nullptr)}) {
    EXPECT_EQ(ChoosePlan(ComputeDType::kAuto, false, true, m, true), all(bf16));
    EXPECT_EQ(ChoosePlan(ComputeDType::kBFloat16, false, true, m, true), all(bf16));
    EXPECT_EQ(ChoosePlan(ComputeDType::kFloat32, false, true, m, true), all(K::kF32Tile));
    EXPECT_EQ(ChoosePlan(ComputeDType::kAuto, /*all_f32=*/true, true, m, true), all(K::kF32Tile));
    EXPECT_EQ(ChoosePlan(ComputeDType::kBFloat16, /*all_f32=*/true, true, m, true),
              all(K::kF32Tile));
  }
  {
    ScopedIsaCeiling no_bf16(Isa::kAvx512);  // a CPU without AVX512-BF16
    EXPECT_EQ(ChoosePlan(ComputeDType::kAuto, false, true, &fast_variant, true), all(K::kF32Tile));
    EXPECT_EQ(ChoosePlan(ComputeDType::kBFloat16, false, true, nullptr, true), all(K::kF32Tile));
  }
  for (ComputeDType d : {ComputeDType::kAuto, ComputeDType::kFloat32, ComputeDType::kBFloat16}) {
    EXPECT_TRUE(IsInvariantPlan(ChoosePlan(d, false, true, &fast_variant, true)));
  }
  EXPECT_FALSE(IsInvariantPlan(Float32Plan(true)));
  EXPECT_FALSE(IsInvariantPlan(all(K::kBf16Gemm)));
  KernelPlan mixed = all(K::kF32Tile);
  mixed[3] = K::kBf16Avx512;
  EXPECT_FALSE(IsInvariantPlan(mixed));
}

TEST(ComputeChoiceTest, TheCacheKeepsAMeasurementForItsKeyOnly) {
  checkpoint::testing::TempDir dir;
  std::vector<ProjectionShape> shapes = {{5632, 2048, checkpoint::DType::kF16, 32},
                                         {2048, 2048, checkpoint::DType::kF16, 32}};
  EXPECT_DOUBLE_EQ(FlopsPerRow(shapes), 2.0 * (5632.0 * 2048 * 32 + 2048.0 * 2048 * 32));
  const std::string key = ComputeMeasurementKey(shapes, 2, "1.13.0");
  EXPECT_NE(key, ComputeMeasurementKey(shapes, 1, "1.13.0"));  // threads matter
  shapes[1].dtype = checkpoint::DType::kBF16;
  EXPECT_NE(key, ComputeMeasurementKey(shapes, 2, "1.13.0"));  // so do the shapes
  EXPECT_NE(key.find(HostCpu().model), std::string::npos);     // and the CPU
  const std::string path = ComputeCachePath(dir.path(), key);
  EXPECT_EQ(ComputeCachePath(dir.path(), key), path);
  EXPECT_FALSE(ReadComputeCache(path, key));  // nothing yet

  ComputeMeasurement m = Measured({1, 2, 3, 4, 5, 6, 7, -1, -1}, {2, 3, 4, 5, 6, 7, 8, 9, 10},
                                  {0.5, 0.25, 3, 1, 1, 1, 1, 1, 0.125});
  m.key = key;
  ASSERT_TRUE(WriteComputeCache(path, m).ok());
  std::optional<ComputeMeasurement> read = ReadComputeCache(path, key);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->seconds, m.seconds);
  EXPECT_EQ(read->flops_per_row, m.flops_per_row);
  EXPECT_FALSE(ReadComputeCache(path, key + " other"));  // a stale file is not used
  std::ofstream(path) << "{not json";
  EXPECT_FALSE(ReadComputeCache(path, key));
}

TEST(ComputeChoiceTest, CpuFlagsAreWhatTheCompilerSeesAtRunTime) {
  const CpuInfo& cpu = HostCpu();
  EXPECT_FALSE(cpu.model.empty());
#if defined(__x86_64__)
  EXPECT_EQ(cpu.Has("avx2"), static_cast<bool>(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(cpu.Has("fma"), static_cast<bool>(__builtin_cpu_supports("fma")));
  EXPECT_EQ(cpu.Has("avx512f"), static_cast<bool>(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(cpu.Has("avx512bw"), static_cast<bool>(__builtin_cpu_supports("avx512bw")));
#endif
  EXPECT_EQ(cpu.FlagsString().find("  "), std::string::npos);
}

}  // namespace
}  // namespace nightshift::engine
