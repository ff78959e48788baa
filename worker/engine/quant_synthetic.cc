#include "worker/engine/quant_synthetic.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

namespace nightshift::engine {
namespace {

using checkpoint::DType;
using checkpoint::QuantFormat;
using checkpoint::QuantizedTensor;
using checkpoint::TensorInfo;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `count` scales about 0.01 in `dtype` (F32, BF16 or F16).
std::string Scales(int64_t count, DType dtype, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(0.002f, 0.02f);
  std::string out;
  for (int64_t k = 0; k < count; ++k) {
    const float s = dist(rng);
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    if (dtype == DType::kF32) {
      out.append(reinterpret_cast<const char*>(&s), 4);
    } else if (dtype == DType::kBF16) {
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      out.append(reinterpret_cast<const char*>(&h), 2);
    } else {
      // F16 of a normal value in [2^-9, 2^-5]: exponent rebiased, mantissa truncated.
      const uint32_t exponent = ((bits >> 23) & 0xff) - 127 + 15;
      const uint16_t h = static_cast<uint16_t>((exponent << 10) | ((bits >> 13) & 0x3ff));
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return out;
}

std::string RandomInts(int64_t count, std::mt19937_64& rng) {
  std::string out(static_cast<size_t>(count) * 4, '\0');
  for (int64_t k = 0; k < count; ++k) {
    const uint32_t v = static_cast<uint32_t>(rng());
    std::memcpy(&out[static_cast<size_t>(k) * 4], &v, 4);
  }
  return out;
}

TensorInfo Part(const std::string& name, DType dtype, std::vector<int64_t> shape,
                const std::string& bytes) {
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.size = bytes.size();
  return t;
}

}  // namespace

SyntheticQuantWeight MakeSyntheticQuantWeight(const QuantWeightSpec& spec, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto q = std::make_shared<QuantizedTensor>();
  q->format = spec.format;
  q->out = spec.out;
  q->in = spec.in;
  std::vector<TensorInfo> parts;
  std::vector<std::string> bytes;
  auto add = [&](const std::string& name, DType dtype, std::vector<int64_t> shape,
                 std::string data) {
    parts.push_back(Part("synthetic." + name, dtype, std::move(shape), data));
    bytes.push_back(std::move(data));
  };
  if (spec.format == QuantFormat::kAwq || spec.format == QuantFormat::kGptq) {
    const bool awq = spec.format == QuantFormat::kAwq;
    q->group_size = spec.group_size > 0 ? spec.group_size : spec.in;
    q->groups = CeilDiv(spec.in, q->group_size);
    if (awq) {
      add("qweight", DType::kI32, {spec.in, spec.out / 8}, RandomInts(spec.in * spec.out / 8, rng));
    } else {
      add("qweight", DType::kI32, {spec.in / 8, spec.out}, RandomInts(spec.in / 8 * spec.out, rng));
    }
    add("qzeros", DType::kI32, {q->groups, spec.out / 8},
        RandomInts(q->groups * spec.out / 8, rng));
    add("scales", spec.scale_dtype, {q->groups, spec.out},
        Scales(q->groups * spec.out, spec.scale_dtype, rng));
    if (!awq && spec.g_idx) {
      // desc_act: the rows of each group scattered over the input.
      std::vector<int64_t> order(static_cast<size_t>(spec.in));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<int32_t> g_idx(static_cast<size_t>(spec.in));
      for (int64_t j = 0; j < spec.in; ++j) {
        g_idx[static_cast<size_t>(order[static_cast<size_t>(j)])] =
            static_cast<int32_t>(j / q->group_size);
      }
      add("g_idx", DType::kI32, {spec.in},
          std::string(reinterpret_cast<const char*>(g_idx.data()), g_idx.size() * 4));
    }
  } else {
    std::string weight(static_cast<size_t>(spec.out * spec.in), '\0');
    for (char& b : weight) {
      uint8_t v = static_cast<uint8_t>(rng());
      if ((v & 0x7f) == 0x7f) v ^= 0x01;  // never NaN
      b = static_cast<char>(v);
    }
    add("weight", DType::kF8E4M3, {spec.out, spec.in}, std::move(weight));
    if (spec.format == QuantFormat::kFp8Channel) {
      add("weight_scale", spec.scale_dtype, {spec.out, 1}, Scales(spec.out, spec.scale_dtype, rng));
    } else {
      q->block_out = spec.block_out;
      q->block_in = spec.block_in;
      const int64_t rows = CeilDiv(spec.out, spec.block_out),
                    cols = CeilDiv(spec.in, spec.block_in);
      add("weight_scale_inv", spec.scale_dtype, {rows, cols},
          Scales(rows * cols, spec.scale_dtype, rng));
    }
  }
  SyntheticQuantWeight w;
  for (size_t k = 0; k < parts.size(); ++k) {
    q->part_offsets.push_back(w.bytes.size());
    w.bytes += bytes[k];
    w.bytes.resize((w.bytes.size() + checkpoint::kPartAlign - 1) / checkpoint::kPartAlign *
                       checkpoint::kPartAlign,
                   '\0');
  }
  q->region_bytes = w.bytes.size();
  q->parts = std::move(parts);
  w.info.name = "synthetic.weight";
  w.info.dtype = q->parts[0].dtype;
  w.info.shape = {spec.out, spec.in};
  for (const TensorInfo& p : q->parts) w.info.size += p.size;
  w.info.quant = std::move(q);
  return w;
}

}  // namespace nightshift::engine
