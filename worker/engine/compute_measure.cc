#include "worker/engine/compute_measure.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "worker/engine/bf16_matmul.h"
#include "worker/engine/compute_pool.h"
#include "worker/engine/kernels.h"
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

// The fastest of a few runs of `fn` after a warm-up, in seconds: one run
// when it alone takes min_seconds, else up to 5 until they took that long.
// `before` runs before each, untimed.
template <typename Before, typename Fn>
double FastestRun(double min_seconds, Before before, Fn fn) {
  fn();  // warm-up: scratch buffers, oneDNN's kernels for this shape
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

ComputeMeasurement Measure(const std::vector<ProjectionShape>& shapes, double min_seconds) {
  ComputeMeasurement m;
  for (auto& row : m.seconds) row.fill(0);
  m.flops_per_row = FlopsPerRow(shapes);
  const int64_t max_rows = kRowBuckets.back();
  for (const ProjectionShape& shape : shapes) {
    // Synthetic weights of the shape's size and dtype, small like a
    // checkpoint's, so nothing is read from disk; out of the caches before
    // each timed run, as in a pass.
    const int64_t out = std::min(shape.out, kMaxTimedOut);
    const double scale = static_cast<double>(shape.per_pass) * static_cast<double>(shape.out) /
                         static_cast<double>(out);
    at::Tensor stored = (at::rand({out, shape.in}) - 0.5).mul_(0.1).to(StoredType(shape.dtype));
    checkpoint::TensorInfo info;
    info.dtype = shape.dtype;
    info.shape = {out, shape.in};
    info.size = static_cast<uint64_t>(stored.numel()) * checkpoint::DTypeSize(shape.dtype);
    const at::Tensor x = at::randn({max_rows, shape.in});
    for (int k = 0; k < kProjectionKernelCount; ++k) {
      const auto kernel = static_cast<ProjectionKernel>(k);
      KernelPlan plan;
      plan.fill(kernel);
      const Weight w{&info, static_cast<const unsigned char*>(stored.data_ptr()), std::nullopt,
                     &plan};
      for (size_t b = 0; b < kRowBucketCount; ++b) {
        double& total = m.seconds[static_cast<size_t>(k)][b];
        const int64_t rows = kRowBuckets[b];
        if ((kernel == ProjectionKernel::kF32Small &&
             (rows > kSmallKernelMaxTimedRows || !SmallMatmulFast())) ||
            (kernel == ProjectionKernel::kBf16Avx512 && !Bf16MatmulSupported())) {
          total = -1;
          continue;
        }
        if (total < 0) continue;
        const at::Tensor xr = x.narrow(0, 0, rows);
        total += scale * FastestRun(
                             min_seconds, [&] { EvictFromCaches(w.data, info.size); },
                             [&] { (void)Linear(xr, w); });
      }
    }
  }
  return m;
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
    if (s.dtype != checkpoint::DType::kF32 && s.dtype != checkpoint::DType::kF16 &&
        s.dtype != checkpoint::DType::kBF16) {
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
