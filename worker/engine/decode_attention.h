// Attention of query rows over a sequence's cached keys: a decode step's
// row, or a prompt's rows, each over its own prefix of the cache.
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
// weighted sum of the values. Only the order of the float32 sums differs,
// and it is one order per row whatever shares the call (the engine's batch
// invariance rests on it): each score summed over the head in lane-wide
// chunks, the lanes then added as a fixed tree, the tail after; each output
// element summed over the keys in order. Vectorised for AVX-512 or AVX2
// (checked at run time; each sums in its own lane width), plain loops
// otherwise.
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
  // Where the j-th key the rows attend to sits in `keys` and `values`:
  // key_rows[j] (a row of a pass's trie over its ancestors' positions,
  // `length` of them); null: at j. Either way the same arithmetic, so a
  // row over gathered keys is bitwise the row over the same keys laid out
  // in order.
  const int32_t* key_rows = nullptr;
  // A cache that shares its first keys with other sequences' (KVCache::
  // Share: a prompt prefix kept once for all who hold it): the first
  // `shared` keys are at shared_rows[j] of `shared_keys` / `shared_values`
  // (shared_head_stride between KV heads, key_stride between keys), and key
  // j >= shared at j - shared of `keys` / `values`. 0: none (key_rows, or
  // in order). Each row's arithmetic is the same, so a row over a shared
  // prefix is bitwise the row over the same keys held in one cache.
  int64_t shared = 0;
  const float* shared_keys = nullptr;
  const float* shared_values = nullptr;
  int64_t shared_head_stride = 0;
  const int32_t* shared_rows = nullptr;
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

// Several rows over one cache, as a causal prompt's rows attend: row r's
// query at qs[r], its output at outs[r] (each [heads, dim]), attending to
// the first lengths[r] <= shape.length keys. Each row's output is bitwise
// DecodeAttention's for it alone (a shape of length lengths[r]): the rows
// share the loops over keys, so each key and value is read from memory once
// for all of them rather than once per row, but every row does its own
// arithmetic in its own order. `scratch` holds DecodeAttentionRowsScratch
// floats.
inline int64_t DecodeAttentionRowsScratch(const DecodeAttentionShape& s, int64_t rows) {
  return rows * DecodeAttentionScratch(s);
}
void DecodeAttentionRows(const DecodeAttentionShape& shape, int64_t rows, const int64_t* lengths,
                         const float* const* qs, const float* keys, const float* values,
                         float scale, float* scratch, float* const* outs);

// For tests: the same with `lanes` float32 lanes (16: AVX-512, 8: AVX2,
// 4: plain loops), where DecodeAttentionLanesSupported(lanes).
bool DecodeAttentionLanesSupported(int lanes);
void DecodeAttentionWithLanes(int lanes, const DecodeAttentionShape& shape, const float* q,
                              const float* keys, const float* values, float scale, float* scratch,
                              float* out);
void DecodeAttentionRowsWithLanes(int lanes, const DecodeAttentionShape& shape, int64_t rows,
                                  const int64_t* lengths, const float* const* qs, const float* keys,
                                  const float* values, float scale, float* scratch,
                                  float* const* outs);

}  // namespace nightshift::engine
