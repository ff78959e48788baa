#include "worker/engine/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "worker/checkpoint/quantization.h"
#include "worker/engine/convert.h"
#include "worker/engine/dot_kernel.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics pass an undefined vector through (GCC bug
// 105593, fixed in 13): -W(maybe-)uninitialized fires inside its own headers
// at -O3. The maskz forms bf16_matmul.cc uses avoid it one intrinsic at a
// time; here nothing is masked, so the warning is off for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "worker/engine/e4m3_x86.h"
#define NS_QMM_X86 1
#endif

namespace nightshift::engine {
namespace {

using checkpoint::QuantFormat;
using checkpoint::QuantizedTensor;

constexpr int64_t kTile = kQuantTileColumns;  // int4: output columns per panel
constexpr int64_t kPanelRows = 64;            // int4: input rows per panel (16 KB)

// AutoAWQ packs output column 8c + k in nibble kAwqNibble[k] of int32 c.
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

inline __attribute__((always_inline)) int32_t LoadI32(const unsigned char* p, int64_t index) {
  int32_t v;
  std::memcpy(&v, p + index * 4, 4);
  return v;
}

int Nibble(int32_t packed, int nibble) {
  return static_cast<int>((static_cast<uint32_t>(packed) >> (4 * nibble)) & 0xf);
}

// The calling thread's scratch of `n` floats (kept, grown as needed).
template <int kWhich>
float* Scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// ---------------------------------------------------------------- int4

// The output columns [begin, begin + columns) one call of Int4Matmul
// covers (a multiple of 8 wide), in tiles of kTile; float rows of `stride`
// (columns rounded up to whole tiles) hold them in the partial sums and the
// group table.
struct Int4Range {
  const QuantView* w;
  int64_t begin, columns, stride;
  // Per group: the range's zero points, then its scales, as float32 rows of
  // `stride`; columns past `columns` are 0, so their decoded weights are 0.
  const float* groups;
  const float* Zeros(int64_t g) const { return groups + g * 2 * stride; }
  const float* Scales(int64_t g) const { return groups + g * 2 * stride + stride; }
};

// Every group's zero points and scales over columns [c0, c0 + n), as float32
// rows of `stride` (>= n, zeros past n): group g's zero points at
// out[2 g stride], its scales at out[(2 g + 1) stride].
void LoadGroups(const QuantView& w, int64_t c0, int64_t n, int64_t stride, float* out) {
  const QuantizedTensor& q = *w.q;
  const bool awq = q.format == QuantFormat::kAwq;
  const checkpoint::DType scale_dtype = q.parts[2].dtype;
  const int64_t elem = static_cast<int64_t>(checkpoint::DTypeSize(scale_dtype));
  std::fill(out, out + q.groups * 2 * stride, 0.0f);
  for (int64_t g = 0; g < q.groups; ++g) {
    float* zeros = out + g * 2 * stride;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t column = c0 + c;
      const int32_t packed = LoadI32(w.part[1], g * (q.out / 8) + column / 8);
      // GPTQ v1 stores zero - 1.
      zeros[c] = awq ? static_cast<float>(Nibble(packed, kAwqNibble[column % 8]))
                     : static_cast<float>(Nibble(packed, static_cast<int>(column % 8)) + 1);
    }
    ConvertToFloat(w.part[2] + (g * q.out + c0) * elem, scale_dtype, n, zeros + stride);
  }
}

// Inlined into the vector paths: a call there would clobber every vector
// register they keep their constants in.
#define NS_INLINE inline __attribute__((always_inline))

NS_INLINE int64_t GroupOf(const QuantView& w, int64_t i) {
  const QuantizedTensor& q = *w.q;
  if (q.format == QuantFormat::kGptq && q.parts.size() > 3) return LoadI32(w.part[3], i);
  return i / q.group_size;
}

// The packed int32s of input row i that hold the tile at column c of the
// range: AWQ kTile / 8 of them (8 columns each), GPTQ kTile (one column
// each, input row i in nibble i % 8). A tile cut short by the range's end is
// copied into `pad` (zeros past it), so the vector paths never read past the
// tensor.
NS_INLINE const int32_t* PackedRow(const Int4Range& r, int64_t i, int64_t c, int32_t* pad) {
  const QuantizedTensor& q = *r.w->q;
  const bool awq = q.format == QuantFormat::kAwq;
  const int64_t c0 = r.begin + c;
  const unsigned char* row = awq ? r.w->part[0] + (i * (q.out / 8) + c0 / 8) * 4
                                 : r.w->part[0] + ((i / 8) * q.out + c0) * 4;
  const int64_t n = std::min(kTile, r.columns - c);
  if (n == kTile && reinterpret_cast<uintptr_t>(row) % 4 == 0) {
    return reinterpret_cast<const int32_t*>(row);
  }
  std::memset(pad, 0, sizeof(int32_t) * kTile);
  std::memcpy(pad, row, static_cast<size_t>(awq ? n / 8 : n) * 4);
  return pad;
}

// Input rows [i0, i0 + rows) of the tile at column c of the range into
// panel [rows, kTile].
void DecodePanelScalar(const Int4Range& range, int64_t c, int64_t i0, int64_t rows, float* panel) {
  const bool awq = range.w->q->format == QuantFormat::kAwq;
  int32_t pad[kTile];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const int64_t g = GroupOf(*range.w, i);
    const float* zeros = range.Zeros(g) + c;
    const float* scales = range.Scales(g) + c;
    const int32_t* packed = PackedRow(range, i, c, pad);
    float* out = panel + r * kTile;
    for (int64_t k = 0; k < kTile; ++k) {
      const int value = awq ? Nibble(packed[k / 8], kAwqNibble[k % 8])
                            : Nibble(packed[k], static_cast<int>(i % 8));
      out[k] = (static_cast<float>(value) - zeros[k]) * scales[k];
    }
  }
}

// One tile: ytile [rows, kTile] (rows `ys` floats apart) += x [rows, kb]
// (row stride in) times panel [kb, kTile], one fused multiply-add at a time
// in input order.
void Int4BlockScalar(const float* x, int64_t in, int64_t rows, const float* panel, int64_t kb,
                     float* ytile, int64_t ys) {
  for (int64_t t = 0; t < rows; ++t) {
    float* acc = ytile + t * ys;
    for (int64_t k = 0; k < kb; ++k) {
      const float xv = x[t * in + k];
      const float* wk = panel + k * kTile;
      for (int64_t c = 0; c < kTile; ++c) acc[c] = std::fma(xv, wk[c], acc[c]);
    }
  }
}

// ---------------------------------------------------------------- FP8

// Calls fn(begin, end, scale) for the runs of output row o's inputs that
// share a scale: all of them (per channel), or each block of block_in.
template <typename Fn>
void ForEachScaleRun(const QuantView& w, int64_t o, Fn fn) {
  const QuantizedTensor& q = *w.q;
  const checkpoint::TensorInfo& part = q.parts[1];
  const int64_t elem = static_cast<int64_t>(checkpoint::DTypeSize(part.dtype));
  float s;
  if (q.format == QuantFormat::kFp8Channel) {
    ConvertToFloat(w.part[1] + o * elem, part.dtype, 1, &s);
    return fn(int64_t{0}, q.in, s);
  }
  const int64_t columns = part.shape[1];
  const unsigned char* row = w.part[1] + (o / q.block_out) * columns * elem;
  for (int64_t b = 0; b < columns; ++b) {
    ConvertToFloat(row + b * elem, part.dtype, 1, &s);
    fn(b * q.block_in, std::min(q.in, (b + 1) * q.block_in), s);
  }
}

void DecodeFp8Scalar(const unsigned char* bytes, int64_t n, float scale, float* out) {
  const float* table = checkpoint::Fp8E4M3Table();
  for (int64_t i = 0; i < n; ++i) out[i] = table[bytes[i]] * scale;
}

#ifdef NS_QMM_X86
#define NS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define NS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx2,f16c")))

// ---------------------------------------------------------------- AVX2

NS_AVX2 void DecodePanelAvx2(const Int4Range& range, int64_t c, int64_t i0, int64_t rows,
                             float* panel) {
  const bool awq = range.w->q->format == QuantFormat::kAwq;
  const __m256i mask = _mm256_set1_epi32(0xf);
  const __m256i awq_shifts = _mm256_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28);
  alignas(32) int32_t pad[kTile];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const int64_t g = GroupOf(*range.w, i);
    const float* zeros = range.Zeros(g) + c;
    const float* scales = range.Scales(g) + c;
    const int32_t* packed = PackedRow(range, i, c, pad);
    const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(4 * (i % 8)));
    float* out = panel + r * kTile;
    for (int64_t v = 0; v < kTile / 8; ++v) {
      const __m256i nibbles =
          awq ? _mm256_srlv_epi32(_mm256_set1_epi32(packed[v]), awq_shifts)
              : _mm256_srl_epi32(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 8 * v)), shift);
      const __m256 f = _mm256_cvtepi32_ps(_mm256_and_si256(nibbles, mask));
      const __m256 d = _mm256_sub_ps(f, _mm256_loadu_ps(zeros + 8 * v));
      _mm256_storeu_ps(out + 8 * v, _mm256_mul_ps(d, _mm256_loadu_ps(scales + 8 * v)));
    }
  }
}

// R rows of x against half a panel (32 columns: 4 vectors).
template <int R>
NS_AVX2 void Int4RowsAvx2(const float* x, int64_t in, const float* panel, int64_t kb, float* ytile,
                          int64_t ys) {
  for (int64_t h = 0; h < kTile; h += 32) {
    __m256 acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_loadu_ps(ytile + r * ys + h + 8 * v);
    }
    for (int64_t k = 0; k < kb; ++k) {
      const float* wk = panel + k * kTile + h;
      const __m256 w0 = _mm256_loadu_ps(wk), w1 = _mm256_loadu_ps(wk + 8),
                   w2 = _mm256_loadu_ps(wk + 16), w3 = _mm256_loadu_ps(wk + 24);
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * in + k);
        acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
        acc[r][2] = _mm256_fmadd_ps(xv, w2, acc[r][2]);
        acc[r][3] = _mm256_fmadd_ps(xv, w3, acc[r][3]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < 4; ++v) _mm256_storeu_ps(ytile + r * ys + h + 8 * v, acc[r][v]);
    }
  }
}

NS_AVX2 void Int4BlockAvx2(const float* x, int64_t in, int64_t rows, const float* panel, int64_t kb,
                           float* ytile, int64_t ys) {
  int64_t t = 0;
  for (; t + 2 <= rows; t += 2) Int4RowsAvx2<2>(x + t * in, in, panel, kb, ytile + t * ys, ys);
  if (t < rows) Int4RowsAvx2<1>(x + t * in, in, panel, kb, ytile + t * ys, ys);
}

// DecodeE4M3x8 (e4m3_x86.h) of the eight bytes at p.
NS_AVX2 inline __m256 DecodeE4M3Avx2(const unsigned char* p) {
  uint64_t eight;
  std::memcpy(&eight, p, 8);
  return DecodeE4M3x8(_mm_cvtsi64_si128(static_cast<long long>(eight)));
}

NS_AVX2 void DecodeFp8Avx2(const unsigned char* bytes, int64_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(DecodeE4M3Avx2(bytes + i), s));
  DecodeFp8Scalar(bytes + i, n - i, scale, out + i);
}

// ---------------------------------------------------------------- AVX-512

NS_AVX512 void DecodePanelAvx512(const Int4Range& range, int64_t c, int64_t i0, int64_t rows,
                                 float* panel) {
  const bool awq = range.w->q->format == QuantFormat::kAwq;
  const __m512i mask = _mm512_set1_epi32(0xf);
  // AWQ: lane j of vector v is column 16v + j: int32 2v + j / 8, nibble
  // kAwqNibble[j % 8].
  const __m512i awq_shifts =
      _mm512_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28, 0, 16, 4, 20, 8, 24, 12, 28);
  __m512i awq_index[4];
  for (int v = 0; v < 4; ++v) {
    awq_index[v] = _mm512_setr_epi32(2 * v, 2 * v, 2 * v, 2 * v, 2 * v, 2 * v, 2 * v, 2 * v,
                                     2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1,
                                     2 * v + 1, 2 * v + 1, 2 * v + 1);
  }
  alignas(64) int32_t pad[kTile];
  int64_t group = -1;
  __m512 zeros[4] = {}, scales[4] = {};  // the current group's, kept in registers
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    if (const int64_t g = GroupOf(*range.w, i); g != group) {
      group = g;
      for (int v = 0; v < 4; ++v) {
        zeros[v] = _mm512_loadu_ps(range.Zeros(g) + c + 16 * v);
        scales[v] = _mm512_loadu_ps(range.Scales(g) + c + 16 * v);
      }
    }
    const int32_t* packed = PackedRow(range, i, c, pad);
    // The same tile's bytes kPanelRows input rows on, for the next panel:
    // a tile walks the packed rows a whole row apart, which the hardware's
    // prefetch does not follow (the loads waited on memory for half the
    // decode's time in a pass). Into L2: the next panel is read after every
    // tile of this one.
    if (awq || i % 8 == 0) {
      const char* ahead = reinterpret_cast<const char*>(packed) + kPanelRows * range.w->q->out / 2;
      for (int line = 0; line < (awq ? 1 : 4); ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T1);
    }
    float* out = panel + r * kTile;
    if (awq) {
      const __m512i eight =
          _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed)));
      for (int v = 0; v < 4; ++v) {
        const __m512i lanes = _mm512_permutexvar_epi32(awq_index[v], eight);
        const __m512 f =
            _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(lanes, awq_shifts), mask));
        _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(_mm512_sub_ps(f, zeros[v]), scales[v]));
      }
    } else {
      const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(4 * (i % 8)));
      for (int v = 0; v < 4; ++v) {
        const __m512i nibbles = _mm512_srl_epi32(_mm512_loadu_si512(packed + 16 * v), shift);
        const __m512 f = _mm512_cvtepi32_ps(_mm512_and_si512(nibbles, mask));
        _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(_mm512_sub_ps(f, zeros[v]), scales[v]));
      }
    }
  }
}

// R rows of x against a whole panel (64 columns: 4 vectors): 4R accumulators.
template <int R>
NS_AVX512 void Int4RowsAvx512(const float* x, int64_t in, const float* panel, int64_t kb,
                              float* ytile, int64_t ys) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_loadu_ps(ytile + r * ys + 16 * v);
  }
  for (int64_t k = 0; k < kb; ++k) {
    const float* wk = panel + k * kTile;
    const __m512 w0 = _mm512_loadu_ps(wk), w1 = _mm512_loadu_ps(wk + 16),
                 w2 = _mm512_loadu_ps(wk + 32), w3 = _mm512_loadu_ps(wk + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * in + k]);
      acc[r][0] = _mm512_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xv, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(xv, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(xv, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(ytile + r * ys + 16 * v, acc[r][v]);
  }
}

NS_AVX512 void Int4BlockAvx512(const float* x, int64_t in, int64_t rows, const float* panel,
                               int64_t kb, float* ytile, int64_t ys) {
  int64_t t = 0;
  for (; t + 6 <= rows; t += 6) Int4RowsAvx512<6>(x + t * in, in, panel, kb, ytile + t * ys, ys);
  float* yt = ytile + t * ys;
  const float* xt = x + t * in;
  switch (rows - t) {
    case 5:
      return Int4RowsAvx512<5>(xt, in, panel, kb, yt, ys);
    case 4:
      return Int4RowsAvx512<4>(xt, in, panel, kb, yt, ys);
    case 3:
      return Int4RowsAvx512<3>(xt, in, panel, kb, yt, ys);
    case 2:
      return Int4RowsAvx512<2>(xt, in, panel, kb, yt, ys);
    case 1:
      return Int4RowsAvx512<1>(xt, in, panel, kb, yt, ys);
    default:
      return;
  }
}

// DecodeE4M3x8's arithmetic (e4m3_x86.h) on 16 bytes.
NS_AVX512 inline __m512 DecodeE4M3Avx512(const unsigned char* p) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i magnitude = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
  const __m512 normal = _mm512_castsi512_ps(
      _mm512_add_epi32(_mm512_slli_epi32(magnitude, 20), _mm512_set1_epi32(120 << 23)));
  const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(magnitude), _mm512_set1_ps(0x1p-9f));
  const __mmask16 is_subnormal =
      _mm512_testn_epi32_mask(magnitude, _mm512_set1_epi32(0x78));  // exponent field 0
  __m512 v = _mm512_mask_blend_ps(is_subnormal, normal, subnormal);
  const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7f));
  v = _mm512_mask_blend_ps(is_nan, v, _mm512_set1_ps(__builtin_nanf("")));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

NS_AVX512 void DecodeFp8Avx512(const unsigned char* bytes, int64_t n, float scale, float* out) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(DecodeE4M3Avx512(bytes + i), s));
  }
  DecodeFp8Scalar(bytes + i, n - i, scale, out + i);
}

#endif  // NS_QMM_X86

// ---------------------------------------------------------------- drivers

// The weight is walked a panel of kPanelRows input rows at a time, every
// tile of the range within it (so the packed rows' lines a tile leaves are
// the next tile's, still in cache), each tile decoded into an L1-sized
// panel and multiplied into its partial sums, `ytile` [rows, stride], which
// are kept across the panels.
void Int4Matmul(const QuantView& w, const float* x, int64_t rows, int64_t out_begin,
                int64_t out_end, float* y, int64_t y_stride, Isa isa) {
  const QuantizedTensor& q = *w.q;
  const int64_t columns = out_end - out_begin;
  const int64_t stride = (columns + kTile - 1) / kTile * kTile;
  float* groups = Scratch<0>(static_cast<size_t>(q.groups * 2 * stride));
  LoadGroups(w, out_begin, columns, stride, groups);
  const Int4Range range{&w, out_begin, columns, stride, groups};
  float* panel = Scratch<1>(static_cast<size_t>(kPanelRows * kTile));
  float* ytile = Scratch<2>(static_cast<size_t>(rows * stride));
  std::fill(ytile, ytile + rows * stride, 0.0f);
  for (int64_t i0 = 0; i0 < q.in; i0 += kPanelRows) {
    const int64_t kb = std::min(kPanelRows, q.in - i0);
    for (int64_t c = 0; c < stride; c += kTile) {
      switch (isa) {
#ifdef NS_QMM_X86
        case Isa::kAvx512Bf16:
        case Isa::kAvx512:
          DecodePanelAvx512(range, c, i0, kb, panel);
          Int4BlockAvx512(x + i0, q.in, rows, panel, kb, ytile + c, stride);
          break;
        case Isa::kAvx2:
          DecodePanelAvx2(range, c, i0, kb, panel);
          Int4BlockAvx2(x + i0, q.in, rows, panel, kb, ytile + c, stride);
          break;
#endif
        default:
          DecodePanelScalar(range, c, i0, kb, panel);
          Int4BlockScalar(x + i0, q.in, rows, panel, kb, ytile + c, stride);
      }
    }
  }
  for (int64_t t = 0; t < rows; ++t) {
    std::memcpy(y + t * y_stride + out_begin, ytile + t * stride, sizeof(float) * columns);
  }
}

void Fp8Matmul(const QuantView& w, const float* x, int64_t rows, int64_t out_begin, int64_t out_end,
               float* y, int64_t y_stride, Isa isa) {
  const QuantizedTensor& q = *w.q;
  float* wrows = Scratch<1>(static_cast<size_t>(kDotOutputs * q.in));
  for (int64_t o0 = out_begin; o0 < out_end; o0 += kDotOutputs) {
    const int64_t outputs = std::min(kDotOutputs, out_end - o0);
    for (int64_t o = 0; o < outputs; ++o) {
      const unsigned char* bytes = w.part[0] + (o0 + o) * q.in;
      float* out = wrows + o * q.in;
      ForEachScaleRun(w, o0 + o, [&](int64_t begin, int64_t end, float scale) {
        switch (isa) {
#ifdef NS_QMM_X86
          case Isa::kAvx512Bf16:
          case Isa::kAvx512:
            return DecodeFp8Avx512(bytes + begin, end - begin, scale, out + begin);
          case Isa::kAvx2:
            return DecodeFp8Avx2(bytes + begin, end - begin, scale, out + begin);
#endif
          default:
            return DecodeFp8Scalar(bytes + begin, end - begin, scale, out + begin);
        }
      });
    }
    DotRows(x, q.in, rows, wrows, q.in, outputs, y + o0, y_stride, isa);
  }
}

}  // namespace

void QuantMatmul(const QuantView& w, const float* x, int64_t rows, int64_t out_begin,
                 int64_t out_end, float* y, int64_t y_stride, Isa isa) {
  if (rows <= 0 || out_begin >= out_end) return;
  if (w.input_major()) {
    Int4Matmul(w, x, rows, out_begin, out_end, y, y_stride, isa);
  } else {
    Fp8Matmul(w, x, rows, out_begin, out_end, y, y_stride, isa);
  }
}

}  // namespace nightshift::engine
