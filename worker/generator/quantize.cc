#include "worker/generator/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/checkpoint/quantization.h"
#include "worker/generator/generator.h"

namespace nightshift::generator {
namespace {

using checkpoint::DType;
using checkpoint::QuantFormat;
using nlohmann::json;

// AutoAWQ packs output column 8c + k in nibble kAwqNibble[k] of int32 c.
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `x` rounded to `dtype` (F32, F16 or BF16) and back.
float RoundTo(float x, DType dtype) {
  unsigned char bytes[4];
  FromFloat(&x, 1, dtype, bytes);
  if (dtype == DType::kF32) return x;
  uint16_t h;
  std::memcpy(&h, bytes, 2);
  if (dtype == DType::kBF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // F16 -> float, normal and subnormal (scales are never inf or NaN here).
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -24)
                              : std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

void Put(std::string& bytes, int64_t index, const void* value, size_t size) {
  std::memcpy(bytes.data() + index * static_cast<int64_t>(size), value, size);
}

void PutI32(std::string& bytes, int64_t index, uint32_t value) { Put(bytes, index, &value, 4); }

uint32_t GetI32(const std::string& bytes, int64_t index) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + index * 4, 4);
  return v;
}

void PutFloat(std::string& bytes, int64_t index, float value, DType dtype) {
  unsigned char b[4];
  FromFloat(&value, 1, dtype, b);
  Put(bytes, index, b, checkpoint::DTypeSize(dtype));
}

std::vector<std::string> QuantizeInt4(const QuantizeSpec& spec, const float* w, int64_t out,
                                      int64_t in) {
  const bool awq = spec.format == QuantFormat::kAwq;
  const int64_t g = spec.group_size;
  const int64_t groups = in / g;
  std::string qweight(static_cast<size_t>(in * out / 2), '\0');
  std::string qzeros(static_cast<size_t>(groups * out / 2), '\0');
  std::string scales(static_cast<size_t>(groups * out * 2), '\0');
  std::string g_idx(static_cast<size_t>(in * 4), '\0');
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w + o * in;
    for (int64_t gi = 0; gi < groups; ++gi) {
      float lo = 0, hi = 0;  // AutoAWQ's range includes zero
      for (int64_t i = gi * g; i < (gi + 1) * g; ++i)
        lo = std::min(lo, row[i]), hi = std::max(hi, row[i]);
      const float scale = RoundTo(std::max(hi - lo, 1e-5f) / 15.0f, DType::kF16);
      const int zero_min = awq ? 0 : 1;  // GPTQ v1 stores zero - 1, which must not wrap
      const int zero = std::clamp(static_cast<int>(std::nearbyint(-lo / scale)), zero_min, 15);
      PutFloat(scales, gi * out + o, scale, DType::kF16);
      const int64_t zword = gi * (out / 8) + o / 8;
      const int znibble = awq ? kAwqNibble[o % 8] : static_cast<int>(o % 8);
      const uint32_t zstored = static_cast<uint32_t>(awq ? zero : zero - 1);
      PutI32(qzeros, zword, GetI32(qzeros, zword) | zstored << (4 * znibble));
      for (int64_t i = gi * g; i < (gi + 1) * g; ++i) {
        const int q = std::clamp(static_cast<int>(std::nearbyint(row[i] / scale)) + zero, 0, 15);
        const int64_t word = awq ? i * (out / 8) + o / 8 : (i / 8) * out + o;
        const int nibble = awq ? kAwqNibble[o % 8] : static_cast<int>(i % 8);
        PutI32(qweight, word, GetI32(qweight, word) | static_cast<uint32_t>(q) << (4 * nibble));
      }
    }
  }
  if (awq) return {qweight, qzeros, scales};
  for (int64_t i = 0; i < in; ++i) PutI32(g_idx, i, static_cast<uint32_t>(i / g));
  return {qweight, qzeros, scales, g_idx};
}

std::vector<std::string> QuantizeFp8(const QuantizeSpec& spec, const float* w, int64_t out,
                                     int64_t in, DType model_dtype) {
  std::string weight(static_cast<size_t>(out * in), '\0');
  const bool block = spec.format == QuantFormat::kFp8Block;
  const int64_t b = spec.block;
  const int64_t rows = block ? CeilDiv(out, b) : out;
  const int64_t columns = block ? CeilDiv(in, b) : 1;
  const DType scale_dtype = block ? DType::kF32 : model_dtype;
  std::string scales(static_cast<size_t>(rows * columns) * checkpoint::DTypeSize(scale_dtype),
                     '\0');
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      const int64_t o0 = block ? r * b : r, o1 = block ? std::min(out, o0 + b) : r + 1;
      const int64_t i0 = block ? c * b : 0, i1 = block ? std::min(in, i0 + b) : in;
      float absmax = 0;
      for (int64_t o = o0; o < o1; ++o) {
        for (int64_t i = i0; i < i1; ++i) absmax = std::max(absmax, std::fabs(w[o * in + i]));
      }
      float scale = RoundTo(absmax > 0 ? absmax / 448.0f : 1.0f, scale_dtype);
      PutFloat(scales, r * columns + c, scale, scale_dtype);
      for (int64_t o = o0; o < o1; ++o) {
        for (int64_t i = i0; i < i1; ++i) {
          weight[static_cast<size_t>(o * in + i)] =
              static_cast<char>(ToE4M3(w[o * in + i] / scale));
        }
      }
    }
  }
  return {weight, scales};
}

}  // namespace

StatusOr<QuantFormat> ParseQuantizeFormat(const std::string& name) {
  if (name == "awq") return QuantFormat::kAwq;
  if (name == "gptq") return QuantFormat::kGptq;
  if (name == "fp8") return QuantFormat::kFp8Channel;
  if (name == "fp8-block") return QuantFormat::kFp8Block;
  return InvalidArgument("--quantize must be awq, gptq, fp8 or fp8-block, got '" + name + "'");
}

json QuantizationConfigJson(const QuantizeSpec& spec) {
  switch (spec.format) {
    case QuantFormat::kAwq:
      return {{"quant_method", "awq"},
              {"version", "gemm"},
              {"bits", 4},
              {"group_size", spec.group_size},
              {"zero_point", true},
              {"modules_to_not_convert", nullptr}};
    case QuantFormat::kGptq:
      return {
          {"quant_method", "gptq"},        {"checkpoint_format", "gptq"}, {"bits", 4},
          {"group_size", spec.group_size}, {"desc_act", false},           {"sym", false},
          {"static_groups", false},        {"true_sequential", true},     {"damp_percent", 0.01}};
    case QuantFormat::kFp8Channel: {
      const json weights = {{"num_bits", 8},       {"type", "float"},  {"strategy", "channel"},
                            {"symmetric", true},   {"dynamic", false}, {"group_size", nullptr},
                            {"observer", "minmax"}};
      const json activations = {{"num_bits", 8},
                                {"type", "float"},
                                {"strategy", "token"},
                                {"symmetric", true},
                                {"dynamic", true}};
      return {{"quant_method", "compressed-tensors"},
              {"format", "float-quantized"},
              {"quantization_status", "compressed"},
              {"ignore", {"lm_head"}},
              {"kv_cache_scheme", nullptr},
              {"config_groups",
               {{"group_0",
                 {{"format", "float-quantized"},
                  {"targets", {"Linear"}},
                  {"weights", weights},
                  {"input_activations", activations},
                  {"output_activations", nullptr}}}}}};
    }
    case QuantFormat::kFp8Block:
      return {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {spec.block, spec.block}}};
    case QuantFormat::kNone:
      break;
  }
  return nullptr;
}

Status CheckQuantizable(const QuantizeSpec& spec, const std::string& module, int64_t out,
                        int64_t in) {
  if (spec.format != QuantFormat::kAwq && spec.format != QuantFormat::kGptq) return Status::Ok();
  if (spec.group_size <= 0 || spec.group_size % 8 != 0) {
    return InvalidArgument("--group-size must be a positive multiple of 8, got " +
                           std::to_string(spec.group_size));
  }
  if (out % 8 != 0 || in % spec.group_size != 0) {
    return InvalidArgument("cannot quantize '" + module + "' [" + std::to_string(out) + ", " +
                           std::to_string(in) + "] to int4: needs out % 8 == 0 and in % " +
                           std::to_string(spec.group_size) + " == 0");
  }
  return Status::Ok();
}

std::vector<PartPlan> QuantizedParts(const QuantizeSpec& spec, const std::string& m, int64_t out,
                                     int64_t in, DType model_dtype) {
  const int64_t groups = spec.group_size > 0 ? in / spec.group_size : 0;
  switch (spec.format) {
    case QuantFormat::kAwq:
      return {{m + ".qweight", DType::kI32, {in, out / 8}},
              {m + ".qzeros", DType::kI32, {groups, out / 8}},
              {m + ".scales", DType::kF16, {groups, out}}};
    case QuantFormat::kGptq:
      return {{m + ".qweight", DType::kI32, {in / 8, out}},
              {m + ".qzeros", DType::kI32, {groups, out / 8}},
              {m + ".scales", DType::kF16, {groups, out}},
              {m + ".g_idx", DType::kI32, {in}}};
    case QuantFormat::kFp8Channel:
      return {{m + ".weight", DType::kF8E4M3, {out, in}},
              {m + ".weight_scale", model_dtype, {out, 1}}};
    case QuantFormat::kFp8Block:
      return {{m + ".weight", DType::kF8E4M3, {out, in}},
              {m + ".weight_scale_inv",
               DType::kF32,
               {CeilDiv(out, spec.block), CeilDiv(in, spec.block)}}};
    case QuantFormat::kNone:
      break;
  }
  return {};
}

std::vector<std::string> QuantizeMatrix(const QuantizeSpec& spec, const float* w, int64_t out,
                                        int64_t in, DType model_dtype) {
  if (spec.format == QuantFormat::kAwq || spec.format == QuantFormat::kGptq) {
    return QuantizeInt4(spec, w, out, in);
  }
  return QuantizeFp8(spec, w, out, in, model_dtype);
}

uint8_t ToE4M3(float x) {
  const float* table = checkpoint::Fp8E4M3Table();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (!(a < 448.0f)) return sign | 0x7e;  // saturate (NaN too: never produced here)
  // table[0..0x7e] increases with the code.
  const float* hit = std::lower_bound(table, table + 0x7f, a);
  int code = static_cast<int>(hit - table);
  if (code > 0) {
    const float below = table[code - 1], above = table[code];
    if (a - below < above - a || (a - below == above - a && (code - 1) % 2 == 0)) --code;
  }
  return static_cast<uint8_t>(sign | code);
}

}  // namespace nightshift::generator
