// The dequantisers on hand-built parts: every E4M3 byte (the run-time
// chosen AVX2 decode against the exact table), ragged FP8 blocks, and the
// AWQ and GPTQ nibble orders against the formats' definitions.
#include "worker/engine/quant_dequant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "worker/checkpoint/quantization.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;
using checkpoint::QuantFormat;
using checkpoint::QuantizedTensor;
using checkpoint::TensorInfo;

// A quantized tensor over `parts` (bytes), laid out back to back at
// 4096-aligned offsets as a loader would place parts read from offset 0.
struct Built {
  TensorInfo info;
  std::string buffer;
  const unsigned char* data() const {
    return reinterpret_cast<const unsigned char*>(buffer.data());
  }
};

Built Build(QuantFormat format, int64_t out, int64_t in, std::vector<TensorInfo> parts,
            const std::vector<std::string>& bytes) {
  auto q = std::make_shared<QuantizedTensor>();
  q->format = format;
  q->out = out;
  q->in = in;
  Built b;
  for (size_t k = 0; k < parts.size(); ++k) {
    parts[k].size = bytes[k].size();
    q->part_offsets.push_back(b.buffer.size());
    b.buffer += bytes[k];
    b.buffer.resize((b.buffer.size() + 4095) / 4096 * 4096, '\0');
  }
  q->parts = std::move(parts);
  b.info.quant = q;
  b.info.shape = {out, in};
  return b;
}

TensorInfo Part(const char* name, DType dtype, std::vector<int64_t> shape) {
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string Ints(const std::vector<uint32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(QuantDequantTest, EveryE4M3ByteDecodesToTheTableValue) {
  std::string weight;
  for (int b = 0; b < 256; ++b) weight.push_back(static_cast<char>(b));
  auto q = std::make_shared<QuantizedTensor>();
  Built built = Build(
      QuantFormat::kFp8Channel, 1, 256,
      {Part("w.weight", DType::kF8E4M3, {1, 256}), Part("w.weight_scale", DType::kF32, {1, 1})},
      {weight, Floats({0.5f})});
  const QuantView view(built.info, built.data());
  std::vector<float> out(256);
  DequantOutputRows(view, 0, 1, out.data());
  const float* table = checkpoint::Fp8E4M3Table();
  for (int b = 0; b < 256; ++b) {
    if (std::isnan(table[b])) {
      EXPECT_TRUE(std::isnan(out[b])) << b;
    } else {
      EXPECT_EQ(out[b], table[b] * 0.5f) << b;
      EXPECT_EQ(std::signbit(out[b]), std::signbit(table[b])) << b;
    }
  }
  std::cout << "AVX2 paths: " << (QuantDequantFast() ? "yes" : "no") << "\n";
}

TEST(QuantDequantTest, RaggedFp8BlocksUseTheirOwnScale) {
  // [130, 3] with 128 x 128 blocks: rows 0..127 scale 2, rows 128, 129 scale 8.
  const int64_t out = 130, in = 3;
  std::string weight(static_cast<size_t>(out * in), static_cast<char>(0x38));  // 1.0
  Built built = Build(QuantFormat::kFp8Block, out, in,
                      {Part("w.weight", DType::kF8E4M3, {out, in}),
                       Part("w.weight_scale_inv", DType::kF32, {2, 1})},
                      {weight, Floats({2.0f, 8.0f})});
  auto q = std::const_pointer_cast<QuantizedTensor>(built.info.quant);
  q->block_out = 128;
  q->block_in = 128;
  const QuantView view(built.info, built.data());
  std::vector<float> rows(static_cast<size_t>(3 * in));
  DequantOutputRows(view, 127, 130, rows.data());
  EXPECT_EQ(rows, (std::vector<float>{2, 2, 2, 8, 8, 8, 8, 8, 8}));
}

// W^T[i, o] from the formats' definitions, for an [out 8, in 4] weight in
// groups of 2: q = (3 i + o) % 16, zero = 1 + g + o % 3, scale = 0.5 + g + o / 8.
float Expected(int64_t i, int64_t o) {
  const int64_t g = i / 2;
  const int q = static_cast<int>((3 * i + o) % 16);
  const int zero = static_cast<int>(1 + g + o % 3);
  return static_cast<float>(q - zero) * (0.5f + static_cast<float>(g) + static_cast<float>(o) / 8);
}

std::vector<float> Scales() {
  std::vector<float> s;
  for (int g = 0; g < 2; ++g) {
    for (int o = 0; o < 8; ++o)
      s.push_back(0.5f + static_cast<float>(g) + static_cast<float>(o) / 8);
  }
  return s;
}

TEST(QuantDequantTest, AwqNibblesFollowTheAwqOrder) {
  // AutoAWQ: nibble j of int32 c holds column 8c + order[j], order 0,2,4,6,1,3,5,7.
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<uint32_t> qweight(4, 0), qzeros(2, 0);
  for (int64_t i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      qweight[i] |= static_cast<uint32_t>((3 * i + order[j]) % 16) << (4 * j);
    }
  }
  for (int64_t g = 0; g < 2; ++g) {
    for (int j = 0; j < 8; ++j) qzeros[g] |= static_cast<uint32_t>(1 + g + order[j] % 3) << (4 * j);
  }
  Built built =
      Build(QuantFormat::kAwq, 8, 4,
            {Part("w.qweight", DType::kI32, {4, 1}), Part("w.qzeros", DType::kI32, {2, 1}),
             Part("w.scales", DType::kF32, {2, 8})},
            {Ints(qweight), Ints(qzeros), Floats(Scales())});
  auto q = std::const_pointer_cast<QuantizedTensor>(built.info.quant);
  q->group_size = 2;
  q->groups = 2;
  const QuantView view(built.info, built.data());
  std::vector<float> wt(32);
  DequantInputRows(view, 0, 4, 0, 8, wt.data());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t o = 0; o < 8; ++o) EXPECT_EQ(wt[i * 8 + o], Expected(i, o)) << i << " " << o;
  }
}

TEST(QuantDequantTest, GptqPacksInputRowsAndStoresZeroMinusOne) {
  // qweight [in/8 = 1, out]: input row j in bits 4j; qzeros nibble k is
  // column k, storing zero - 1; g_idx permuted: rows 0, 1 in group 1, 2, 3 in 0.
  std::vector<uint32_t> qweight(8, 0), qzeros(2, 0), g_idx = {1, 1, 0, 0};
  for (int64_t o = 0; o < 8; ++o) {
    for (int64_t i = 0; i < 4; ++i) {
      qweight[o] |= static_cast<uint32_t>((3 * i + o) % 16) << (4 * i);
    }
  }
  // Group index of row i here is g_idx[i]; Expected() uses i / 2, so swap the
  // zero points and scales of the two groups.
  for (int64_t g = 0; g < 2; ++g) {
    for (int k = 0; k < 8; ++k)
      qzeros[g] |= static_cast<uint32_t>(1 + (1 - g) + k % 3 - 1) << (4 * k);
  }
  std::vector<float> scales = Scales();
  std::rotate(scales.begin(), scales.begin() + 8, scales.end());
  Built built =
      Build(QuantFormat::kGptq, 8, 8,
            {Part("w.qweight", DType::kI32, {1, 8}), Part("w.qzeros", DType::kI32, {2, 1}),
             Part("w.scales", DType::kF32, {2, 8}), Part("w.g_idx", DType::kI32, {4})},
            {Ints(qweight), Ints(qzeros), Floats(scales), Ints(g_idx)});
  auto q = std::const_pointer_cast<QuantizedTensor>(built.info.quant);
  q->in = 4;  // four real input rows of the eight a qweight row packs
  q->group_size = 2;
  q->groups = 2;
  const QuantView view(built.info, built.data());
  EXPECT_TRUE(CheckGroupIndex(view).ok());
  std::vector<float> wt(32);
  DequantInputRows(view, 0, 4, 0, 8, wt.data());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t o = 0; o < 8; ++o) EXPECT_EQ(wt[i * 8 + o], Expected(i, o)) << i << " " << o;
  }
}

}  // namespace
}  // namespace nightshift::engine
