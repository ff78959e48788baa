// How the CPU path multiplies its projections, chosen by measurement.
//
// A projection (Linear, kernels.h) on host weights can run one of four
// kernels: the small-batch kernel that widens each weight to float32 in
// registers (small_matmul.h), blocks of weights converted to float32 for
// OpenBLAS's GEMM (today's path beyond 32 rows), or BF16 through ATen
// (oneDNN) or the engine's own AVX512-BF16 kernel (bf16_matmul.h):
// activations rounded to BF16 at the projection's input, weights as
// stored when BF16 (F16 ones converted to BF16 a block at a time),
// float32 accumulation, the product rounded to BF16 and widened back, as the
// accelerator path does on a GPU (F32 weights stay float32, as there). Norms, attention, softmax,
// the KV cache and the logits stay float32 whatever runs.
//
// Which is fastest depends on the CPU: where it multiplies BF16 natively
// (AVX512-BF16, AMX) oneDNN's BF16 GEMM is several times float32's; on an
// AVX2-only CPU it is ~10x slower. So the engine times every kernel on the
// model's projection shapes at each row bucket (ComputeMeasurement, by
// MeasureProjections in compute_measure.h) and `auto` picks, per bucket, the
// kernel that took the least time; the measurement is cached in a state
// directory per CPU, thread count, libtorch and shapes (ComputeCachePath),
// so the choice is the same on every run.
//
// libtorch-free pure functions and plain types (the cache file's I/O
// aside); thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

// What the projections compute in (--compute-dtype).
enum class ComputeDType {
  kAuto,      // the fastest measured kernel per row bucket; float32 for F32 checkpoints
  kFloat32,   // float32 throughout (the engine's behaviour before BF16 compute)
  kBFloat16,  // BF16 projections at every row count for BF16 and F16 weights
};
// "auto", "f32" or "bf16".
const char* ComputeDTypeName(ComputeDType dtype);
// "auto", "f32" / "float32" or "bf16" / "bfloat16"; InvalidArgument otherwise.
StatusOr<ComputeDType> ParseComputeDType(const std::string& name);

enum class ProjectionKernel {
  kF32Small = 0,    // SmallMatmul: weights widened in registers, float32 rows of x
  kF32Gemm = 1,     // weights converted to float32 in blocks (a view when F32), OpenBLAS
  kBf16Gemm = 2,    // x rounded to BF16, BF16 weights (F16 converted in blocks), oneDNN;
                    // F32 weights run float32 instead
  kBf16Avx512 = 3,  // the same numerics in the engine's AVX512-BF16 kernel (bf16_matmul.h),
                    // F16 weights converted a tile of rows at a time; only where supported
  kF32Tile = 4,     // float32 in the engine's own dot kernel (dot_kernel.h): 8 weight rows
                    // widened at a time, one summation order whatever the rows
};
inline constexpr int kProjectionKernelCount = 5;
// "f32-small", "f32-gemm", "bf16-gemm", "bf16-avx512" or "f32-tile".
const char* ProjectionKernelName(ProjectionKernel kernel);
bool IsBf16Kernel(ProjectionKernel kernel);
// Whether a row's products through `kernel` are bitwise the same whatever
// the other rows multiplied with it, the output range a thread covers and
// the instruction set: f32-tile and bf16-avx512 (each output one fixed
// chain of sums over the inputs). f32-small's order depends on how many
// rows share its register tile; the GEMM libraries' on the matrix shape.
bool IsBatchInvariant(ProjectionKernel kernel);

// The row counts the kernels are timed at; a projection of R rows uses the
// choice of the largest bucket <= R (the last one beyond it).
inline constexpr std::array<int64_t, 9> kRowBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
inline constexpr size_t kRowBucketCount = kRowBuckets.size();
// The bucket index for `rows` (>= 1; 0 for anything less).
size_t RowBucket(int64_t rows);

// One kernel per row bucket.
using KernelPlan = std::array<ProjectionKernel, kRowBucketCount>;

// Float32 as the engine ran before BF16 compute: the small-batch kernel up
// to kSmallMatmulMaxRows rows when the CPU has AVX2, FMA and F16C
// (`small_fast`), converted blocks and a GEMM beyond.
KernelPlan Float32Plan(bool small_fast);
// The BF16 kernel `bf16` runs: the engine's own where the CPU has
// AVX512-BF16 (Bf16MatmulSupported), oneDNN's elsewhere.
ProjectionKernel DefaultBf16Kernel();
// DefaultBf16Kernel at every bucket.
KernelPlan Bf16Plan();

// A weight matrix shape the projections of one pass multiply, and how many
// times a pass multiplies it (layers x uses per layer; head slices).
//
// A quantized weight (TensorInfo::quant) runs the quantized kernel
// (quant_matmul.h) whichever kernel a plan names, so the measurement times
// that kernel on a synthetic weight of the same format (quant_synthetic.h)
// and counts it in every kernel's figure alike: the plan is chosen by the
// 16-bit shapes, and the pass is priced with every shape.
struct ProjectionShape {
  int64_t out = 0;
  int64_t in = 0;
  checkpoint::DType dtype = checkpoint::DType::kF32;  // a quantized weight's first part's
  int64_t per_pass = 1;
  // Quantized weights: the format and its parameters; kNone otherwise.
  checkpoint::QuantFormat quant = checkpoint::QuantFormat::kNone;
  int64_t group_size = 0;               // AWQ/GPTQ
  bool g_idx = false;                   // GPTQ with g_idx
  int64_t block_out = 0, block_in = 0;  // FP8 blocks
  checkpoint::DType scale_dtype = checkpoint::DType::kF32;

  // The same weight (everything but per_pass).
  bool SameWeight(const ProjectionShape& o) const {
    return out == o.out && in == o.in && dtype == o.dtype && quant == o.quant &&
           group_size == o.group_size && g_idx == o.g_idx && block_out == o.block_out &&
           block_in == o.block_in && scale_dtype == o.scale_dtype;
  }
  bool operator==(const ProjectionShape& o) const {
    return SameWeight(o) && per_pass == o.per_pass;
  }
};
// The shape of a 2-D weight tensor, its quantization included; per_pass 1.
ProjectionShape ShapeOf(const checkpoint::TensorInfo& tensor);
// The FLOPs of one row through every shape, once per use: 2 x sum(out x in
// x per_pass).
double FlopsPerRow(const std::vector<ProjectionShape>& shapes);

// Seconds one pass's projections took at each bucket's rows with each
// kernel: per shape the fastest of three rounds of timed runs
// (MeasureInRounds, MeasureProjections), x per_pass, summed.
// Negative: that kernel was not timed at that bucket (the small-batch kernel
// beyond 64 rows, or on a CPU without AVX2/FMA/F16C; `bf16-avx512` on one
// without AVX512-BF16).
struct ComputeMeasurement {
  std::string key;  // what the figures hold for (ComputeMeasurementKey)
  std::array<std::array<double, kRowBucketCount>, kProjectionKernelCount> seconds{};
  double flops_per_row = 0;  // FlopsPerRow of the shapes timed

  double Seconds(ProjectionKernel kernel, size_t bucket) const {
    return seconds[static_cast<size_t>(kernel)][bucket];
  }
  // FLOP/s of `kernel` at `bucket`'s rows; 0 when not timed.
  double FlopsPerSecond(ProjectionKernel kernel, size_t bucket) const;
};

// One use of `shapes[shape]` by `kernel` at `kRowBuckets[bucket]` rows, timed
// in `round`: its seconds, or negative where that kernel is not timed
// there (the same in every round).
using CellTimer =
    std::function<double(size_t shape, ProjectionKernel kernel, size_t bucket, int round)>;

// A measurement from `rounds` rounds of `time`. Each round visits the
// shapes in order, at each shape the buckets in order, and at each bucket
// every kernel one after another, so a burst of noise on the machine (a
// neighbour's load, a frequency step) slows the kernels it overlaps alike
// rather than one kernel's whole row, and a later round replaces it. A
// cell's figure is its fastest over the rounds, x per_pass, summed over the
// shapes; negative where untimed. Timed one kernel at a time in one round,
// a single burst once made float32 look 2x slower at one row and moved that
// bucket to a kernel the passes then ran 1.5x slower than float32.
ComputeMeasurement MeasureInRounds(const std::vector<ProjectionShape>& shapes, int rounds,
                                   const CellTimer& time);

// The key a measurement is valid for: the CPU's model and flags, the
// compute threads, the libtorch version and every shape.
std::string ComputeMeasurementKey(const std::vector<ProjectionShape>& shapes, int threads,
                                  const std::string& torch_version);

// The plan for `requested`. F32 weights (`all_f32`) stay float32 whatever
// is asked, as on the accelerator path, which multiplies only 16-bit
// weights in 16 bits: rounding an F32 model's weights to BF16 moved the
// stories260k fixture's logits 12 BF16 steps (the bound is 4) and turned
// its greedy rollout.
//
// With `batch_invariant` (the engine's default) the plan is one
// IsBatchInvariant kernel at every bucket, so a sequence's numerics never
// depend on how many rows its pass has, and it is a function of the CPU's
// instruction sets and the weights alone, never of a measurement (which
// moves with the thread count and the machine's load: two workers, or two
// runs, could choose differently and answer differently): kFloat32 and F32
// weights -> f32-tile; kBFloat16 and kAuto -> bf16-avx512 where the CPU has
// AVX512-BF16 (several times float32's rate there), else f32-tile (oneDNN's
// BF16 GEMM is not invariant). f32-tile's sums are in the same order on
// every instruction set, so `f32` answers the same on every CPU.
//
// Without it, per bucket as fast as measured: kFloat32 -> Float32Plan;
// kBFloat16 -> Bf16Plan; kAuto -> per bucket the kernel with the least
// measured seconds among f32-small, f32-gemm, bf16-gemm and bf16-avx512
// (ties to float32), so a BF16 kernel is chosen only where it measured
// faster than every float32 one; Float32Plan without a measurement.
KernelPlan ChoosePlan(ComputeDType requested, bool all_f32, bool small_fast,
                      const ComputeMeasurement* measurement, bool batch_invariant);
// Whether every bucket of `plan` runs the same IsBatchInvariant kernel.
bool IsInvariantPlan(const KernelPlan& plan);

// What the engine runs and why, for reports.
struct ComputeChoice {
  ComputeDType requested = ComputeDType::kFloat32;
  bool batch_invariant = false;  // asked for (ChoosePlan); the plan then IsInvariantPlan
  KernelPlan plan{};
  std::optional<ComputeMeasurement> measurement;  // when measured (or read from the cache)
  bool cached = false;                            // measurement read from the cache file
  std::string cache_path;                         // where it was read or written; "" if nowhere

  ProjectionKernel KernelFor(int64_t rows) const { return plan[RowBucket(rows)]; }
  // "f32" when every bucket runs a float32 kernel, "bf16" when every bucket
  // runs BF16, else "mixed".
  const char* PlanDType() const;
  // The measured FLOP/s of the kernel chosen for `rows`; 0 without a
  // measurement.
  double FlopsPerSecond(int64_t rows) const;
  // Each kernel from the rows where it starts, e.g. "bf16-gemm from 1 row" or
  // "f32-small from 1 row, bf16-gemm from 4 rows".
  std::string Describe() const;
};

// The cache file for `key` in `state_dir`: compute-<hash of key>.json.
std::string ComputeCachePath(const std::string& state_dir, const std::string& key);
// The measurement in `path` when it exists, parses and holds `key`;
// nullopt otherwise (a missing or stale file is measured again).
std::optional<ComputeMeasurement> ReadComputeCache(const std::string& path, const std::string& key);
// Writes `m` to `path` (creating its directory), through a temporary file
// renamed into place. Unavailable when it cannot be written.
Status WriteComputeCache(const std::string& path, const ComputeMeasurement& m);

// This CPU, read with cpuid at run time.
struct CpuInfo {
  std::string model;               // the brand string, e.g. "AMD EPYC 9R45"
  std::vector<std::string> flags;  // of avx2 fma f16c avx512f avx512bw avx512_bf16 amx_bf16 ...
  bool Has(const std::string& flag) const;
  std::string FlagsString() const;  // space-separated
};
const CpuInfo& HostCpu();

}  // namespace nightshift::engine
