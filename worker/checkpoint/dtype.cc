// DType names and sizes.
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/message.h"

namespace nightshift::checkpoint {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kI64, "I64", 8},   {DType::kI32, "I32", 4},        {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},     {DType::kU8, "U8", 1},          {DType::kBool, "BOOL", 1},
};

const DTypeEntry& Entry(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // unreachable: every enumerator has an entry
}

}  // namespace

size_t DTypeSize(DType dtype) { return Entry(dtype).size; }

const char* DTypeName(DType dtype) { return Entry(dtype).name; }

StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return InvalidArgument("unsupported dtype " + Quoted(name));
}

}  // namespace nightshift::checkpoint
