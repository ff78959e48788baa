#include "worker/engine/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/engine/isa.h"

namespace nightshift::engine {
namespace {

// Query heads of a group scored against each key at once: the key is read
// once for all of them, and their accumulators stay in registers.
constexpr int64_t kHeadsAtOnce = 4;

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

template <int W>
inline __attribute__((always_inline)) float Sum(const typename Lanes<W>::type& v) {
  float sum = 0;
  for (int l = 0; l < W; ++l) sum += v[l];
  return sum;
}

// out[0, dim) += p x row[0, dim).
template <int W>
inline __attribute__((always_inline)) void AddScaled(float p, const float* row, int64_t dim,
                                                     float* out) {
  using V = typename Lanes<W>::type;
  const int64_t whole = dim / W * W;
  for (int64_t i = 0; i < whole; i += W) {
    V o, r;
    Load(o, out + i);
    Load(r, row + i);
    Store(out + i, o + p * r);
  }
  for (int64_t i = whole; i < dim; ++i) out[i] += p * row[i];
}

// Softmax of n scores in place.
inline void Softmax(float* s, int64_t n) {
  const float max = *std::max_element(s, s + n);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  const float inverse = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) s[j] *= inverse;
}

template <int W>
inline __attribute__((always_inline)) void Attend(const DecodeAttentionShape& shape, const float* q,
                                                  const float* keys, const float* values,
                                                  float scale, float* scratch, float* out) {
  using V = typename Lanes<W>::type;
  const int64_t group = shape.heads / shape.kv_heads;
  const int64_t length = shape.length;
  const int64_t dim = shape.dim;
  const int64_t whole = dim / W * W;
  for (int64_t g = 0; g < shape.kv_heads; ++g) {
    const float* k = keys + g * shape.head_stride;
    const float* v = values + g * shape.head_stride;
    const float* qg = q + g * group * dim;
    float* og = out + g * group * dim;
    for (int64_t h0 = 0; h0 < group; h0 += kHeadsAtOnce) {
      const int64_t n = std::min(kHeadsAtOnce, group - h0);
      const float* qh = qg + h0 * dim;
      for (int64_t j = 0; j < length; ++j) {
        const float* kj = k + j * shape.key_stride;
        V acc[kHeadsAtOnce] = {};
        for (int64_t i = 0; i < whole; i += W) {
          V kv;
          Load(kv, kj + i);
          for (int64_t h = 0; h < n; ++h) {
            V qv;
            Load(qv, qh + h * dim + i);
            acc[h] += qv * kv;
          }
        }
        for (int64_t h = 0; h < n; ++h) {
          float dot = Sum<W>(acc[h]);
          for (int64_t i = whole; i < dim; ++i) dot += qh[h * dim + i] * kj[i];
          scratch[(h0 + h) * length + j] = dot * scale;
        }
      }
    }
    for (int64_t h = 0; h < group; ++h) Softmax(scratch + h * length, length);
    std::fill(og, og + group * dim, 0.0f);
    for (int64_t j = 0; j < length; ++j) {
      const float* vj = v + j * shape.key_stride;
      for (int64_t h = 0; h < group; ++h) {
        AddScaled<W>(scratch[h * length + j], vj, dim, og + h * dim);
      }
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void Avx512(const DecodeAttentionShape& shape, const float* q,
                                               const float* keys, const float* values, float scale,
                                               float* scratch, float* out) {
  Attend<16>(shape, q, keys, values, scale, scratch, out);
}

__attribute__((target("avx2,fma"))) void Avx2(const DecodeAttentionShape& shape, const float* q,
                                              const float* keys, const float* values, float scale,
                                              float* scratch, float* out) {
  Attend<8>(shape, q, keys, values, scale, scratch, out);
}
#endif

void Portable(const DecodeAttentionShape& shape, const float* q, const float* keys,
              const float* values, float scale, float* scratch, float* out) {
  Attend<4>(shape, q, keys, values, scale, scratch, out);
}

using Kernel = void (*)(const DecodeAttentionShape&, const float*, const float*, const float*,
                        float, float*, float*);

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

void DecodeAttention(const DecodeAttentionShape& shape, const float* q, const float* keys,
                     const float* values, float scale, float* scratch, float* out) {
  Widest()(shape, q, keys, values, scale, scratch, out);
}

bool DecodeAttentionLanesSupported(int lanes) { return WithLanes(lanes) != nullptr; }

void DecodeAttentionWithLanes(int lanes, const DecodeAttentionShape& shape, const float* q,
                              const float* keys, const float* values, float scale, float* scratch,
                              float* out) {
  WithLanes(lanes)(shape, q, keys, values, scale, scratch, out);
}

}  // namespace nightshift::engine
