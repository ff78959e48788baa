#include "worker/engine/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/engine/isa.h"

namespace nightshift::engine {
namespace {

// W float32 lanes (GCC's vector extension: AVX-512, AVX2 or SSE registers,
// as the enclosing function's target allows).
template <int W>
struct Lanes {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
};

// Loads and stores by reference: a vector passed or returned by value
// outside its target's functions would change the calling convention.
template <typename V>
inline __attribute__((always_inline)) void Load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

template <typename V>
inline __attribute__((always_inline)) void Store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// The sum of W lanes as a tree: the lower half plus the upper half, halved
// again until one lane is left. The same tree for every dot product, and a
// few shuffles rather than W dependent additions.
template <int W>
inline __attribute__((always_inline)) float TreeSum(const typename Lanes<W>::type& v) {
  if constexpr (W == 2) {
    return v[0] + v[1];
  } else {
    typename Lanes<W / 2>::type lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return TreeSum<W / 2>(lo + hi);
  }
}

// Where a row's j-th key (or value) of one KV head sits, as a pointer to
// its `dim` floats: at j of the cache (a causal row over its cache), at
// rows[j] (a trie row over its ancestors' positions,
// DecodeAttentionShape::key_rows), or, for a cache that shares a prefix
// (DecodeAttentionShape::shared), the first n at rows[j] of the shared
// cache and the rest at j - n of its own. The arithmetic is the same
// whichever it is; only the addresses differ.
struct ContiguousKeys {
  const float* own;
  int64_t stride;
  const float* operator[](int64_t j) const { return own + j * stride; }
};
struct GatheredKeys {
  const float* own;
  const int32_t* rows;
  int64_t stride;
  const float* operator[](int64_t j) const { return own + rows[j] * stride; }
};
struct SharedThenOwnKeys {
  const float* shared;
  const int32_t* rows;
  int64_t n;
  const float* own;
  int64_t stride;
  const float* operator[](int64_t j) const {
    return j < n ? shared + rows[j] * stride : own + (j - n) * stride;
  }
};

// The three layouts: each makes a KV head's locator from that head's first
// float in the cache and, when there is one, in the shared cache.
struct InOrder {
  int64_t stride;
  ContiguousKeys operator()(const float* own, const float*) const { return {own, stride}; }
};
struct AtRows {
  const int32_t* rows;
  int64_t stride;
  GatheredKeys operator()(const float* own, const float*) const { return {own, rows, stride}; }
};
struct AfterShared {
  const int32_t* rows;
  int64_t n;
  int64_t stride;
  SharedThenOwnKeys operator()(const float* own, const float* shared) const {
    return {shared, rows, n, own, stride};
  }
};

// Keys scored at once: a register tile of up to 4 query heads x kKeysAtOnce
// keys, each key's chunk loaded once for the heads and each head's once for
// the keys.
constexpr int64_t kKeysAtOnce = 4;

// scores[h][c] = scale x (q[h] . key[c]) for NH query heads (dim apart from
// q) and kKeysAtOnce keys. Each dot product: W-lane partial sums over the
// head's chunks in order, TreeSum, then the tail past the last whole chunk
// in order. Every row's every score is computed this way whatever is
// scored beside it, so scores never depend on the batch.
template <int W, int NH>
inline __attribute__((always_inline)) void ScoreTile(const float* q, int64_t dim,
                                                     const float* const* key, float scale,
                                                     float scores[NH][kKeysAtOnce]) {
  using V = typename Lanes<W>::type;
  const int64_t whole = dim / W * W;
  V acc[NH][kKeysAtOnce] = {};
  for (int64_t i = 0; i < whole; i += W) {
    V kv[kKeysAtOnce];
#pragma GCC unroll 4
    for (int64_t c = 0; c < kKeysAtOnce; ++c) Load(kv[c], key[c] + i);
#pragma GCC unroll 4
    for (int h = 0; h < NH; ++h) {
      V qv;
      Load(qv, q + h * dim + i);
#pragma GCC unroll 4
      for (int64_t c = 0; c < kKeysAtOnce; ++c) acc[h][c] += qv * kv[c];
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 4
    for (int64_t c = 0; c < kKeysAtOnce; ++c) {
      float dot = TreeSum<W>(acc[h][c]);
      for (int64_t i = whole; i < dim; ++i) dot += q[h * dim + i] * key[c][i];
      scores[h][c] = dot * scale;
    }
  }
}

template <int W>
struct IntLanes {
  typedef int32_t type __attribute__((vector_size(W * sizeof(int32_t))));
};

// e^x for x <= 0 in every lane, by one sequence of float operations
// (Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, e^r a degree-6
// polynomial, 2^n written into the exponent): within 2 ulp of libm's expf,
// 6x cheaper than a libm call per score, and the same arithmetic in every
// lane, so a probability never depends on the lane or call that computes
// it. Below -87.3 (e^x under 1.2e-38, the smallest normal float) x is
// clamped there.
template <int W>
inline __attribute__((always_inline)) void ExpLanes(typename Lanes<W>::type& x) {
  using V = typename Lanes<W>::type;
  using VI = typename IntLanes<W>::type;
  x = x < -87.33654f ? V{} - 87.33654f : x;
  // n = round(x / ln2) by the 1.5 x 2^23 trick; x - n ln2 in two parts.
  const V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  V r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V y = r * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const VI exponent = (__builtin_convertvector(n, VI) + 127) << 23;
  x = y * (V)exponent;  // the same bits, as floats
}

// Softmax of n scores in place, `step` floats apart: each less the largest,
// through ExpLanes W at a time (a last short group padded), summed in order.
template <int W>
inline __attribute__((always_inline)) void Softmax(float* s, int64_t n, int64_t step) {
  using V = typename Lanes<W>::type;
  float max = s[0];
  for (int64_t j = 1; j < n; ++j) max = std::max(max, s[j * step]);
  float sum = 0;
  for (int64_t j0 = 0; j0 < n; j0 += W) {
    const int64_t m = std::min<int64_t>(W, n - j0);
    V x = {};
    for (int64_t l = 0; l < m; ++l) x[l] = s[(j0 + l) * step] - max;
    ExpLanes<W>(x);
    for (int64_t l = 0; l < m; ++l) {
      s[(j0 + l) * step] = x[l];
      sum += x[l];
    }
  }
  const float inverse = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) s[j * step] *= inverse;
}

// out[r][h x dim + i] = sum over j < length[r] of p[r][j x group + h] x
// values[j][i], for RT rows x NH heads, summed over j in order from zero:
// every output element's own chain of multiply-adds, whatever rows and
// heads share the tile. Each value chunk is loaded once for the tile.
template <int W, int RT, int NH, typename Keys>
inline __attribute__((always_inline)) void WeighValues(const float* const p[RT], int64_t group,
                                                       const int64_t length[RT], Keys value,
                                                       int64_t dim, float* const out[RT]) {
  using V = typename Lanes<W>::type;
  const int64_t whole = dim / W * W;
  const int64_t shortest = *std::min_element(length, length + RT);
  const int64_t longest = *std::max_element(length, length + RT);
  for (int64_t i = 0; i < whole; i += W) {
    V acc[RT][NH] = {};
    for (int64_t j = 0; j < shortest; ++j) {
      V vv;
      Load(vv, value[j] + i);
#pragma GCC unroll 4
      for (int r = 0; r < RT; ++r) {
#pragma GCC unroll 4
        for (int h = 0; h < NH; ++h) acc[r][h] += p[r][j * group + h] * vv;
      }
    }
    for (int64_t j = shortest; j < longest; ++j) {
      V vv;
      Load(vv, value[j] + i);
#pragma GCC unroll 4
      for (int r = 0; r < RT; ++r) {
        if (j >= length[r]) continue;
#pragma GCC unroll 4
        for (int h = 0; h < NH; ++h) acc[r][h] += p[r][j * group + h] * vv;
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) {
#pragma GCC unroll 4
      for (int h = 0; h < NH; ++h) Store(out[r] + h * dim + i, acc[r][h]);
    }
  }
  for (int64_t i = whole; i < dim; ++i) {
    for (int r = 0; r < RT; ++r) {
      for (int h = 0; h < NH; ++h) {
        float sum = 0;
        for (int64_t j = 0; j < length[r]; ++j) {
          sum += p[r][j * group + h] * value[j][i];
        }
        out[r][h * dim + i] = sum;
      }
    }
  }
}

// Rows of a value tile: what the registers hold with NH heads beside them
// (16 accumulators with AVX-512's 32 registers, 8 with AVX2's 16).
template <int W>
constexpr int kRowsPerValueTile = W >= 16 ? 4 : 2;

// The heads of a tile for `left` heads still to do: 4, 2 or 1.
inline int HeadsAtOnce(int64_t left) { return left >= 4 ? 4 : left >= 2 ? 2 : 1; }

// Scores of every row of the block over KV head g's keys, into scratch
// (row r, key j, head h at (r x stride + j) x group + h: a key's heads side
// by side, as WeighValues reads them).
template <int W, int NH, typename Keys>
inline __attribute__((always_inline)) void ScoreHeads(int64_t h0, int64_t group, int64_t dim,
                                                      int64_t rows, const int64_t* lengths,
                                                      const float* const* qs, int64_t g, Keys k,
                                                      int64_t longest, float scale, float* scratch,
                                                      int64_t stride) {
  float tile[NH][kKeysAtOnce];
  for (int64_t j0 = 0; j0 < longest; j0 += kKeysAtOnce) {
    // Past the longest row, the tile's last columns score its last key again
    // (and are dropped), so nothing past the cache is read.
    const float* key[kKeysAtOnce];
    for (int64_t c = 0; c < kKeysAtOnce; ++c) {
      key[c] = k[std::min(j0 + c, longest - 1)];
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (j0 >= lengths[r]) continue;
      ScoreTile<W, NH>(qs[r] + (g * group + h0) * dim, dim, key, scale, tile);
      const int64_t keys = std::min(kKeysAtOnce, lengths[r] - j0);
      float* row = scratch + (r * stride + j0) * group + h0;
      for (int64_t c = 0; c < keys; ++c) {
        for (int h = 0; h < NH; ++h) row[c * group + h] = tile[h][c];
      }
    }
  }
}

// Values weighed for every row of the block, RT rows at a time (a last
// short tile repeats its last row: the same arithmetic, written twice).
template <int W, int NH, typename Keys>
inline __attribute__((always_inline)) void WeighHeads(int64_t h0, int64_t group, int64_t dim,
                                                      int64_t rows, const int64_t* lengths,
                                                      int64_t g, Keys v, const float* scratch,
                                                      int64_t stride, float* const* outs) {
  constexpr int RT = kRowsPerValueTile<W>;
  for (int64_t r0 = 0; r0 < rows; r0 += RT) {
    const float* p[RT];
    float* out[RT];
    int64_t length[RT];
    for (int t = 0; t < RT; ++t) {
      const int64_t r = std::min(r0 + t, rows - 1);
      length[t] = lengths[r];
      p[t] = scratch + r * stride * group + h0;
      out[t] = outs[r] + (g * group + h0) * dim;
    }
    WeighValues<W, RT, NH>(p, group, length, v, dim, out);
  }
}

// Attention for `rows` rows over one cache, row r over its first
// lengths[r] keys: per KV head, every row's scores (the keys in the outer
// loop, so each is read once for all rows), their softmax, then the values
// weighed, a tile of rows at a time. A row's arithmetic is the same
// whatever rows share the call, so a row alone (a decode step) and the same
// row among a prompt's give bitwise-equal outputs.
template <int W, typename Layout>
inline __attribute__((always_inline)) void AttendRowsOver(Layout at,
                                                          const DecodeAttentionShape& shape,
                                                          int64_t rows, const int64_t* lengths,
                                                          const float* const* qs, const float* keys,
                                                          const float* values, float scale,
                                                          float* scratch, float* const* outs) {
  const int64_t group = shape.heads / shape.kv_heads;
  const int64_t dim = shape.dim;
  const int64_t longest = *std::max_element(lengths, lengths + rows);
  const int64_t stride = shape.length;  // keys of scratch per row
  for (int64_t g = 0; g < shape.kv_heads; ++g) {
    const bool shares = shape.shared > 0;
    const auto k = at(keys + g * shape.head_stride,
                      shares ? shape.shared_keys + g * shape.shared_head_stride : nullptr);
    const auto v = at(values + g * shape.head_stride,
                      shares ? shape.shared_values + g * shape.shared_head_stride : nullptr);
    for (int64_t h0 = 0; h0 < group;) {
      const int nh = HeadsAtOnce(group - h0);
      if (nh == 4) {
        ScoreHeads<W, 4>(h0, group, dim, rows, lengths, qs, g, k, longest, scale, scratch, stride);
      } else if (nh == 2) {
        ScoreHeads<W, 2>(h0, group, dim, rows, lengths, qs, g, k, longest, scale, scratch, stride);
      } else {
        ScoreHeads<W, 1>(h0, group, dim, rows, lengths, qs, g, k, longest, scale, scratch, stride);
      }
      h0 += nh;
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < group; ++h)
        Softmax<W>(scratch + r * stride * group + h, lengths[r], group);
    }
    for (int64_t h0 = 0; h0 < group;) {
      const int nh = HeadsAtOnce(group - h0);
      if (nh == 4) {
        WeighHeads<W, 4>(h0, group, dim, rows, lengths, g, v, scratch, stride, outs);
      } else if (nh == 2) {
        WeighHeads<W, 2>(h0, group, dim, rows, lengths, g, v, scratch, stride, outs);
      } else {
        WeighHeads<W, 1>(h0, group, dim, rows, lengths, g, v, scratch, stride, outs);
      }
      h0 += nh;
    }
  }
}

template <int W>
inline __attribute__((always_inline)) void AttendRows(const DecodeAttentionShape& shape,
                                                      int64_t rows, const int64_t* lengths,
                                                      const float* const* qs, const float* keys,
                                                      const float* values, float scale,
                                                      float* scratch, float* const* outs) {
  if (shape.shared > 0) {
    AttendRowsOver<W>(AfterShared{shape.shared_rows, shape.shared, shape.key_stride}, shape, rows,
                      lengths, qs, keys, values, scale, scratch, outs);
  } else if (shape.key_rows != nullptr) {
    AttendRowsOver<W>(AtRows{shape.key_rows, shape.key_stride}, shape, rows, lengths, qs, keys,
                      values, scale, scratch, outs);
  } else {
    AttendRowsOver<W>(InOrder{shape.key_stride}, shape, rows, lengths, qs, keys, values, scale,
                      scratch, outs);
  }
}

// The kernel of each instruction set.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void Avx512(const DecodeAttentionShape& shape, int64_t rows,
                                               const int64_t* lengths, const float* const* qs,
                                               const float* keys, const float* values, float scale,
                                               float* scratch, float* const* outs) {
  AttendRows<16>(shape, rows, lengths, qs, keys, values, scale, scratch, outs);
}

__attribute__((target("avx2,fma"))) void Avx2(const DecodeAttentionShape& shape, int64_t rows,
                                              const int64_t* lengths, const float* const* qs,
                                              const float* keys, const float* values, float scale,
                                              float* scratch, float* const* outs) {
  AttendRows<8>(shape, rows, lengths, qs, keys, values, scale, scratch, outs);
}
#endif

void Portable(const DecodeAttentionShape& shape, int64_t rows, const int64_t* lengths,
              const float* const* qs, const float* keys, const float* values, float scale,
              float* scratch, float* const* outs) {
  AttendRows<4>(shape, rows, lengths, qs, keys, values, scale, scratch, outs);
}

using Kernel = decltype(&Portable);

// The kernel of `lanes` lanes; null where this CPU lacks its instructions.
Kernel WithLanes(int lanes) {
  switch (lanes) {
#if defined(__x86_64__)
    case 16:
      return __builtin_cpu_supports("avx512f") ? &Avx512 : nullptr;
    case 8:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &Avx2 : nullptr;
#endif
    case 4:
      return &Portable;
    default:
      return nullptr;
  }
}

// The widest kernel this CPU has, under the instruction-set ceiling (isa.h).
Kernel Widest() {
  static const Kernel k16 = WithLanes(16), k8 = WithLanes(8);
  if (k16 != nullptr && IsaActive(Isa::kAvx512)) return k16;
  return k8 != nullptr && IsaActive(Isa::kAvx2) ? k8 : &Portable;
}

}  // namespace

// One row is a block of one: a decode step's arithmetic is a prompt row's.
void DecodeAttention(const DecodeAttentionShape& shape, const float* q, const float* keys,
                     const float* values, float scale, float* scratch, float* out) {
  Widest()(shape, 1, &shape.length, &q, keys, values, scale, scratch, &out);
}

void DecodeAttentionRows(const DecodeAttentionShape& shape, int64_t rows, const int64_t* lengths,
                         const float* const* qs, const float* keys, const float* values,
                         float scale, float* scratch, float* const* outs) {
  Widest()(shape, rows, lengths, qs, keys, values, scale, scratch, outs);
}

bool DecodeAttentionLanesSupported(int lanes) { return WithLanes(lanes) != nullptr; }

void DecodeAttentionWithLanes(int lanes, const DecodeAttentionShape& shape, const float* q,
                              const float* keys, const float* values, float scale, float* scratch,
                              float* out) {
  WithLanes(lanes)(shape, 1, &shape.length, &q, keys, values, scale, scratch, &out);
}

void DecodeAttentionRowsWithLanes(int lanes, const DecodeAttentionShape& shape, int64_t rows,
                                  const int64_t* lengths, const float* const* qs, const float* keys,
                                  const float* values, float scale, float* scratch,
                                  float* const* outs) {
  WithLanes(lanes)(shape, rows, lengths, qs, keys, values, scale, scratch, outs);
}

}  // namespace nightshift::engine
