#include "worker/engine/convert.h"

#include <cstring>

namespace nightshift::engine {
namespace {

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

uint16_t LoadU16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// bfloat16 is the top half of a float32.
void Bf16ToFloat(const unsigned char* in, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = BitsToFloat(static_cast<uint32_t>(LoadU16(in + 2 * i)) << 16);
  }
}

// IEEE half: move exponent and mantissa into float position and rebias the
// exponent by multiplying with 2^112 (exact for normals and subnormals); a
// half exponent of all ones becomes float's all ones (infinity, NaN).
void F16ToFloat(const unsigned char* in, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t h = LoadU16(in + 2 * i);
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t magnitude = h & 0x7fffu;
    uint32_t bits = FloatToBits(BitsToFloat(magnitude << 13) * 0x1.0p112f);
    if (magnitude >= 0x7c00u) bits |= 0x7f800000u;
    out[i] = BitsToFloat(bits | sign);
  }
}

}  // namespace

void ConvertToFloat(const void* in, checkpoint::DType dtype, int64_t count, float* out) {
  const auto* bytes = static_cast<const unsigned char*>(in);
  switch (dtype) {
    case checkpoint::DType::kBF16:
      Bf16ToFloat(bytes, count, out);
      return;
    case checkpoint::DType::kF16:
      F16ToFloat(bytes, count, out);
      return;
    default:  // kF32: BindTensors admits nothing else.
      std::memcpy(out, bytes, static_cast<size_t>(count) * sizeof(float));
      return;
  }
}

}  // namespace nightshift::engine
