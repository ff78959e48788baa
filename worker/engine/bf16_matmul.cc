#include "worker/engine/bf16_matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "worker/engine/convert.h"
#include "worker/engine/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define NS_BF16_MATMUL_X86 1
#endif

namespace nightshift::engine {
namespace {

// Pairs of x per row in the packed form: an odd `in` ends in a half pair.
int64_t PairsPerRow(int64_t in) { return (in + 1) / 2; }

}  // namespace

int64_t Bf16PackedSize(int64_t rows, int64_t in) {
  return Bf16Panels(rows) * PairsPerRow(in) * kBf16PanelRows;
}

#ifdef NS_BF16_MATMUL_X86

#define NS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// Weight rows per tile: 6 rows x 4 vectors of 16 x rows = 24 accumulators,
// plus the 4 x vectors and a broadcast weight pair in registers.
constexpr int kTileRows = 6;
constexpr int kPanelVectors = static_cast<int>(kBf16PanelRows / 16);

// 16 float32 lanes rounded to BF16 (to nearest even) and widened back. (The
// maskz forms: GCC 12 warns of the unmasked ones' undefined pass-through.)
NS_TARGET inline __m512 RoundToBf16(__m512 v) {
  const __m256i bf16 = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, bf16);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16));
}

// `count` (0..16) floats from p, zeros beyond.
NS_TARGET inline __m512 LoadUpTo16(const float* p, int64_t count) {
  if (count >= 16) return _mm512_loadu_ps(p);
  if (count <= 0) return _mm512_setzero_ps();
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
}

// Transposes the 16 x 16 block of 32-bit values in v: v[i] lane j becomes
// v[j] lane i. In 128-bit lanes first (pairs, then quads), then across them.
// (The maskz forms, as RoundToBf16's.)
NS_TARGET inline void Transpose16x16(__m512i v[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(0xffff, v[i], v[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, v[i], v[i + 1]);
  }
  // u[4g + j], lane L: element 4L + j of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_maskz_unpacklo_epi64(0xff, t[g], t[g + 2]);
    u[g + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[g], t[g + 2]);
    u[g + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[g + 1], t[g + 3]);
  }
  // Element 4L + j of all 16 rows: lane L of u[j], u[4 + j], u[8 + j], u[12 + j].
  for (int j = 0; j < 4; ++j) {
    const __m512i low01 = _mm512_maskz_shuffle_i32x4(0xffff, u[j], u[4 + j], 0x44);   // lanes 0, 1
    const __m512i high01 = _mm512_maskz_shuffle_i32x4(0xffff, u[j], u[4 + j], 0xee);  // lanes 2, 3
    const __m512i low23 = _mm512_maskz_shuffle_i32x4(0xffff, u[8 + j], u[12 + j], 0x44);
    const __m512i high23 = _mm512_maskz_shuffle_i32x4(0xffff, u[8 + j], u[12 + j], 0xee);
    v[j] = _mm512_maskz_shuffle_i32x4(0xffff, low01, low23, 0x88);
    v[4 + j] = _mm512_maskz_shuffle_i32x4(0xffff, low01, low23, 0xdd);
    v[8 + j] = _mm512_maskz_shuffle_i32x4(0xffff, high01, high23, 0x88);
    v[12 + j] = _mm512_maskz_shuffle_i32x4(0xffff, high01, high23, 0xdd);
  }
}

// 16 rows of x at a time: each row's 16-pair block rounded to BF16 pairs,
// the 16 x 16 block transposed so that each pair index's 16 rows are one
// store (a scatter per row took 2% of a 64-sequence pass's samples).
NS_TARGET void Pack(const float* x, int64_t rows, int64_t in, int64_t panel_begin,
                    int64_t panel_end, uint32_t* packed) {
  const int64_t pairs = PairsPerRow(in);
  const int64_t panel_values = pairs * kBf16PanelRows;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    uint32_t* panel = packed + p * panel_values;
    for (int64_t t = 0; t < kBf16PanelRows; t += 16) {
      if (p * kBf16PanelRows + t >= rows) {  // 16 rows past the end: zeros, nothing to transpose
        for (int64_t k = 0; k < pairs; ++k) {
          _mm512_storeu_si512(panel + k * kBf16PanelRows + t, _mm512_setzero_si512());
        }
        continue;
      }
      for (int64_t k = 0; k < pairs; k += 16) {
        const int64_t left = in - 2 * k;  // values of each row from pair k on
        __m512i block[16];
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t row = p * kBf16PanelRows + t + i;
          block[i] = _mm512_setzero_si512();
          if (row < rows) {
            const float* src = x + row * in + 2 * k;
            block[i] = reinterpret_cast<__m512i>(
                _mm512_cvtne2ps_pbh(LoadUpTo16(src + 16, left - 16), LoadUpTo16(src, left)));
          }
        }
        Transpose16x16(block);
        const int64_t n = std::min<int64_t>(16, pairs - k);
        for (int64_t q = 0; q < n; ++q) {
          _mm512_storeu_si512(panel + (k + q) * kBf16PanelRows + t, block[q]);
        }
      }
    }
  }
}

// out[r * kBf16PanelRows + t] for r < R and t < 16 V, rounded to BF16: R
// weight rows (BF16, row stride `in`) times V vectors of 16 packed rows of x.
// Meanwhile it prefetches `lines` cache lines from `next`, one per pair index.
template <int R, int V>
NS_TARGET void Tile(const uint16_t* w, int64_t in, const uint32_t* xp, float* out, const char* next,
                    int64_t lines) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const int64_t full = in / 2;
  for (int64_t k = 0; k < full; ++k) {
    if (k < lines) _mm_prefetch(next + 64 * k, _MM_HINT_T0);
    __m512bh xv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      xv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xp + k * kBf16PanelRows + 16 * v));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, w + r * in + 2 * k, sizeof pair);
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv, xv[v]);
    }
  }
  if (in % 2 != 0) {  // the half pair: x's upper half is zero, so is the weight's
    for (int v = 0; v < V; ++v) {
      const __m512bh xv =
          reinterpret_cast<__m512bh>(_mm512_loadu_si512(xp + full * kBf16PanelRows + 16 * v));
      for (int r = 0; r < R; ++r) {
        const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(w[r * in + in - 1]));
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv, xv);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      _mm512_store_ps(out + r * kBf16PanelRows + 16 * v, RoundToBf16(acc[r][v]));
    }
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint32_t*, float*, const char*, int64_t);

template <int R>
constexpr TileFn TileFor(int vectors) {
  switch (vectors) {
    case 1:
      return &Tile<R, 1>;
    case 2:
      return &Tile<R, 2>;
    case 3:
      return &Tile<R, 3>;
    default:
      return &Tile<R, 4>;
  }
}

TileFn TileFor(int rows, int vectors) {
  switch (rows) {
    case 1:
      return TileFor<1>(vectors);
    case 2:
      return TileFor<2>(vectors);
    case 3:
      return TileFor<3>(vectors);
    case 4:
      return TileFor<4>(vectors);
    case 5:
      return TileFor<5>(vectors);
    default:
      return TileFor<6>(vectors);
  }
}
static_assert(kTileRows == 6 && kPanelVectors == 4, "TileFor covers 1-6 rows, 1-4 vectors");

// y[t * y_stride + r] = out[r * kBf16PanelRows + t] for r < n, t < valid:
// the block's products, weight row by x row, turned into rows of y, 16 x 16
// values at a time (one value at a time, this was 4.6% of a pass's samples).
NS_TARGET void StoreTransposed(const float* out, int64_t n, int64_t valid, float* y,
                               int64_t y_stride) {
  for (int64_t r = 0; r < n; r += 16) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << std::min<int64_t>(16, n - r)) - 1);
    for (int64_t t = 0; t < valid; t += 16) {
      __m512i block[16];
      for (int64_t i = 0; i < 16; ++i) {
        block[i] = r + i < n ? _mm512_load_si512(out + (r + i) * kBf16PanelRows + t)
                             : _mm512_setzero_si512();
      }
      Transpose16x16(block);
      for (int64_t i = 0; i < std::min<int64_t>(16, valid - t); ++i) {
        _mm512_mask_storeu_epi32(y + (t + i) * y_stride + r, lanes, block[i]);
      }
    }
  }
}

// Rows of x up to which Multiply lays weight rows across the lanes
// (FewRows) rather than rows of x (Tile): Tile's lanes are 16 rows of x, so
// a decode pass of one sequence used one lane in 16, and the kernel ran at
// 8.3 GFLOP/s at one row against the float32 kernel's 14.2 (a Qwen3-MoE's
// projections, Intel Xeon with AMX, 2 threads, 2026-12-06).
constexpr int64_t kFewRows = 8;

// v[q] lane j = pair k + q of weight row j (BF16, row stride `in`), for
// j < n (<= 16) and k + q < full; zero elsewhere.
NS_TARGET inline void LoadPairsTransposed(const uint16_t* w, int64_t in, int64_t n, int64_t k,
                                          int64_t full, __m512i v[16]) {
  const int64_t count = std::min<int64_t>(16, full - k);
  const __mmask16 mask = static_cast<__mmask16>(count >= 16 ? 0xffff : (1u << count) - 1);
  for (int64_t j = 0; j < 16; ++j) {
    v[j] = j < n ? _mm512_maskz_loadu_epi32(mask, w + j * in + 2 * k) : _mm512_setzero_si512();
  }
  Transpose16x16(v);
}

// y[t * y_stride + o] for t < T and o < n (<= 16 B): T packed rows of x
// (panel 0) times weight rows [0, n) (BF16, row stride `in`), 16 weight rows
// to a vector, each pair of x broadcast. Each output is the very chain of
// `vdpbf16ps` that Tile computes for it (from +0, pair after pair, the half
// pair last, the same operands in the same places), in another lane, so the
// products are bitwise Tile's whatever the number of rows: the batch
// invariance bf16-avx512 promises. B x T accumulators hide the latency of
// each chain; B <= 2, T <= 8.
template <int T, int B>
NS_TARGET void FewRows(const uint16_t* w, int64_t in, int64_t n, const uint32_t* xp, float* y,
                       int64_t y_stride) {
  __m512 acc[B][T];
#pragma GCC unroll 2
  for (int b = 0; b < B; ++b) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[b][t] = _mm512_setzero_ps();
  }
  const int64_t full = in / 2;
  for (int64_t k = 0; k < full; k += 16) {
    const int64_t pairs = std::min<int64_t>(16, full - k);
#pragma GCC unroll 2
    for (int b = 0; b < B; ++b) {
      if (16 * b >= n) break;
      __m512i v[16];
      LoadPairsTransposed(w + 16 * b * in, in, std::min<int64_t>(16, n - 16 * b), k, full, v);
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        if (q >= pairs) break;
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512bh xv = reinterpret_cast<__m512bh>(
              _mm512_set1_epi32(static_cast<int>(xp[(k + q) * kBf16PanelRows + t])));
          acc[b][t] = _mm512_dpbf16_ps(acc[b][t], reinterpret_cast<__m512bh>(v[q]), xv);
        }
      }
    }
  }
  for (int b = 0; b < B && 16 * b < n; ++b) {
    const int64_t rows = std::min<int64_t>(16, n - 16 * b);
    const __mmask16 lanes = static_cast<__mmask16>(rows >= 16 ? 0xffff : (1u << rows) - 1);
    if (in % 2 != 0) {  // the half pair: each weight row's last value, its upper half zero
      alignas(64) uint32_t last[16] = {};
      for (int64_t j = 0; j < rows; ++j) last[j] = w[(16 * b + j) * in + in - 1];
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_load_si512(last));
      for (int t = 0; t < T; ++t) {
        const __m512bh xv = reinterpret_cast<__m512bh>(
            _mm512_set1_epi32(static_cast<int>(xp[full * kBf16PanelRows + t])));
        acc[b][t] = _mm512_dpbf16_ps(acc[b][t], wv, xv);
      }
    }
    for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(y + t * y_stride + 16 * b, lanes, RoundToBf16(acc[b][t]));
    }
  }
}

using FewRowsFn = void (*)(const uint16_t*, int64_t, int64_t, const uint32_t*, float*, int64_t);

// Blocks of 16 weight rows per FewRows call for `rows` rows of x: 2 x 1-4
// accumulators, 1 x 5-8, beside the 16 vectors of a transposed block. More
// blocks are more weight rows streamed at once: 8 x 1 read the weights at
// half the speed of 2 x 1.
constexpr int FewRowsBlocks(int64_t rows) { return rows <= 4 ? 2 : 1; }

FewRowsFn FewRowsFor(int64_t rows) {
  switch (rows) {
    case 1:
      return &FewRows<1, FewRowsBlocks(1)>;
    case 2:
      return &FewRows<2, FewRowsBlocks(2)>;
    case 3:
      return &FewRows<3, FewRowsBlocks(3)>;
    case 4:
      return &FewRows<4, FewRowsBlocks(4)>;
    case 5:
      return &FewRows<5, FewRowsBlocks(5)>;
    case 6:
      return &FewRows<6, FewRowsBlocks(6)>;
    case 7:
      return &FewRows<7, FewRowsBlocks(7)>;
    default:
      return &FewRows<8, FewRowsBlocks(8)>;
  }
}
static_assert(kFewRows == 8, "FewRowsFor covers 1-8 rows");

// Weight rows [o, o + n) of `weight` (row stride `in`) in BF16: in place
// when stored so; F16 ones converted into this thread's scratch (valid until
// its next call), so that they are in cache when multiplied.
const uint16_t* Bf16Rows(const unsigned char* weight, checkpoint::DType dtype, int64_t o, int64_t n,
                         int64_t in) {
  if (dtype == checkpoint::DType::kBF16) {
    return reinterpret_cast<const uint16_t*>(weight + o * in * 2);
  }
  thread_local std::vector<uint16_t> scratch;
  scratch.resize(static_cast<size_t>(n * in));
  ConvertToBFloat16(weight + o * in * 2, dtype, n * in, scratch.data());
  return scratch.data();
}

void MultiplyFewRows(const uint32_t* packed, int64_t rows, int64_t in, const unsigned char* weight,
                     checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
                     int64_t y_stride) {
  const FewRowsFn kernel = FewRowsFor(rows);
  const int64_t block = 16 * FewRowsBlocks(rows);
  for (int64_t o = out_begin; o < out_end; o += block) {
    const int64_t n = std::min(block, out_end - o);
    kernel(Bf16Rows(weight, dtype, o, n, in), in, n, packed, y + o, y_stride);
  }
}

// Weight rows multiplied into a panel before its products are written out:
// each row of y then takes kBlockRows contiguous values at once (written one
// tile at a time, 16 rows of y a power-of-two stride apart fought over the
// same cache sets: 2048 x 2048 ran at 0.6 of the kernel's rate). F16 rows are
// converted a block at a time.
constexpr int64_t kBlockRows = 4 * kTileRows;

void Multiply(const uint32_t* packed, int64_t rows, int64_t in, const unsigned char* weight,
              checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
              int64_t y_stride) {
  if (rows <= kFewRows) {
    MultiplyFewRows(packed, rows, in, weight, dtype, out_begin, out_end, y, y_stride);
    return;
  }
  const int64_t panels = Bf16Panels(rows);
  const int64_t panel_values = PairsPerRow(in) * kBf16PanelRows;
  alignas(64) float out[kBlockRows * kBf16PanelRows];
  for (int64_t o = out_begin; o < out_end; o += kBlockRows) {
    const int64_t n = std::min(kBlockRows, out_end - o);
    const uint16_t* w = Bf16Rows(weight, dtype, o, n, in);
    const unsigned char* next = weight + (o + n) * in * 2;
    const int64_t next_bytes = std::min(kBlockRows, out_end - o - n) * in * 2;
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t valid = std::min(kBf16PanelRows, rows - p * kBf16PanelRows);
      const int vectors = static_cast<int>((valid + 15) / 16);
      for (int64_t r = 0; r < n; r += kTileRows) {
        // The first panel's tiles bring the next block's stored rows into
        // cache, a share each, while they multiply.
        const int64_t share =
            p == 0 ? (next_bytes / 64 + kBlockRows / kTileRows - 1) / (kBlockRows / kTileRows) : 0;
        const int64_t first = r / kTileRows * share;
        const int64_t lines = std::clamp<int64_t>(next_bytes / 64 - first, 0, share);
        TileFor(static_cast<int>(std::min<int64_t>(kTileRows, n - r)), vectors)(
            w + r * in, in, packed + p * panel_values, out + r * kBf16PanelRows,
            reinterpret_cast<const char*>(next) + 64 * first, lines);
      }
      StoreTransposed(out, n, valid, y + p * kBf16PanelRows * y_stride + o, y_stride);
    }
  }
}

bool Detect() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

}  // namespace

int64_t Bf16MatmulBlockRows(int64_t rows) {
  return rows <= kFewRows ? 16 * FewRowsBlocks(rows) : kBlockRows;
}

bool Bf16MatmulSupported() {
  static const bool supported = Detect();
  return supported && IsaActive(Isa::kAvx512Bf16);
}

void PackBf16Activations(const float* x, int64_t rows, int64_t in, int64_t panel_begin,
                         int64_t panel_end, uint32_t* packed) {
  Pack(x, rows, in, panel_begin, panel_end, packed);
}

void Bf16Matmul(const uint32_t* packed, int64_t rows, int64_t in, const void* weight,
                checkpoint::DType dtype, int64_t out_begin, int64_t out_end, float* y,
                int64_t y_stride) {
  Multiply(packed, rows, in, static_cast<const unsigned char*>(weight), dtype, out_begin, out_end,
           y, y_stride);
}

#else  // !NS_BF16_MATMUL_X86

bool Bf16MatmulSupported() { return false; }
int64_t Bf16MatmulBlockRows(int64_t) { return 1; }
void PackBf16Activations(const float*, int64_t, int64_t, int64_t, int64_t, uint32_t*) {}
void Bf16Matmul(const uint32_t*, int64_t, int64_t, const void*, checkpoint::DType, int64_t, int64_t,
                float*, int64_t) {}

#endif

}  // namespace nightshift::engine
