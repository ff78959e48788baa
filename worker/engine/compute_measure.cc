#include "worker/engine/compute_measure.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

#include "worker/engine/bf16_matmul.h"
#include "worker/engine/compute_pool.h"
#include "worker/engine/kernels.h"
#include "worker/engine/quant_synthetic.h"
#include "worker/engine/small_matmul.h"

namespace nightshift::engine {
namespace {

using Clock = std::chrono::steady_clock;

// The small-batch kernel is timed up to here: beyond, converted blocks and
// a GEMM win by far (small_matmul.h), and each run would cost seconds.
constexpr int64_t kSmallKernelMaxTimedRows = 64;

at::ScalarType StoredType(checkpoint::DType dtype) {
  switch (dtype) {
    case checkpoint::DType::kF16:
      return at::kHalf;
    case checkpoint::DType::kBF16:
      return at::kBFloat16;
    default:
      return at::kFloat;
  }
}

// Weight rows timed per shape at most: a taller shape (an LM-head slice,
// an MLP projection) is timed on its first rows and its time scaled by its
// height, which keeps the measurement to seconds on a real model (the rate
// barely moves beyond a few thousand rows).
constexpr int64_t kMaxTimedOut = 4096;

// Rounds of MeasureInRounds (compute_choice.h); each times a cell for a
// share of MeasureOptions::min_seconds.
constexpr int kMeasureRounds = 3;

// Evicts [data, data + bytes) from every cache level. In a pass each
// projection's weights arrive from memory (the loader's buffer, or a pinned
// group last touched a layer ago): timed on weights left in cache by the
// previous run, a kernel's rate at a few rows came out up to twice what a
// pass reached.
void EvictFromCaches(const void* data, uint64_t bytes) {
#if defined(__x86_64__)
  const auto* p = static_cast<const char*>(data);
  for (uint64_t at = 0; at < bytes; at += 64) _mm_clflush(p + at);
  _mm_mfence();
#else
  (void)data;
  (void)bytes;
#endif
}

// The fastest of a few runs of `fn`, in seconds: one run when it alone
// takes min_seconds, else up to 5 until they took that long. `before` runs
// before each, untimed; with `warm_up`, `fn` runs once untimed first
// (scratch buffers, oneDNN's kernels for this shape).
template <typename Before, typename Fn>
double FastestRun(double min_seconds, bool warm_up, Before before, Fn fn) {
  if (warm_up) fn();
  double best = 0, spent = 0;
  for (int run = 0; run < 5 && (run < 1 || spent < min_seconds); ++run) {
    before();
    const Clock::time_point start = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = run == 0 ? s : std::min(best, s);
    spent += s;
  }
  return best;
}

// A synthetic weight of one shape: the size and dtype of the checkpoint's,
// values small like a checkpoint's, so nothing is read from disk.
// Quantized ones: a synthetic weight of the same format (quant_synthetic.h).
struct TimedWeight {
  at::Tensor stored;
  SyntheticQuantWeight quantized;
  checkpoint::TensorInfo info;
  const unsigned char* data = nullptr;
  uint64_t bytes = 0;
  double height_scale = 1;  // the shape's rows over the timed rows
};

TimedWeight MakeTimedWeight(const ProjectionShape& shape) {
  TimedWeight t;
  const int64_t out = std::min(shape.out, kMaxTimedOut);
  t.height_scale = static_cast<double>(shape.out) / static_cast<double>(out);
  if (shape.quant != checkpoint::QuantFormat::kNone) {
    QuantWeightSpec spec;
    spec.format = shape.quant;
    spec.out = out;
    spec.in = shape.in;
    spec.group_size = shape.group_size;
    spec.g_idx = shape.g_idx;
    spec.block_out = shape.block_out;
    spec.block_in = shape.block_in;
    spec.scale_dtype = shape.scale_dtype;
    t.quantized = MakeSyntheticQuantWeight(spec);
    t.info = t.quantized.info;
    t.data = t.quantized.data();
    t.bytes = t.quantized.bytes.size();
    return t;
  }
  t.stored = (at::rand({out, shape.in}) - 0.5).mul_(0.1).to(StoredType(shape.dtype));
  t.info.dtype = shape.dtype;
  t.info.shape = {out, shape.in};
  t.info.size = static_cast<uint64_t>(t.stored.numel()) * checkpoint::DTypeSize(shape.dtype);
  t.data = static_cast<const unsigned char*>(t.stored.data_ptr());
  t.bytes = t.info.size;
  return t;
}

bool Timed(ProjectionKernel kernel, int64_t rows) {
  if (kernel == ProjectionKernel::kF32Small) {
    return rows <= kSmallKernelMaxTimedRows && SmallMatmulFast();
  }
  return kernel != ProjectionKernel::kBf16Avx512 || Bf16MatmulSupported();
}

// Every shape's synthetic weight is held for the whole measurement, since
// each round visits them all: at most 4096 rows each, e.g. 0.44 GB for a
// 70B Llama's five F16 shapes, a quarter of one of its layers (1.7 GB).
ComputeMeasurement Measure(const std::vector<ProjectionShape>& shapes, double min_seconds) {
  std::vector<TimedWeight> weights;
  std::vector<at::Tensor> xs;
  for (const ProjectionShape& shape : shapes) {
    weights.push_back(MakeTimedWeight(shape));
    xs.push_back(at::randn({kRowBuckets.back(), shape.in}));
  }
  std::array<KernelPlan, kProjectionKernelCount> plans;
  for (size_t k = 0; k < static_cast<size_t>(kProjectionKernelCount); ++k) {
    plans[k].fill(static_cast<ProjectionKernel>(k));
  }
  // A quantized shape runs one kernel whatever the plan: timed once per
  // bucket and round, the figure shared by every kernel timed there.
  struct Shared {
    size_t shape = SIZE_MAX, bucket = 0;
    int round = -1;
    double seconds = 0;
  } shared;
  return MeasureInRounds(
      shapes, kMeasureRounds, [&](size_t s, ProjectionKernel kernel, size_t b, int round) {
        const int64_t rows = kRowBuckets[b];
        if (!Timed(kernel, rows)) return -1.0;
        const bool quantized = shapes[s].quant != checkpoint::QuantFormat::kNone;
        if (quantized && shared.shape == s && shared.bucket == b && shared.round == round) {
          return shared.seconds;
        }
        const TimedWeight& t = weights[s];
        const Weight w{&t.info, t.data, std::nullopt, &plans[static_cast<size_t>(kernel)]};
        const at::Tensor xr = xs[s].narrow(0, 0, rows);
        const double seconds =
            t.height_scale * FastestRun(
                                 min_seconds / kMeasureRounds, /*warm_up=*/round == 0,
                                 [&] { EvictFromCaches(t.data, t.bytes); },
                                 [&] { (void)Linear(xr, w); });
        if (quantized) shared = {s, b, round, seconds};
        return seconds;
      });
}

std::mutex g_memo_mutex;
std::map<std::string, ComputeMeasurement>& Memo() {
  static auto* memo = new std::map<std::string, ComputeMeasurement>();
  return *memo;
}

}  // namespace

std::string TorchVersion() { return TORCH_VERSION; }

StatusOr<MeasuredCompute> MeasureProjections(const std::vector<ProjectionShape>& shapes,
                                             const MeasureOptions& options) {
  if (shapes.empty()) return InvalidArgument("no projection shapes to measure");
  for (const ProjectionShape& s : shapes) {
    if (s.out <= 0 || s.in <= 0 || s.per_pass <= 0) {
      return InvalidArgument("projection shape " + std::to_string(s.out) + "x" +
                             std::to_string(s.in) + " is empty");
    }
    if (s.quant == checkpoint::QuantFormat::kNone && s.dtype != checkpoint::DType::kF32 &&
        s.dtype != checkpoint::DType::kF16 && s.dtype != checkpoint::DType::kBF16) {
      return InvalidArgument(std::string("no projection kernels for ") +
                             checkpoint::DTypeName(s.dtype) + " weights");
    }
  }
  MeasuredCompute out;
  // The float32 GEMM's kernels are OpenBLAS's core's: part of what was measured.
  const std::string key = ComputeMeasurementKey(
      shapes, ComputePoolThreads(), TorchVersion() + ", OpenBLAS core " + OpenBlasCore());
  if (!options.state_dir.empty()) out.cache_path = ComputeCachePath(options.state_dir, key);
  // One measurement per key at a time in this process: an engine opening
  // while another measures waits for its figures.
  std::lock_guard<std::mutex> lock(g_memo_mutex);
  if (auto it = Memo().find(key); it != Memo().end()) {
    out.measurement = it->second;
    out.cached = true;
    if (!out.cache_path.empty() && !ReadComputeCache(out.cache_path, key)) {
      (void)WriteComputeCache(out.cache_path, out.measurement);
    }
    return out;
  }
  if (!out.cache_path.empty()) {
    if (std::optional<ComputeMeasurement> cached = ReadComputeCache(out.cache_path, key)) {
      out.measurement = *cached;
      out.cached = true;
      Memo()[key] = out.measurement;
      return out;
    }
  }
  try {
    out.measurement = Measure(shapes, options.min_seconds);
  } catch (const c10::Error& e) {
    return Internal(std::string("measuring the projection kernels: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string("measuring the projection kernels: ") + e.what());
  }
  out.measurement.key = key;
  Memo()[key] = out.measurement;
  if (!out.cache_path.empty()) (void)WriteComputeCache(out.cache_path, out.measurement);
  return out;
}

}  // namespace nightshift::engine
