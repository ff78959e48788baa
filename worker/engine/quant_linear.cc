#include "worker/engine/quant_linear.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "worker/checkpoint/quantization.h"
#include "worker/engine/compute_pool.h"
#include "worker/engine/quant_dequant.h"
#include "worker/engine/quant_matmul.h"

namespace nightshift::engine {
namespace {

using checkpoint::QuantFormat;
using checkpoint::QuantizedTensor;

at::TensorOptions FloatOptions() { return at::TensorOptions().dtype(at::kFloat); }

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

// On the host: the engine's own kernel (quant_matmul.h), the compute
// threads sharing the output tiles.
at::Tensor HostQuantLinear(const at::Tensor& x, const QuantView& v) {
  const QuantizedTensor& q = *v.q;
  const at::Tensor xc = x.contiguous();
  const int64_t rows = x.size(0);
  at::Tensor y = at::empty({rows, q.out}, FloatOptions());
  const int64_t tiles = (q.out + kQuantTileColumns - 1) / kQuantTileColumns;
  const Isa isa = ActiveIsa();
  ParallelFor(tiles, 1, [&](int64_t first, int64_t last) {
    QuantMatmul(v, xc.data_ptr<float>(), rows, first * kQuantTileColumns,
                std::min(last * kQuantTileColumns, q.out), y.data_ptr<float>(), q.out, isa);
  });
  return y;
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

at::Tensor QuantLinear(const at::Tensor& x, const Weight& w, const Weight& bias) {
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
  at::Tensor y = HostQuantLinear(x, v);
  if (bias) y.add_(ToFloat(bias));
  return y;
}

}  // namespace nightshift::engine
