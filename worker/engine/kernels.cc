#include "worker/engine/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "worker/engine/bf16_matmul.h"
#include "worker/engine/compute_pool.h"
#include "worker/engine/convert.h"
#include "worker/engine/decode_attention.h"
#include "worker/engine/dot_kernel.h"
#include "worker/engine/isa.h"
#include "worker/engine/quant_linear.h"
#include "worker/engine/small_matmul.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;

bool IsZeroCopy(const Weight& w) {
  return w.info->dtype == DType::kF32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
}

at::TensorOptions FloatOptions() { return at::TensorOptions().dtype(at::kFloat); }

// The calling thread's conversion block of [rows, columns] floats: one
// buffer grown as needed and kept, so that a pass does not allocate and free
// megabytes per projection (which leaves glibc's heap holding freed blocks).
at::Tensor ConversionScratch(int64_t rows, int64_t columns) {
  thread_local std::vector<float> buffer;
  const size_t floats = static_cast<size_t>(rows * columns);
  if (buffer.size() < floats) buffer.resize(floats);
  return at::from_blob(buffer.data(), {rows, columns}, FloatOptions());
}

}  // namespace

at::ScalarType MatmulDtype(const Weight& w) {
  if (w.info->dtype == DType::kBF16) return at::kBFloat16;
  if (w.info->dtype == DType::kF16 && w.device && w.device->is_cuda()) return at::kHalf;
  return at::kFloat;
}

at::ScalarType ScalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return at::kFloat;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kI32:
      return at::kInt;
    case DType::kF8E4M3:
    case DType::kU8:
      return at::kByte;  // FP8 has no libtorch 1.13 type: its bytes, decoded by quant_linear
    default:
      throw std::invalid_argument(std::string("no kernels for ") + checkpoint::DTypeName(dtype) +
                                  " tensors");
  }
}

at::Tensor WeightAs(const Weight& w, at::ScalarType dtype) {
  if (!w.device) {
    if (dtype != at::kFloat) throw std::invalid_argument("host weights are read as float32 only");
    return ToFloat(w);
  }
  const at::ScalarType stored = ScalarTypeOf(w.info->dtype);
  const at::TensorOptions options = at::TensorOptions().device(*w.device);
  void* data = const_cast<unsigned char*>(w.data);
  at::Tensor t;
  if (reinterpret_cast<uintptr_t>(data) % checkpoint::DTypeSize(w.info->dtype) == 0) {
    t = at::from_blob(data, w.info->shape, options.dtype(stored));
  } else {
    at::Tensor aligned =
        at::from_blob(data, {static_cast<int64_t>(w.info->size)}, options.dtype(at::kByte)).clone();
    t = at::from_blob(
        aligned.data_ptr(), w.info->shape, [aligned](void*) {}, options.dtype(stored));
  }
  return t.to(dtype);
}

void KeepFreedMemory() {
#if defined(__GLIBC__)
  static const bool set = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)set;
#endif
}

std::string OpenBlasCore() {
  using CoreName = char* (*)();
  const auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return name != nullptr ? name() : "";
}

void SetComputeThreads(int threads) {
  // ATen's OpenMP threads spin between its many small parallel regions and
  // OpenBLAS's pool competes with them for the same cores (measured: half of
  // a 64-sequence pass spent spinning and yielding). Both run one thread; the
  // projections are split on the compute pool instead.
  at::set_num_threads(1);
  SetComputePoolThreads(threads);
  KeepFreedMemory();
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
  }
}

at::Tensor ToFloat(const Weight& w) {
  const std::vector<int64_t>& shape = w.info->shape;
  if (IsZeroCopy(w)) {
    return at::from_blob(const_cast<unsigned char*>(w.data), shape, FloatOptions());
  }
  at::Tensor out = at::empty(shape, FloatOptions());
  ConvertToFloat(w.data, w.info->dtype, w.info->numel(), out.data_ptr<float>());
  return out;
}

namespace {

// Blocks of at most `block_bytes` of `elem`-byte values per row of `in`, and
// at least two per compute thread.
int64_t BlockRows(int64_t out_features, int64_t in_features, int64_t elem, int64_t block_bytes) {
  const int64_t per_thread = (out_features + 2 * ComputePoolThreads() - 1) /
                             (2 * static_cast<int64_t>(ComputePoolThreads()));
  return std::clamp<int64_t>(std::min(block_bytes / (in_features * elem), per_thread), 1,
                             out_features);
}

at::Tensor SmallLinear(const at::Tensor& x, const Weight& w) {
  const int64_t out_features = w.info->shape[0];
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({x.size(0), out_features}, FloatOptions());
  ParallelFor(out_features, 64, [&](int64_t begin, int64_t end) {
    SmallMatmul(xc.data_ptr<float>(), x.size(0), w.info->shape[1], w.data, w.info->dtype, begin,
                end, y.data_ptr<float>(), out_features);
  });
  return y;
}

at::Tensor GemmLinear(const at::Tensor& x, const Weight& w, int64_t block_bytes) {
  if (IsZeroCopy(w)) return at::linear(x, ToFloat(w));
  const int64_t out_features = w.info->shape[0];
  const int64_t in_features = w.info->shape[1];
  const int64_t elem = static_cast<int64_t>(checkpoint::DTypeSize(w.info->dtype));
  const int64_t block = BlockRows(out_features, in_features, 4, block_bytes);
  const int64_t blocks = (out_features + block - 1) / block;
  // y^T = W x^T, block by block: each block of weight rows fills contiguous
  // rows of y^T. The compute threads share the blocks, each converting into
  // its own scratch and multiplying single-threaded (see SetComputeThreads).
  at::Tensor yt = at::empty({out_features, x.size(0)}, FloatOptions());
  const at::Tensor xt = x.t();
  ParallelFor(blocks, 1, [&](int64_t first, int64_t last) {
    at::Tensor scratch = ConversionScratch(block, in_features);
    for (int64_t b = first; b < last; ++b) {
      const int64_t row = b * block;
      const int64_t n = std::min(block, out_features - row);
      ConvertToFloat(w.data + row * in_features * elem, w.info->dtype, n * in_features,
                     scratch.data_ptr<float>());
      at::Tensor out_rows = yt.narrow(0, row, n);
      at::mm_out(out_rows, scratch.narrow(0, 0, n), xt);
    }
  });
  return yt.t().contiguous();
}

// The calling thread's BF16 conversion block, as ConversionScratch.
at::Tensor Bf16Scratch(int64_t rows, int64_t columns) {
  thread_local std::vector<uint16_t> buffer;
  const size_t values = static_cast<size_t>(rows * columns);
  if (buffer.size() < values) buffer.resize(values);
  return at::from_blob(buffer.data(), {rows, columns}, at::TensorOptions().dtype(at::kBFloat16));
}

// ATen's intra-op threads are a per-thread OpenMP setting: a compute pool
// thread would otherwise run oneDNN on every core, on top of its siblings.
void OneAtenThreadHere() {
  thread_local bool set = false;
  if (!set) {
    at::set_num_threads(1);
    set = true;
  }
}

// What the accelerator path does on a device, on the CPU: x rounded to
// BF16, the product in BF16 (oneDNN, accumulating in float32), widened back.
// Each compute thread multiplies its own blocks of weight rows: BF16 weights
// in place (when 2-byte aligned), others converted to BF16 first.
at::Tensor Bf16Linear(const at::Tensor& x, const Weight& w, int64_t block_bytes) {
  const int64_t out_features = w.info->shape[0];
  const int64_t in_features = w.info->shape[1];
  const int64_t elem = static_cast<int64_t>(checkpoint::DTypeSize(w.info->dtype));
  const bool in_place =
      w.info->dtype == DType::kBF16 && reinterpret_cast<uintptr_t>(w.data) % alignof(uint16_t) == 0;
  const int64_t threads = ComputePoolThreads();
  const int64_t block = in_place ? (out_features + threads - 1) / threads
                                 : BlockRows(out_features, in_features, 2, block_bytes);
  const int64_t blocks = (out_features + block - 1) / block;
  const at::Tensor xb = x.to(at::kBFloat16).contiguous();
  // y^T in BF16, as GemmLinear: contiguous rows per block.
  at::Tensor yt = at::empty({out_features, x.size(0)}, xb.options());
  const at::Tensor xt = xb.t();
  ParallelFor(blocks, 1, [&](int64_t first, int64_t last) {
    OneAtenThreadHere();
    at::Tensor scratch = in_place ? at::Tensor() : Bf16Scratch(block, in_features);
    for (int64_t b = first; b < last; ++b) {
      const int64_t row = b * block;
      const int64_t n = std::min(block, out_features - row);
      const unsigned char* data = w.data + row * in_features * elem;
      at::Tensor weights;
      if (in_place) {
        weights = at::from_blob(const_cast<unsigned char*>(data), {n, in_features},
                                at::TensorOptions().dtype(at::kBFloat16));
      } else {
        ConvertToBFloat16(data, w.info->dtype, n * in_features,
                          static_cast<uint16_t*>(scratch.data_ptr()));
        weights = scratch.narrow(0, 0, n);
      }
      at::Tensor out_rows = yt.narrow(0, row, n);
      at::mm_out(out_rows, weights, xt);
    }
  });
  return yt.t().to(at::kFloat).contiguous();
}

// Float32 through the engine's batch-invariant dot kernel (dot_kernel.h):
// the compute threads share blocks of weight rows.
at::Tensor DotLinear(const at::Tensor& x, const Weight& w) {
  const int64_t out_features = w.info->shape[0];
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({x.size(0), out_features}, FloatOptions());
  const Isa isa = ActiveIsa();
  constexpr int64_t kRowsPerTask = 4 * kDotOutputs;
  ParallelFor((out_features + kRowsPerTask - 1) / kRowsPerTask, 1, [&](int64_t begin, int64_t end) {
    DotMatmul(xc.data_ptr<float>(), x.size(0), w.info->shape[1], w.data, w.info->dtype,
              begin * kRowsPerTask, std::min(end * kRowsPerTask, out_features), y.data_ptr<float>(),
              out_features, isa);
  });
  return y;
}

// The same product through the engine's AVX512-BF16 kernel (bf16_matmul.h):
// x packed once, then the compute threads share tiles of weight rows.
at::Tensor Bf16TileLinear(const at::Tensor& x, const Weight& w) {
  const int64_t rows = x.size(0);
  const int64_t out_features = w.info->shape[0];
  const int64_t in_features = w.info->shape[1];
  const at::Tensor xc = x.contiguous();
  // The calling thread's buffer (a thread_local named inside the lambdas
  // would be each pool thread's own).
  thread_local std::vector<uint32_t> buffer;
  buffer.resize(static_cast<size_t>(Bf16PackedSize(rows, in_features)));
  uint32_t* packed = buffer.data();
  ParallelFor(Bf16Panels(rows), 1, [&](int64_t begin, int64_t end) {
    PackBf16Activations(xc.data_ptr<float>(), rows, in_features, begin, end, packed);
  });
  at::Tensor y = at::empty({rows, out_features}, FloatOptions());
  const int64_t rows_per_task = Bf16MatmulBlockRows(rows);  // threads share the weight rows
  ParallelFor(
      (out_features + rows_per_task - 1) / rows_per_task, 1, [&](int64_t begin, int64_t end) {
        Bf16Matmul(packed, rows, in_features, w.data, w.info->dtype, begin * rows_per_task,
                   std::min(end * rows_per_task, out_features), y.data_ptr<float>(), out_features);
      });
  return y;
}

}  // namespace

at::Tensor Linear(const at::Tensor& x, const Weight& w, const Weight& bias, int64_t block_bytes) {
  if (w.info->quant) return QuantLinear(x, w, bias);  // quant_linear.h
  if (w.device) {
    const at::ScalarType dtype = MatmulDtype(w);
    at::Tensor y = at::linear(x.to(dtype), WeightAs(w, dtype)).to(x.scalar_type());
    if (bias) y.add_(WeightAs(bias, x.scalar_type()));
    return y;
  }
  const int64_t rows = x.size(0);
  const ProjectionKernel* kernel = w.plan ? &(*w.plan)[RowBucket(rows)] : nullptr;
  // F32 weights stay float32 under BF16, as on the accelerator path
  // (MatmulDtype): the float32 path as without a plan, or the invariant
  // float32 kernel under an invariant plan.
  static constexpr ProjectionKernel kTile = ProjectionKernel::kF32Tile;
  if (kernel && IsBf16Kernel(*kernel) && w.info->dtype == DType::kF32) {
    kernel = IsInvariantPlan(*w.plan) ? &kTile : nullptr;
  }
  at::Tensor y;
  if (kernel == nullptr) {
    // Float32 as before the plans: zero-copy weights straight to the GEMM.
    if (IsZeroCopy(w)) return at::linear(x, ToFloat(w), bias ? ToFloat(bias) : at::Tensor());
    y = rows <= kSmallMatmulMaxRows && SmallMatmulFast() ? SmallLinear(x, w)
                                                         : GemmLinear(x, w, block_bytes);
  } else {
    switch (*kernel) {
      case ProjectionKernel::kBf16Gemm:
        y = Bf16Linear(x, w, block_bytes);
        break;
      case ProjectionKernel::kBf16Avx512:
        // Where the CPU lacks AVX512-BF16 (a plan made elsewhere): oneDNN.
        y = Bf16MatmulSupported() ? Bf16TileLinear(x, w) : Bf16Linear(x, w, block_bytes);
        break;
      case ProjectionKernel::kF32Small:
        y = SmallLinear(x, w);  // plain loops where the CPU lacks AVX2/FMA/F16C
        break;
      case ProjectionKernel::kF32Gemm:
        y = GemmLinear(x, w, block_bytes);
        break;
      case ProjectionKernel::kF32Tile:
        y = DotLinear(x, w);
        break;
    }
  }
  if (bias) y.add_(ToFloat(bias));
  return y;
}

at::Tensor Norm(const at::Tensor& x, NormKind kind, const Weight& weight, const Weight& bias,
                double eps) {
  at::Tensor w = WeightAs(weight, at::kFloat);
  if (kind == NormKind::kLayerNorm) {
    return at::layer_norm(x, {x.size(-1)}, w, bias ? WeightAs(bias, at::kFloat) : at::Tensor(),
                          eps);
  }
  at::Tensor normed = x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return kind == NormKind::kRmsUnitOffset ? normed * (w + 1.0) : w * normed;
}

namespace {

at::Tensor ActivateAll(const at::Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::kSilu:
      return at::silu(x);
    case Activation::kGeluErf:
      return at::gelu(x);
    case Activation::kGeluTanh:
      return at::gelu(x, "tanh");
  }
  return x;
}

}  // namespace

at::Tensor Activate(const at::Tensor& x, Activation activation) {
  // ATen runs an elementwise op over a contiguous tensor as one flat array:
  // vector code (Sleef's exp, erf, tanh) two vectors at a time, plain libm
  // calls for the last (numel mod 2 vectors) elements, whose results can
  // differ in the last bit. Rows as wide as a multiple of 64 floats have no
  // such tail whatever their number; narrower ones are run a row at a time,
  // so that which elements take the plain path depends on the row alone,
  // never on how many rows the pass has (batch invariance).
  if (x.dim() != 2 || x.size(1) % 64 == 0 || !x.is_cpu()) return ActivateAll(x, activation);
  at::Tensor out = at::empty_like(x);
  for (int64_t t = 0; t < x.size(0); ++t)
    out.select(0, t).copy_(ActivateAll(x.select(0, t), activation));
  return out;
}

at::Tensor Sigmoid(const at::Tensor& x) {
  if (!x.is_cpu() || x.scalar_type() != at::kFloat) return at::sigmoid(x);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* v = in.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < in.numel(); ++i) o[i] = 1.0f / (1.0f + std::exp(-v[i]));
  return out;
}

at::Tensor GatherRows(const Weight& table, const std::vector<int64_t>& ids) {
  const int64_t width = table.info->shape[1];
  const int64_t row_bytes = width * static_cast<int64_t>(checkpoint::DTypeSize(table.info->dtype));
  at::Tensor out = at::empty({static_cast<int64_t>(ids.size()), width}, FloatOptions());
  float* dst = out.data_ptr<float>();
  for (size_t i = 0; i < ids.size(); ++i) {
    ConvertToFloat(table.data + ids[i] * row_bytes, table.info->dtype, width,
                   dst + static_cast<int64_t>(i) * width);
  }
  return out;
}

RopeAngles ComputeRopeAngles(const std::vector<float>& inv_freq,
                             const std::vector<int64_t>& positions) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  at::Tensor freqs = at::empty({static_cast<int64_t>(positions.size()), half}, FloatOptions());
  float* f = freqs.data_ptr<float>();
  for (size_t t = 0; t < positions.size(); ++t) {
    // transformers: float(position) * inv_freq in float32.
    const float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i)
      f[static_cast<int64_t>(t) * half + i] = position * inv_freq[i];
  }
  // cos and sin one value at a time (libm): ATen's vector code and its
  // plain tail could round a position's angles differently depending on
  // how many rows the micro-batch has.
  const int64_t rows = static_cast<int64_t>(positions.size());
  at::Tensor cos = at::empty({rows, 2 * half}, FloatOptions());
  at::Tensor sin = at::empty({rows, 2 * half}, FloatOptions());
  float* c = cos.data_ptr<float>();
  float* s = sin.data_ptr<float>();
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = f[t * half + i];
      c[t * 2 * half + i] = c[t * 2 * half + half + i] = std::cos(angle);
      s[t * 2 * half + i] = s[t * 2 * half + half + i] = std::sin(angle);
    }
  }
  return {cos, sin};
}

at::Tensor ApplyRope(const at::Tensor& x, const RopeAngles& angles) {
  const int64_t rotary = angles.cos.size(1);
  const int64_t half = rotary / 2;
  at::Tensor rot = x.narrow(2, 0, rotary);
  at::Tensor rotated_half = at::cat({-rot.narrow(2, half, half), rot.narrow(2, 0, half)}, 2);
  at::Tensor out = rot * angles.cos.unsqueeze(1) + rotated_half * angles.sin.unsqueeze(1);
  if (rotary == x.size(2)) return out;
  return at::cat({out, x.narrow(2, rotary, x.size(2) - rotary)}, 2);
}

namespace {

// Attention for rows whose scores fit in memory at once. With `parallel`,
// the KV heads are split across the compute pool: ATen runs one thread
// (SetComputeThreads), and a 1024-token prefill of bench-1.7b spent a sixth
// of its time in attention's products on one core. Every buffer is
// allocated here, on the calling thread, and the pool's threads only write
// into their heads' slices: a block malloc'd on a pool thread lives in that
// thread's arena, which glibc keeps (KeepFreedMemory) apart from the main
// one, and so raised a long-prompt pass's peak by 12-14 MB.
at::Tensor AttentionRows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                         const at::Tensor& allowed, double scale, bool parallel) {
  const int64_t rows = q.size(0);
  const int64_t heads = q.size(1);
  const int64_t dim = q.size(2);
  const int64_t kv_heads = keys.size(0);
  const int64_t group = heads / kv_heads;
  const int64_t length = keys.size(1);
  // [rows, kv, group, d] -> [kv, group * rows, d]: one batched product per KV head.
  const at::Tensor grouped = q.reshape({rows, kv_heads, group, dim})
                                 .permute({1, 2, 0, 3})
                                 .reshape({kv_heads, group * rows, dim});
  const at::Tensor refused = allowed.defined() ? allowed.logical_not() : at::Tensor();
  // The scores are scaled and masked in place: two score matrices (scores
  // and their softmax) are alive at once.
  at::Tensor scores = at::empty({kv_heads, group * rows, length}, q.options());
  at::Tensor probs = at::empty_like(scores);
  at::Tensor out = at::empty({kv_heads, group * rows, dim}, q.options());
  auto attend = [&](int64_t first, int64_t last) {
    const int64_t n = last - first;
    at::Tensor s = scores.narrow(0, first, n);
    at::bmm_out(s, grouped.narrow(0, first, n), keys.narrow(0, first, n).transpose(1, 2));
    s.mul_(scale);
    if (refused.defined()) {
      s.view({n, group, rows, length})
          .masked_fill_(refused, -std::numeric_limits<float>::infinity());
    }
    at::Tensor p = probs.narrow(0, first, n);
    at::softmax_out(p, s, -1);
    at::Tensor o = out.narrow(0, first, n);
    at::bmm_out(o, p, values.narrow(0, first, n));
  };
  if (parallel) {
    std::mutex mutex;
    std::exception_ptr error;
    ParallelFor(kv_heads, 1, [&](int64_t first, int64_t last) {
      try {
        attend(first, last);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
  } else {
    attend(0, kv_heads);
  }
  scores.reset();
  probs.reset();
  return out.view({kv_heads, group, rows, dim}).permute({2, 0, 1, 3}).reshape({rows, heads * dim});
}

// AttentionRows, its KV heads split across the compute pool when the chunk
// is large enough (a prefill's micro-batch) and on the CPU.
at::Tensor AttentionChunk(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                          const at::Tensor& allowed, double scale) {
  const int64_t flops = 4 * q.size(0) * q.size(1) * keys.size(1) * q.size(2);
  const bool parallel = q.is_cpu() && keys.size(0) > 1 && ComputePoolThreads() > 1 &&
                        flops >= kParallelAttentionFlops;
  return AttentionRows(q, keys, values, allowed, scale, parallel);
}

}  // namespace

at::Tensor Attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const at::Tensor& allowed, double scale, int64_t max_score_bytes) {
  const int64_t rows = q.size(0);
  const int64_t row_bytes = q.size(1) * keys.size(1) * static_cast<int64_t>(sizeof(float));
  const int64_t chunk = std::max<int64_t>(1, max_score_bytes / row_bytes);
  if (rows <= chunk) return AttentionChunk(q, keys, values, allowed, scale);
  at::Tensor out = at::empty({rows, q.size(1) * q.size(2)}, q.options());
  for (int64_t row = 0; row < rows; row += chunk) {
    const int64_t n = std::min(chunk, rows - row);
    out.narrow(0, row, n).copy_(
        AttentionChunk(q.narrow(0, row, n), keys, values,
                       allowed.defined() ? allowed.narrow(0, row, n) : allowed, scale));
  }
  return out;
}

namespace {

// Rows of one cache attended together (AttendDecodeRows).
constexpr size_t kRowsAtOnce = 8;

// Whether DecodeAttention can read `t` [kv_heads, L, d] in place.
bool DecodeReadable(const at::Tensor& t) {
  return t.is_cpu() && t.scalar_type() == at::kFloat && t.stride(2) == 1;
}

}  // namespace

void AttendDecodeRows(const at::Tensor& q, const std::vector<DecodeRow>& rows, double scale,
                      at::Tensor& out) {
  bool own = q.is_cpu() && q.scalar_type() == at::kFloat && out.is_cpu() && out.is_contiguous();
  for (const DecodeRow& r : rows) {
    own = own && DecodeReadable(r.keys) && DecodeReadable(r.values);
    if (r.shared > 0 && !(DecodeReadable(r.shared_keys) && DecodeReadable(r.shared_values))) {
      throw std::invalid_argument(
          "AttendDecodeRows: shared keys are read in place only from float32 caches on the CPU");
    }
  }
  if (!own) {
    for (const DecodeRow& r : rows) {
      if (r.shared > 0) {
        throw std::invalid_argument(
            "AttendDecodeRows: a row over shared keys needs float32 queries and outputs on the "
            "CPU");
      }
      at::Tensor keys = r.keys, values = r.values;
      if (r.key_rows != nullptr) {
        const at::Tensor index =
            at::from_blob(const_cast<int32_t*>(r.key_rows), {r.length}, at::kInt)
                .to(keys.device(), at::kLong);
        keys = keys.index_select(1, index);
        values = values.index_select(1, index);
      }
      out.narrow(0, r.row, 1).copy_(Attention(q.narrow(0, r.row, 1), keys, values, {}, scale));
    }
    return;
  }
  const at::Tensor qc = q.contiguous();  // [rows, heads, d]
  const int64_t heads = q.size(1), dim = q.size(2);
  // Consecutive rows over one cache (a prompt's, each seeing a longer
  // prefix of it) go to the kernel together, up to kRowsAtOnce at a time, so
  // each key and value is read once for all of them; each row's output is
  // still bitwise its own (decode_attention.h).
  struct Block {
    DecodeAttentionShape shape;  // length: the block's longest row's
    size_t first = 0, count = 0;
  };
  std::vector<Block> blocks;
  std::vector<int64_t> lengths;
  lengths.reserve(rows.size());
  int64_t scratch_floats = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const DecodeRow& r = rows[i];
    DecodeAttentionShape s;
    s.heads = heads;
    s.kv_heads = r.keys.size(0);
    s.dim = dim;
    s.length = r.key_rows != nullptr ? r.length : r.keys.size(1);
    s.head_stride = r.keys.stride(0);
    s.key_stride = r.keys.stride(1);
    s.key_rows = r.key_rows;
    if (r.values.stride(0) != s.head_stride || r.values.stride(1) != s.key_stride) {
      throw std::invalid_argument("AttendDecodeRows: keys and values laid out differently");
    }
    if (r.shared > 0) {
      s.length += r.shared;
      s.shared = r.shared;
      s.shared_keys = r.shared_keys.data_ptr<float>();
      s.shared_values = r.shared_values.data_ptr<float>();
      s.shared_head_stride = r.shared_keys.stride(0);
      s.shared_rows = r.shared_rows;
      if (r.shared_keys.stride(1) != s.key_stride || r.shared_values.stride(1) != s.key_stride ||
          r.shared_values.stride(0) != s.shared_head_stride) {
        throw std::invalid_argument("AttendDecodeRows: shared keys laid out differently");
      }
    }
    lengths.push_back(s.length);
    const DecodeRow* previous = i == 0 ? nullptr : &rows[i - 1];
    const bool same_cache =
        previous != nullptr && blocks.back().count < kRowsAtOnce &&
        previous->keys.data_ptr() == r.keys.data_ptr() &&
        previous->values.data_ptr() == r.values.data_ptr() && previous->key_rows == r.key_rows &&
        previous->shared_rows == r.shared_rows && blocks.back().shape.kv_heads == s.kv_heads &&
        blocks.back().shape.head_stride == s.head_stride &&
        blocks.back().shape.key_stride == s.key_stride;
    if (same_cache) {
      Block& b = blocks.back();
      b.shape.length = std::max(b.shape.length, s.length);
      ++b.count;
    } else {
      blocks.push_back({s, i, 1});
    }
    const Block& b = blocks.back();
    scratch_floats = std::max(scratch_floats,
                              DecodeAttentionRowsScratch(b.shape, static_cast<int64_t>(b.count)));
  }
  // Every thread's scores in one block, allocated here (see AttentionRows).
  const int64_t threads = ComputePoolThreads();
  at::Tensor scratch = at::empty({threads, scratch_floats}, FloatOptions());
  const float* qp = qc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* sp = scratch.data_ptr<float>();
  const int64_t row_floats = heads * dim;
  const int64_t n = static_cast<int64_t>(blocks.size());
  // A prompt's later blocks see more keys: the threads' contiguous ranges
  // take blocks from both ends in turn (0, n-1, 1, n-2, ...), so each gets
  // about the same work.
  auto nth = [n](int64_t i) { return i % 2 == 0 ? i / 2 : n - 1 - i / 2; };
  std::atomic<int64_t> next_scratch{0};  // one range per thread, at most `threads`
  const int64_t grain = n == static_cast<int64_t>(rows.size()) ? 2 : 1;
  ParallelFor(n, grain, [&](int64_t first, int64_t last) {
    float* mine = sp + next_scratch.fetch_add(1) * scratch_floats;
    const float* qs[kRowsAtOnce];
    float* outs[kRowsAtOnce];
    for (int64_t i = first; i < last; ++i) {
      const Block& b = blocks[static_cast<size_t>(nth(i))];
      for (size_t k = 0; k < b.count; ++k) {
        const int64_t row = rows[b.first + k].row;
        qs[k] = qp + row * row_floats;
        outs[k] = op + row * row_floats;
      }
      const DecodeRow& r = rows[b.first];
      DecodeAttentionRows(b.shape, static_cast<int64_t>(b.count), lengths.data() + b.first, qs,
                          r.keys.data_ptr<float>(), r.values.data_ptr<float>(),
                          static_cast<float>(scale), mine, outs);
    }
  });
}

at::Tensor CausalMask(int64_t past, int64_t rows) {
  at::Tensor key = at::arange(past + rows, at::TensorOptions().dtype(at::kLong));
  at::Tensor query = at::arange(past, past + rows, at::TensorOptions().dtype(at::kLong));
  return key.unsqueeze(0) <= query.unsqueeze(1);
}

}  // namespace nightshift::engine
