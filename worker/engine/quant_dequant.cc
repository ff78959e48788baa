#include "worker/engine/quant_dequant.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "worker/checkpoint/quantization.h"
#include "worker/engine/convert.h"
#include "worker/engine/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "worker/engine/e4m3_x86.h"
#define NS_QUANT_X86 1
#endif

namespace nightshift::engine {
namespace {

using checkpoint::DType;
using checkpoint::QuantFormat;
using checkpoint::QuantizedTensor;

// AutoAWQ packs output column 8c + k in nibble kAwqNibble[k] of int32 c
// (its AWQ_ORDER 0,2,4,6,1,3,5,7 inverted: AWQ_REVERSE_ORDER).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int32_t LoadI32(const unsigned char* p, int64_t index) {
  int32_t v;
  std::memcpy(&v, p + index * 4, 4);
  return v;
}

int Nibble(int32_t packed, int nibble) {
  return static_cast<int>((static_cast<uint32_t>(packed) >> (4 * nibble)) & 0xf);
}

// One group's zero points and scales over a column range, as float32.
struct GroupRow {
  int64_t group = -1;
  std::vector<float> zeros;
  std::vector<float> scales;
};

void LoadGroup(const QuantView& w, int64_t group, int64_t c_begin, int64_t c_end, GroupRow* row) {
  const QuantizedTensor& q = *w.q;
  const int64_t n = c_end - c_begin;
  row->group = group;
  row->zeros.resize(static_cast<size_t>(n));
  row->scales.resize(static_cast<size_t>(n));
  const DType scale_dtype = q.parts[2].dtype;
  const size_t elem = checkpoint::DTypeSize(scale_dtype);
  ConvertToFloat(w.part[2] + (group * q.out + c_begin) * static_cast<int64_t>(elem), scale_dtype, n,
                 row->scales.data());
  const bool awq = q.format == QuantFormat::kAwq;
  for (int64_t c = c_begin; c < c_end; ++c) {
    const int32_t packed = LoadI32(w.part[1], group * (q.out / 8) + c / 8);
    const int k = static_cast<int>(c % 8);
    // GPTQ v1 stores zero - 1.
    row->zeros[static_cast<size_t>(c - c_begin)] =
        awq ? static_cast<float>(Nibble(packed, kAwqNibble[k]))
            : static_cast<float>(Nibble(packed, k) + 1);
  }
}

int64_t GroupOf(const QuantView& w, int64_t i) {
  const QuantizedTensor& q = *w.q;
  if (q.format == QuantFormat::kGptq && q.parts.size() > 3) return LoadI32(w.part[3], i);
  return i / q.group_size;
}

// Eight consecutive columns' quantized values of input row i, column 8c0..
void PortableRow(const QuantView& w, int64_t i, int64_t c_begin, int64_t c_end, const GroupRow& g,
                 float* out) {
  const QuantizedTensor& q = *w.q;
  const bool awq = q.format == QuantFormat::kAwq;
  for (int64_t c = c_begin; c < c_end; ++c) {
    int value;
    if (awq) {
      value = Nibble(LoadI32(w.part[0], i * (q.out / 8) + c / 8), kAwqNibble[c % 8]);
    } else {
      value = Nibble(LoadI32(w.part[0], (i / 8) * q.out + c), static_cast<int>(i % 8));
    }
    const size_t k = static_cast<size_t>(c - c_begin);
    out[k] = (static_cast<float>(value) - g.zeros[k]) * g.scales[k];
  }
}

#ifdef NS_QUANT_X86
#define NS_TARGET __attribute__((target("avx2,fma")))

NS_TARGET void Avx2Row(const QuantView& w, int64_t i, int64_t c_begin, int64_t c_end,
                       const GroupRow& g, float* out) {
  const QuantizedTensor& q = *w.q;
  const __m256i mask = _mm256_set1_epi32(0xf);
  if (q.format == QuantFormat::kAwq) {
    const __m256i shifts = _mm256_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28);
    const unsigned char* row = w.part[0] + i * (q.out / 8) * 4;
    for (int64_t c = c_begin; c < c_end; c += 8) {
      const __m256i packed = _mm256_set1_epi32(LoadI32(row, c / 8));
      const __m256 v =
          _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(packed, shifts), mask));
      const size_t k = static_cast<size_t>(c - c_begin);
      const __m256 d = _mm256_sub_ps(v, _mm256_loadu_ps(&g.zeros[k]));
      _mm256_storeu_ps(out + k, _mm256_mul_ps(d, _mm256_loadu_ps(&g.scales[k])));
    }
    return;
  }
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(4 * (i % 8)));
  const unsigned char* row = w.part[0] + (i / 8) * q.out * 4;
  for (int64_t c = c_begin; c < c_end; c += 8) {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 4));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(packed, shift), mask));
    const size_t k = static_cast<size_t>(c - c_begin);
    const __m256 d = _mm256_sub_ps(v, _mm256_loadu_ps(&g.zeros[k]));
    _mm256_storeu_ps(out + k, _mm256_mul_ps(d, _mm256_loadu_ps(&g.scales[k])));
  }
}

// out[k] = e4m3(bytes[k]) * scale for k < n.
NS_TARGET void Avx2Fp8(const unsigned char* bytes, int64_t n, const float* scale, bool per_element,
                       float* out) {
  const float* table = checkpoint::Fp8E4M3Table();
  int64_t k = 0;
  __m256 s = _mm256_set1_ps(scale[0]);
  for (; k + 8 <= n; k += 8) {
    uint64_t eight;
    std::memcpy(&eight, bytes + k, 8);
    const __m256 v = DecodeE4M3x8(_mm_cvtsi64_si128(static_cast<long long>(eight)));
    if (per_element) s = _mm256_loadu_ps(scale + k);
    _mm256_storeu_ps(out + k, _mm256_mul_ps(v, s));
  }
  for (; k < n; ++k) out[k] = table[bytes[k]] * scale[per_element ? k : 0];
}

bool DetectAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

void PortableFp8(const unsigned char* bytes, int64_t n, const float* scale, bool per_element,
                 float* out) {
  const float* table = checkpoint::Fp8E4M3Table();
  for (int64_t k = 0; k < n; ++k) out[k] = table[bytes[k]] * scale[per_element ? k : 0];
}

void Fp8(const unsigned char* bytes, int64_t n, const float* scale, bool per_element, float* out) {
#ifdef NS_QUANT_X86
  if (QuantDequantFast()) return Avx2Fp8(bytes, n, scale, per_element, out);
#endif
  PortableFp8(bytes, n, scale, per_element, out);
}

}  // namespace

QuantView::QuantView(const checkpoint::TensorInfo& info, const unsigned char* data)
    : q(info.quant.get()) {
  for (size_t k = 0; k < q->parts.size() && k < 4; ++k) part[k] = data + q->part_offsets[k];
}

bool QuantView::input_major() const {
  return q->format == QuantFormat::kAwq || q->format == QuantFormat::kGptq;
}

bool QuantDequantFast() {
#ifdef NS_QUANT_X86
  static const bool fast = DetectAvx2();
  return fast && IsaActive(Isa::kAvx2);
#else
  return false;
#endif
}

Status CheckScalesFinite(const QuantView& w) {
  const QuantizedTensor& q = *w.q;
  const size_t s = w.input_major() ? 2 : 1;
  const checkpoint::TensorInfo& t = q.parts[s];
  const int64_t n = t.numel();
  std::vector<float> buffer(static_cast<size_t>(std::min<int64_t>(n, 4096)));
  const size_t elem = checkpoint::DTypeSize(t.dtype);
  for (int64_t at = 0; at < n; at += static_cast<int64_t>(buffer.size())) {
    const int64_t m = std::min<int64_t>(n - at, static_cast<int64_t>(buffer.size()));
    ConvertToFloat(w.part[s] + at * static_cast<int64_t>(elem), t.dtype, m, buffer.data());
    float sum = 0;  // NaN or infinite when any is
    for (int64_t k = 0; k < m; ++k) sum += buffer[static_cast<size_t>(k)] * 0.0f;
    if (sum == 0) continue;
    for (int64_t k = 0; k < m; ++k) {
      if (!std::isfinite(buffer[static_cast<size_t>(k)])) {
        return DataLoss("tensor '" + t.name + "': scale " + std::to_string(at + k) + " is " +
                        std::to_string(buffer[static_cast<size_t>(k)]));
      }
    }
  }
  return Status::Ok();
}

Status CheckGroupIndex(const QuantView& w) {
  const QuantizedTensor& q = *w.q;
  if (q.format != QuantFormat::kGptq || q.parts.size() < 4) return Status::Ok();
  for (int64_t i = 0; i < q.in; ++i) {
    const int32_t g = LoadI32(w.part[3], i);
    if (g < 0 || g >= q.groups) {
      return DataLoss("tensor '" + q.parts[3].name + "': entry " + std::to_string(i) + " is " +
                      std::to_string(g) + ", outside the " + std::to_string(q.groups) + " groups");
    }
  }
  return Status::Ok();
}

void DequantInputRows(const QuantView& w, int64_t i_begin, int64_t i_end, int64_t c_begin,
                      int64_t c_end, float* out) {
  thread_local GroupRow group;
  group.group = -1;
  const int64_t n = c_end - c_begin;
  const bool fast = QuantDequantFast();
  for (int64_t i = i_begin; i < i_end; ++i) {
    const int64_t g = GroupOf(w, i);
    if (g != group.group) LoadGroup(w, g, c_begin, c_end, &group);
    float* row = out + (i - i_begin) * n;
#ifdef NS_QUANT_X86
    if (fast) {
      Avx2Row(w, i, c_begin, c_end, group, row);
      continue;
    }
#endif
    PortableRow(w, i, c_begin, c_end, group, row);
  }
  (void)fast;
}

void DequantOutputRows(const QuantView& w, int64_t o_begin, int64_t o_end, float* out) {
  const QuantizedTensor& q = *w.q;
  const checkpoint::TensorInfo& scale = q.parts[1];
  const size_t elem = checkpoint::DTypeSize(scale.dtype);
  const int64_t in = q.in;
  if (q.format == QuantFormat::kFp8Channel) {
    for (int64_t o = o_begin; o < o_end; ++o) {
      float s;
      ConvertToFloat(w.part[1] + o * static_cast<int64_t>(elem), scale.dtype, 1, &s);
      Fp8(w.part[0] + o * in, in, &s, false, out + (o - o_begin) * in);
    }
    return;
  }
  // Block scales: one row of them per block_out rows, one per block_in columns.
  const int64_t scale_columns = scale.shape[1];
  std::vector<float> scales(static_cast<size_t>(scale_columns));
  std::vector<float> expanded(static_cast<size_t>(in));
  int64_t loaded = -1;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const int64_t block_row = o / q.block_out;
    if (block_row != loaded) {
      ConvertToFloat(w.part[1] + block_row * scale_columns * static_cast<int64_t>(elem),
                     scale.dtype, scale_columns, scales.data());
      for (int64_t i = 0; i < in; ++i) {
        expanded[static_cast<size_t>(i)] = scales[static_cast<size_t>(i / q.block_in)];
      }
      loaded = block_row;
    }
    Fp8(w.part[0] + o * in, in, expanded.data(), true, out + (o - o_begin) * in);
  }
}

}  // namespace nightshift::engine
