#include "worker/engine/quant_linear.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "worker/checkpoint/quantization.h"
#include "worker/engine/compute_pool.h"
#include "worker/engine/quant_dequant.h"
#include "worker/engine/small_matmul.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;
using checkpoint::QuantFormat;
using checkpoint::QuantizedTensor;

at::TensorOptions FloatOptions() { return at::TensorOptions().dtype(at::kFloat); }

// The calling thread's scratch of `floats` floats, grown as needed and kept.
float* Scratch(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

void ThrowIfError(const Status& status) {
  if (!status.ok()) throw std::invalid_argument(status.message());
}

// Part `k` of a device weight as a tensor of its stored dtype and shape, a
// view of the staged bytes (copied to aligned memory first when they are
// not aligned to the element size).
at::Tensor DevicePart(const Weight& w, size_t k) {
  const QuantizedTensor& q = *w.info->quant;
  const checkpoint::TensorInfo& part = q.parts[k];
  const at::TensorOptions options =
      at::TensorOptions().device(*w.device).dtype(ScalarTypeOf(part.dtype));
  void* data = const_cast<unsigned char*>(w.data + q.part_offsets[k]);
  if (reinterpret_cast<uintptr_t>(data) % checkpoint::DTypeSize(part.dtype) == 0) {
    return at::from_blob(data, part.shape, options);
  }
  at::Tensor aligned =
      at::from_blob(data, {static_cast<int64_t>(part.size)}, options.dtype(at::kByte)).clone();
  return at::from_blob(
      aligned.data_ptr(), part.shape, [aligned](void*) {}, options);
}

// Unpacks int32 nibbles along the last dimension: [..., n] -> [..., 8n],
// element 8c + k from nibble nibble_of[k] of int32 c.
at::Tensor UnpackLast(const at::Tensor& packed, const std::vector<int>& nibble_of) {
  std::vector<int32_t> shifts;
  for (int n : nibble_of) shifts.push_back(4 * n);
  at::Tensor s = at::tensor(shifts, at::TensorOptions().dtype(at::kInt)).to(packed.device());
  std::vector<int64_t> shape = packed.sizes().vec();
  shape.back() *= 8;
  return packed.unsqueeze(-1).__rshift__(s).bitwise_and(0xf).reshape(shape);
}

at::Tensor DequantizeOnDevice(const Weight& w, at::ScalarType dtype) {
  const QuantizedTensor& q = *w.info->quant;
  const at::Device device = *w.device;
  switch (q.format) {
    case QuantFormat::kAwq:
    case QuantFormat::kGptq: {
      const bool awq = q.format == QuantFormat::kAwq;
      at::Tensor values;  // [in, out]
      at::Tensor zeros;   // [groups, out]
      if (awq) {
        const std::vector<int> order = {0, 4, 1, 5, 2, 6, 3, 7};
        values = UnpackLast(DevicePart(w, 0), order);
        zeros = UnpackLast(DevicePart(w, 1), order);
      } else {
        const std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7};
        // qweight [in/8, out]: input row 8r + j in nibble j of row r.
        at::Tensor shifts =
            at::arange(0, 32, 4, at::TensorOptions().dtype(at::kInt)).to(device).view({1, 8, 1});
        values = DevicePart(w, 0).unsqueeze(1).__rshift__(shifts).bitwise_and(0xf).reshape(
            {q.in, q.out});
        zeros = UnpackLast(DevicePart(w, 1), order) + 1;  // v1 stores zero - 1
      }
      at::Tensor scales = DevicePart(w, 2).to(dtype);
      at::Tensor group_of;
      if (!awq && q.parts.size() > 3) {
        group_of = DevicePart(w, 3).to(at::kLong);
      } else {
        group_of = at::arange(q.in, at::TensorOptions().dtype(at::kLong).device(device))
                       .div(q.group_size, "floor");
      }
      at::Tensor wt =
          (values - zeros.index_select(0, group_of)).to(dtype) * scales.index_select(0, group_of);
      return wt.t();
    }
    case QuantFormat::kFp8Channel:
    case QuantFormat::kFp8Block: {
      at::Tensor table =
          at::from_blob(const_cast<float*>(checkpoint::Fp8E4M3Table()), {256}, FloatOptions())
              .to(device);
      at::Tensor values =
          table.index_select(0, DevicePart(w, 0).reshape({-1}).to(at::kLong)).view({q.out, q.in});
      at::Tensor scale = DevicePart(w, 1).to(at::kFloat);
      if (q.format == QuantFormat::kFp8Channel) {
        scale = scale.reshape({q.out, 1});
      } else {
        scale = scale.repeat_interleave(q.block_out, 0)
                    .narrow(0, 0, q.out)
                    .repeat_interleave(q.block_in, 1)
                    .narrow(1, 0, q.in);
      }
      return (values * scale).to(dtype);
    }
    case QuantFormat::kNone:
      break;
  }
  throw std::invalid_argument("tensor '" + w.info->name + "' is not quantized");
}

// AWQ/GPTQ on the host: each compute thread owns ranges of output columns
// and accumulates x's input blocks times the decoded W^T blocks.
at::Tensor InputMajorLinear(const at::Tensor& x, const QuantView& v, int64_t block_bytes) {
  const QuantizedTensor& q = *v.q;
  const at::Tensor xc = x.contiguous();
  const int64_t rows = x.size(0);
  at::Tensor y = at::empty({rows, q.out}, FloatOptions());
  // Column ranges (multiples of 8), at least two per thread.
  const int64_t threads = ComputePoolThreads();
  const int64_t columns =
      std::max<int64_t>(8, ((q.out + 2 * threads - 1) / (2 * threads) + 7) / 8 * 8);
  const int64_t ranges = (q.out + columns - 1) / columns;
  const int64_t block_floats = std::max<int64_t>(block_bytes / 4, 8);
  ParallelFor(ranges, 1, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t c0 = r * columns;
      const int64_t n = std::min(columns, q.out - c0);
      const int64_t block = std::clamp<int64_t>(block_floats / n, 1, q.in);
      float* scratch = Scratch(static_cast<size_t>(block * n));
      at::Tensor acc = at::zeros({rows, n}, FloatOptions());
      for (int64_t i0 = 0; i0 < q.in; i0 += block) {
        const int64_t m = std::min(block, q.in - i0);
        DequantInputRows(v, i0, i0 + m, c0, c0 + n, scratch);
        acc.addmm_(xc.narrow(1, i0, m), at::from_blob(scratch, {m, n}, FloatOptions()));
      }
      y.narrow(1, c0, n).copy_(acc);
    }
  });
  return y;
}

// FP8 on the host: blocks of output rows, each decoded then multiplied into
// its rows of y^T.
at::Tensor OutputMajorLinear(const at::Tensor& x, const QuantView& v, int64_t block_bytes) {
  const QuantizedTensor& q = *v.q;
  const int64_t threads = ComputePoolThreads();
  const int64_t per_thread = (q.out + 2 * threads - 1) / (2 * threads);
  const int64_t block =
      std::clamp<int64_t>(std::min(block_bytes / (q.in * 4), per_thread), 1, q.out);
  const int64_t blocks = (q.out + block - 1) / block;
  // A few rows (decode): each decoded block, still in cache, is multiplied
  // by small_matmul.h's kernel straight into y [T, out]; more: a GEMM per
  // block into its rows of y^T [out, T].
  const bool small = x.size(0) <= kSmallMatmulMaxRows && SmallMatmulFast();
  const at::Tensor xc = x.contiguous();
  const at::Tensor xt = x.t();
  at::Tensor y = small ? at::empty({x.size(0), q.out}, FloatOptions())
                       : at::empty({q.out, x.size(0)}, FloatOptions());
  ParallelFor(blocks, 1, [&](int64_t first, int64_t last) {
    float* scratch = Scratch(static_cast<size_t>(block * q.in));
    for (int64_t b = first; b < last; ++b) {
      const int64_t row = b * block;
      const int64_t n = std::min(block, q.out - row);
      DequantOutputRows(v, row, row + n, scratch);
      if (small) {
        SmallMatmul(xc.data_ptr<float>(), x.size(0), q.in, scratch, DType::kF32, 0, n,
                    y.data_ptr<float>() + row, q.out);
      } else {
        at::Tensor out_rows = y.narrow(0, row, n);
        at::mm_out(out_rows, at::from_blob(scratch, {n, q.in}, FloatOptions()), xt);
      }
    }
  });
  return small ? y : y.t().contiguous();
}

}  // namespace

at::Tensor DequantizeWeight(const Weight& w, at::ScalarType dtype) {
  if (w.device) return DequantizeOnDevice(w, dtype);
  if (dtype != at::kFloat) throw std::invalid_argument("host weights are dequantised to float32");
  const QuantView v(*w.info, w.data);
  ThrowIfError(CheckGroupIndex(v));
  const QuantizedTensor& q = *v.q;
  if (v.input_major()) {
    at::Tensor wt = at::empty({q.in, q.out}, FloatOptions());
    DequantInputRows(v, 0, q.in, 0, q.out, wt.data_ptr<float>());
    return wt.t().contiguous();
  }
  at::Tensor out = at::empty({q.out, q.in}, FloatOptions());
  DequantOutputRows(v, 0, q.out, out.data_ptr<float>());
  return out;
}

at::Tensor QuantLinear(const at::Tensor& x, const Weight& w, const Weight& bias,
                       int64_t block_bytes) {
  if (w.device) {
    // F16 where the device multiplies it (CUDA), else float32 (MatmulDtype's rule for F16).
    const at::ScalarType dtype = w.device->is_cuda() ? at::kHalf : at::kFloat;
    at::Tensor y = at::linear(x.to(dtype), DequantizeOnDevice(w, dtype)).to(x.scalar_type());
    if (bias) y.add_(WeightAs(bias, x.scalar_type()));
    return y;
  }
  const QuantView v(*w.info, w.data);
  ThrowIfError(CheckScalesFinite(v));
  ThrowIfError(CheckGroupIndex(v));
  const int64_t block = std::min(block_bytes, kQuantBlockBytes);
  at::Tensor y = v.input_major() ? InputMajorLinear(x, v, block) : OutputMajorLinear(x, v, block);
  if (bias) y.add_(ToFloat(bias));
  return y;
}

}  // namespace nightshift::engine
