#include "worker/engine/isa.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace nightshift::engine {
namespace {

Isa DetectHostIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return Isa::kScalar;
  // F16C has no __builtin_cpu_supports name in every GCC; every CPU with
  // AVX2 and FMA has it.
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))) {
    return Isa::kAvx2;
  }
  if (!__builtin_cpu_supports("avx512bf16")) return Isa::kAvx512;
  return Isa::kAvx512Bf16;
#else
  return Isa::kScalar;
#endif
}

Isa CeilingFromEnvironment() {
  const char* value = std::getenv("NIGHTSHIFT_MAX_ISA");
  if (value == nullptr || *value == '\0') return Isa::kAvx512Bf16;
  StatusOr<Isa> isa = ParseIsa(value);
  if (!isa.ok()) {
    std::fprintf(stderr, "NIGHTSHIFT_MAX_ISA ignored: %s\n", isa.status().message().c_str());
    return Isa::kAvx512Bf16;
  }
  return *isa;
}

std::atomic<int>& Ceiling() {
  static std::atomic<int> ceiling{static_cast<int>(CeilingFromEnvironment())};
  return ceiling;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512-bf16";
  }
  return "?";
}

StatusOr<Isa> ParseIsa(const std::string& name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (name == IsaName(isa)) return isa;
  }
  return InvalidArgument("instruction set '" + name +
                         "': expected scalar, avx2, avx512 or avx512-bf16");
}

Isa HostIsa() {
  static const Isa host = DetectHostIsa();
  return host;
}

Isa ActiveIsa() {
  return static_cast<Isa>(std::min(static_cast<int>(HostIsa()), Ceiling().load()));
}

void SetIsaCeiling(Isa ceiling) { Ceiling().store(static_cast<int>(ceiling)); }

Isa IsaCeiling() { return static_cast<Isa>(Ceiling().load()); }

}  // namespace nightshift::engine
