#include "worker/engine/decode_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace nightshift::engine {
namespace {

// The definition in double precision: softmax of the scaled scores, then
// their weighted sum of the values.
std::vector<double> Reference(const DecodeAttentionShape& s, const std::vector<float>& q,
                              const std::vector<float>& keys, const std::vector<float>& values,
                              double scale) {
  const int64_t group = s.heads / s.kv_heads;
  std::vector<double> out(static_cast<size_t>(s.heads * s.dim), 0.0);
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t g = h / group;
    std::vector<double> p(static_cast<size_t>(s.length));
    double max = -INFINITY;
    for (int64_t j = 0; j < s.length; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < s.dim; ++i) {
        dot += static_cast<double>(q[static_cast<size_t>(h * s.dim + i)]) *
               keys[static_cast<size_t>(g * s.head_stride + j * s.key_stride + i)];
      }
      p[static_cast<size_t>(j)] = dot * scale;
      max = std::max(max, p[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (double& x : p) sum += x = std::exp(x - max);
    for (int64_t j = 0; j < s.length; ++j) {
      for (int64_t i = 0; i < s.dim; ++i) {
        out[static_cast<size_t>(h * s.dim + i)] +=
            p[static_cast<size_t>(j)] / sum *
            values[static_cast<size_t>(g * s.head_stride + j * s.key_stride + i)];
      }
    }
  }
  return out;
}

TEST(DecodeAttentionTest, EqualsADoublePrecisionReferenceForEveryShapeAndLaneWidth) {
  int checked_lanes = 0;
  for (int lanes : {4, 8, 16}) {
    if (!DecodeAttentionLanesSupported(lanes)) continue;
    ++checked_lanes;
    // Head widths with and without a tail past the lanes; groups of 1 (MHA),
    // 4 and 6 (more heads than scored at once) and all heads on one KV head
    // (MQA); a single key and a cache longer than a row of registers.
    for (int64_t dim : {4, 20, 64, 128}) {
      for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {12, 2}, {5, 1}}) {
        for (int64_t length : {1, 7, 300}) {
          // Keys dim + 3 apart, to catch a stride taken as dim; a cache of
          // capacity length + 5.
          const DecodeAttentionShape s{heads,  kv_heads, dim, length, (length + 5) * (dim + 3),
                                       dim + 3};
          const size_t cache = static_cast<size_t>(kv_heads * s.head_stride);
          std::vector<float> q(static_cast<size_t>(heads * dim)), keys(cache), values(cache);
          for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i) * 0.37f);
          for (size_t i = 0; i < cache; ++i) {
            keys[i] = std::cos(static_cast<float>(i) * 0.11f) * 2;
            values[i] = std::sin(static_cast<float>(i) * 0.23f + 1);
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          std::vector<float> scratch(static_cast<size_t>(DecodeAttentionScratch(s)));
          std::vector<float> out(q.size() + 1, -99.0f);
          DecodeAttentionWithLanes(lanes, s, q.data(), keys.data(), values.data(), scale,
                                   scratch.data(), out.data());
          const std::vector<double> want = Reference(s, q, keys, values, scale);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
                << lanes << " lanes, dim " << dim << ", " << heads << "/" << kv_heads << " heads, "
                << length << " keys, element " << i;
          }
          EXPECT_EQ(out.back(), -99.0f) << "wrote past the output";
        }
      }
    }
  }
  EXPECT_GE(checked_lanes, 1);
  EXPECT_TRUE(DecodeAttentionLanesSupported(4));
}

// Scores far apart (one key 200 above the rest: e^-200 is below the float
// range, which the kernel's exp clamps) and a spread of moderate ones still
// match the double-precision definition on every lane width.
TEST(DecodeAttentionTest, ScoresFarApartUnderflowCleanly) {
  for (int lanes : {4, 8, 16}) {
    if (!DecodeAttentionLanesSupported(lanes)) continue;
    const int64_t dim = 16, length = 37;
    const DecodeAttentionShape s{1, 1, dim, length, length * dim, dim};
    std::vector<float> q(dim, 1.0f), keys(static_cast<size_t>(length * dim)), values(keys.size());
    for (int64_t j = 0; j < length; ++j) {
      for (int64_t i = 0; i < dim; ++i) {
        // Key 5 scores 200; the others -30 .. +2, some a few apart.
        keys[static_cast<size_t>(j * dim + i)] =
            j == 5 ? 12.5f : static_cast<float>(j % 9) * 0.25f - 1.9f;
        values[static_cast<size_t>(j * dim + i)] = static_cast<float>(j) + 0.01f * i;
      }
    }
    std::vector<float> scratch(static_cast<size_t>(DecodeAttentionScratch(s))), out(dim);
    DecodeAttentionWithLanes(lanes, s, q.data(), keys.data(), values.data(), 1.0f, scratch.data(),
                             out.data());
    const std::vector<double> want = Reference(s, q, keys, values, 1.0);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(out[static_cast<size_t>(i)], want[static_cast<size_t>(i)], 1e-5) << lanes;
      EXPECT_NEAR(out[static_cast<size_t>(i)], 5.0 + 0.01 * i, 1e-5) << lanes;
    }
    // Without the far key: moderate scores, every one counting.
    keys[5 * dim] = 0;
    DecodeAttentionWithLanes(lanes, s, q.data(), keys.data(), values.data(), 1.0f, scratch.data(),
                             out.data());
    const std::vector<double> spread = Reference(s, q, keys, values, 1.0);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(out[static_cast<size_t>(i)], spread[static_cast<size_t>(i)],
                  1e-5 * (1 + std::fabs(spread[static_cast<size_t>(i)])))
          << lanes;
    }
  }
}

TEST(DecodeAttentionTest, TheWidestKernelAgreesWithThePlainLoops) {
  // bench-1.7b's heads, 33 of a 64-key cache.
  const DecodeAttentionShape s{16, 4, 128, 33, 64 * 128, 128};
  const size_t cache = static_cast<size_t>(s.kv_heads * s.head_stride);
  std::vector<float> q(16 * 128), keys(cache), values(cache);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::cos(static_cast<float>(i));
  for (size_t i = 0; i < cache; ++i) {
    keys[i] = std::sin(static_cast<float>(i) * 0.5f);
    values[i] = std::cos(static_cast<float>(i) * 0.3f);
  }
  std::vector<float> scratch(static_cast<size_t>(DecodeAttentionScratch(s)));
  std::vector<float> widest(q.size()), plain(q.size());
  DecodeAttention(s, q.data(), keys.data(), values.data(), 0.088f, scratch.data(), widest.data());
  DecodeAttentionWithLanes(4, s, q.data(), keys.data(), values.data(), 0.088f, scratch.data(),
                           plain.data());
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(widest[i], plain[i], 1e-5) << i;
}

// Rows of one cache attended together give each row bitwise what it gets
// alone, on every lane width: rows of a causal prompt (each one key longer),
// lengths in any order, a row of one key, more rows than the kernel's loops
// hold, and shapes with tails past the lanes and past the heads scored at
// once.
TEST(DecodeAttentionTest, RowsAttendedTogetherEqualEachRowAloneBitwise) {
  int checked_lanes = 0;
  for (int lanes : {4, 8, 16}) {
    if (!DecodeAttentionLanesSupported(lanes)) continue;
    ++checked_lanes;
    for (int64_t dim : {20, 128}) {
      for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{8, 2}, {12, 2}, {5, 1}}) {
        for (const std::vector<int64_t>& lengths :
             {std::vector<int64_t>{1}, std::vector<int64_t>{30, 31, 32, 33, 34, 35, 36, 37, 38},
              std::vector<int64_t>{17, 1, 63, 5, 61, 2}}) {
          const int64_t rows = static_cast<int64_t>(lengths.size());
          // A cache of exactly the longest row's keys (not a multiple of the
          // keys scored at once): a read past it is out of bounds.
          const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
          const DecodeAttentionShape s{heads, kv_heads, dim, longest, longest * (dim + 3), dim + 3};
          const size_t cache = static_cast<size_t>(kv_heads * s.head_stride);
          const size_t row = static_cast<size_t>(heads * dim);
          std::vector<float> q(static_cast<size_t>(rows) * row), keys(cache), values(cache);
          for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i) * 0.37f);
          for (size_t i = 0; i < cache; ++i) {
            keys[i] = std::cos(static_cast<float>(i) * 0.11f) * 3;
            values[i] = std::sin(static_cast<float>(i) * 0.23f + 1);
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          std::vector<float> together(q.size(), -99.0f);
          std::vector<const float*> qs;
          std::vector<float*> outs;
          for (int64_t r = 0; r < rows; ++r) {
            qs.push_back(q.data() + r * static_cast<int64_t>(row));
            outs.push_back(together.data() + r * static_cast<int64_t>(row));
          }
          std::vector<float> scratch(static_cast<size_t>(DecodeAttentionRowsScratch(s, rows)));
          DecodeAttentionRowsWithLanes(lanes, s, rows, lengths.data(), qs.data(), keys.data(),
                                       values.data(), scale, scratch.data(), outs.data());
          for (int64_t r = 0; r < rows; ++r) {
            DecodeAttentionShape one = s;
            one.length = lengths[static_cast<size_t>(r)];
            std::vector<float> alone_scratch(static_cast<size_t>(DecodeAttentionScratch(one)));
            std::vector<float> alone(row);
            DecodeAttentionWithLanes(lanes, one, qs[static_cast<size_t>(r)], keys.data(),
                                     values.data(), scale, alone_scratch.data(), alone.data());
            EXPECT_EQ(std::memcmp(alone.data(), outs[static_cast<size_t>(r)], row * sizeof(float)),
                      0)
                << lanes << " lanes, dim " << dim << ", " << heads << "/" << kv_heads
                << " heads, row " << r << " of " << rows << " (" << one.length << " keys)";
          }
        }
      }
    }
  }
  EXPECT_GE(checked_lanes, 1);
}

// Rows over gathered keys (a trie row's ancestors, scattered in the cache)
// get bitwise what they get over the same keys laid out in order, alone or
// several rows together, on every lane width.
TEST(DecodeAttentionTest, GatheredKeysEqualTheSameKeysLaidOutInOrderBitwise) {
  int checked_lanes = 0;
  for (int lanes : {4, 8, 16}) {
    if (!DecodeAttentionLanesSupported(lanes)) continue;
    ++checked_lanes;
    const int64_t dim = 20, heads = 12, kv_heads = 2, capacity = 90;
    const DecodeAttentionShape cache_shape{heads,  kv_heads, dim, capacity, capacity * (dim + 3),
                                           dim + 3};
    const size_t cache = static_cast<size_t>(kv_heads * cache_shape.head_stride);
    std::vector<float> keys(cache), values(cache);
    for (size_t i = 0; i < cache; ++i) {
      keys[i] = std::cos(static_cast<float>(i) * 0.13f) * 2;
      values[i] = std::sin(static_cast<float>(i) * 0.29f + 1);
    }
    // Every third position from the end, then a few near the start.
    std::vector<int32_t> key_rows;
    for (int32_t k = 89; k >= 30; k -= 3) key_rows.push_back(k);
    for (int32_t k : {0, 4, 5, 11}) key_rows.push_back(k);
    const int64_t length = static_cast<int64_t>(key_rows.size());
    // The same keys copied out in that order.
    const DecodeAttentionShape in_order{heads, kv_heads, dim, length, length * (dim + 3), dim + 3};
    std::vector<float> ordered_keys(static_cast<size_t>(kv_heads * in_order.head_stride));
    std::vector<float> ordered_values(ordered_keys.size());
    for (int64_t g = 0; g < kv_heads; ++g) {
      for (int64_t j = 0; j < length; ++j) {
        const size_t from = static_cast<size_t>(g * cache_shape.head_stride +
                                                key_rows[static_cast<size_t>(j)] * (dim + 3));
        const size_t to = static_cast<size_t>(g * in_order.head_stride + j * (dim + 3));
        std::copy_n(keys.begin() + from, dim, ordered_keys.begin() + to);
        std::copy_n(values.begin() + from, dim, ordered_values.begin() + to);
      }
    }
    const std::vector<int64_t> lengths = {length, 1, length - 5, 9, length - 1};
    const int64_t rows = static_cast<int64_t>(lengths.size());
    const size_t row = static_cast<size_t>(heads * dim);
    std::vector<float> q(static_cast<size_t>(rows) * row);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i) * 0.41f);
    std::vector<const float*> qs;
    std::vector<float> gathered(q.size(), -9.0f), ordered(q.size(), -7.0f);
    std::vector<float*> gathered_outs, ordered_outs;
    for (int64_t r = 0; r < rows; ++r) {
      qs.push_back(q.data() + r * static_cast<int64_t>(row));
      gathered_outs.push_back(gathered.data() + r * static_cast<int64_t>(row));
      ordered_outs.push_back(ordered.data() + r * static_cast<int64_t>(row));
    }
    DecodeAttentionShape over_rows = in_order;
    over_rows.head_stride = cache_shape.head_stride;
    over_rows.key_rows = key_rows.data();
    std::vector<float> scratch(static_cast<size_t>(DecodeAttentionRowsScratch(in_order, rows)));
    const float scale = 0.2f;
    DecodeAttentionRowsWithLanes(lanes, over_rows, rows, lengths.data(), qs.data(), keys.data(),
                                 values.data(), scale, scratch.data(), gathered_outs.data());
    DecodeAttentionRowsWithLanes(lanes, in_order, rows, lengths.data(), qs.data(),
                                 ordered_keys.data(), ordered_values.data(), scale, scratch.data(),
                                 ordered_outs.data());
    EXPECT_EQ(std::memcmp(gathered.data(), ordered.data(), q.size() * sizeof(float)), 0)
        << lanes << " lanes";
    EXPECT_NE(gathered[0], -9.0f);
  }
  EXPECT_GE(checked_lanes, 1);
}

// Rows of a cache that shares its first keys with others (a prompt prefix
// kept once, DecodeAttentionShape::shared: gathered from the shared cache,
// the rest from its own) get bitwise what they get over the same keys in
// one cache, on every lane width, whatever their lengths.
TEST(DecodeAttentionTest, ASharedPrefixThenOwnKeysEqualTheSameKeysInOneCacheBitwise) {
  int checked_lanes = 0;
  for (int lanes : {4, 8, 16}) {
    if (!DecodeAttentionLanesSupported(lanes)) continue;
    ++checked_lanes;
    const int64_t dim = 20, heads = 12, kv_heads = 2, stride = dim + 3;
    // The shared cache holds 40 positions, the row's own 25: different head
    // strides, to catch one taken for the other.
    const int64_t shared_capacity = 40, own_capacity = 25;
    auto fill = [](size_t n, float phase) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = std::cos(static_cast<float>(i) * 0.17f + phase) * 2;
      return v;
    };
    const std::vector<float> shared_keys = fill(kv_heads * shared_capacity * stride, 0.1f);
    const std::vector<float> shared_values = fill(shared_keys.size(), 0.7f);
    const std::vector<float> own_keys = fill(kv_heads * own_capacity * stride, 1.3f);
    const std::vector<float> own_values = fill(own_keys.size(), 2.1f);
    // A path through a trie's shared rows: the root's first 9, then a branch.
    std::vector<int32_t> shared_rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 21, 22, 30};
    const int64_t shared = static_cast<int64_t>(shared_rows.size()), own = 17;
    const int64_t length = shared + own;
    // The same keys copied into one cache in that order.
    const DecodeAttentionShape in_order{heads, kv_heads, dim, length, length * stride, stride};
    std::vector<float> ordered_keys(static_cast<size_t>(kv_heads * in_order.head_stride));
    std::vector<float> ordered_values(ordered_keys.size());
    for (int64_t g = 0; g < kv_heads; ++g) {
      for (int64_t j = 0; j < length; ++j) {
        const bool in_shared = j < shared;
        const size_t from = static_cast<size_t>(
            in_shared ? g * shared_capacity * stride + shared_rows[static_cast<size_t>(j)] * stride
                      : g * own_capacity * stride + (j - shared) * stride);
        const size_t to = static_cast<size_t>(g * in_order.head_stride + j * stride);
        std::copy_n((in_shared ? shared_keys : own_keys).begin() + from, dim,
                    ordered_keys.begin() + to);
        std::copy_n((in_shared ? shared_values : own_values).begin() + from, dim,
                    ordered_values.begin() + to);
      }
    }
    // Rows over all of it, over the shared keys only, one past them, fewer.
    const std::vector<int64_t> lengths = {length, shared, shared + 1, 5, length - 2};
    const int64_t rows = static_cast<int64_t>(lengths.size());
    const size_t row = static_cast<size_t>(heads * dim);
    std::vector<float> q(static_cast<size_t>(rows) * row);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i) * 0.41f);
    std::vector<const float*> qs;
    std::vector<float> split(q.size(), -9.0f), ordered(q.size(), -7.0f);
    std::vector<float*> split_outs, ordered_outs;
    for (int64_t r = 0; r < rows; ++r) {
      qs.push_back(q.data() + r * static_cast<int64_t>(row));
      split_outs.push_back(split.data() + r * static_cast<int64_t>(row));
      ordered_outs.push_back(ordered.data() + r * static_cast<int64_t>(row));
    }
    DecodeAttentionShape after_shared = in_order;
    after_shared.head_stride = own_capacity * stride;
    after_shared.shared = shared;
    after_shared.shared_keys = shared_keys.data();
    after_shared.shared_values = shared_values.data();
    after_shared.shared_head_stride = shared_capacity * stride;
    after_shared.shared_rows = shared_rows.data();
    std::vector<float> scratch(static_cast<size_t>(DecodeAttentionRowsScratch(in_order, rows)));
    const float scale = 0.2f;
    DecodeAttentionRowsWithLanes(lanes, after_shared, rows, lengths.data(), qs.data(),
                                 own_keys.data(), own_values.data(), scale, scratch.data(),
                                 split_outs.data());
    DecodeAttentionRowsWithLanes(lanes, in_order, rows, lengths.data(), qs.data(),
                                 ordered_keys.data(), ordered_values.data(), scale, scratch.data(),
                                 ordered_outs.data());
    EXPECT_EQ(std::memcmp(split.data(), ordered.data(), q.size() * sizeof(float)), 0)
        << lanes << " lanes";
    EXPECT_NE(split[0], -9.0f);
    // One row alone, through DecodeAttention, the same.
    std::vector<float> alone(row, -5.0f);
    after_shared.length = length;
    DecodeAttentionWithLanes(lanes, after_shared, q.data(), own_keys.data(), own_values.data(),
                             scale, scratch.data(), alone.data());
    EXPECT_EQ(std::memcmp(alone.data(), ordered.data(), row * sizeof(float)), 0)
        << lanes << " lanes";
  }
  EXPECT_GE(checked_lanes, 1);
}

}  // namespace
}  // namespace nightshift::engine
