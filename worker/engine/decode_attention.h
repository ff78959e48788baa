// Attention of one query row over a sequence's cached keys: a decode step's.
//
// Through ATen such a row costs a dozen small calls (reshapes, two batched
// products, scale, softmax, copies) of a few microseconds each, and a
// 64-sequence pass of bench-1.7b makes 64 x 16 of them: 40-65 ms of its
// ~0.3 s of compute, on one core. These loops do the same arithmetic on the
// cache's memory in place, without allocating, so the rows can also be split
// across the compute pool.
//
// Numerics as kernels.h's Attention: float32 throughout, scores = (q . k) x
// scale, softmax with its maximum subtracted, the output the probabilities'
// weighted sum of the values. Only the order of the float32 sums differs.
// Vectorised for AVX-512 or AVX2 (checked at run time), plain loops otherwise.
//
// libtorch-free pure function; thread-safe.
#pragma once

#include <cstdint>

namespace nightshift::engine {

struct DecodeAttentionShape {
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // divides heads: query head h reads KV head h / (heads / kv_heads)
  int64_t dim = 0;       // per head
  int64_t length = 0;    // cached keys the row attends to (>= 1)
  // Elements between KV heads and between keys in `keys` and `values`
  // (a cache of capacity C: C x dim and dim).
  int64_t head_stride = 0;
  int64_t key_stride = 0;
};

// Floats of scratch DecodeAttention needs.
inline int64_t DecodeAttentionScratch(const DecodeAttentionShape& s) {
  return s.heads / s.kv_heads * s.length;
}

// out[h * dim + i] = sum_j p[h, j] values[h / g, j, i], p[h] = softmax_j of
// scale x (q[h] . keys[h / g, j]), for every query head h of q [heads, dim].
// `scratch` holds DecodeAttentionScratch(shape) floats.
void DecodeAttention(const DecodeAttentionShape& shape, const float* q, const float* keys,
                     const float* values, float scale, float* scratch, float* out);

// For tests: the same with `lanes` float32 lanes (16: AVX-512, 8: AVX2,
// 4: plain loops), where DecodeAttentionLanesSupported(lanes).
bool DecodeAttentionLanesSupported(int lanes);
void DecodeAttentionWithLanes(int lanes, const DecodeAttentionShape& shape, const float* q,
                              const float* keys, const float* values, float scale, float* scratch,
                              float* out);

}  // namespace nightshift::engine
