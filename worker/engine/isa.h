// Which x86 instruction sets the engine's own kernels may use.
//
// Each kernel with vector paths (the small-batch matmul, the AVX512-BF16
// matmul, the quantized matmul, the dequantisers) asks ActiveIsa() which
// to run: what this CPU has (cpuid, at run time), capped by a ceiling. The
// ceiling is how a test, or a user reproducing another machine's numbers,
// runs the paths a smaller CPU would take on any CPU: SetIsaCeiling in a
// process, or NIGHTSHIFT_MAX_ISA=scalar|avx2|avx512|avx512-bf16 in the
// environment (read at the first call). A measurement of the projection
// kernels is keyed by the active level (compute_choice.h), so a capped run
// never reuses an uncapped one's figures.
//
// libtorch-free; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace nightshift::engine {

// Levels, each including the ones below it.
enum class Isa {
  kScalar = 0,      // plain C++ loops
  kAvx2 = 1,        // AVX2, FMA and F16C
  kAvx512 = 2,      // AVX512F, BW, VL and DQ
  kAvx512Bf16 = 3,  // AVX-512 with AVX512-BF16 (vdpbf16ps)
};

// "scalar", "avx2", "avx512" or "avx512-bf16".
const char* IsaName(Isa isa);
// One of IsaName's spellings; InvalidArgument naming them otherwise.
StatusOr<Isa> ParseIsa(const std::string& name);

// The highest level this CPU (and its operating system) supports.
Isa HostIsa();
// The level the kernels run: HostIsa capped by the ceiling.
Isa ActiveIsa();
// Whether the kernels may use `isa` now: ActiveIsa() >= isa.
inline bool IsaActive(Isa isa) { return static_cast<int>(ActiveIsa()) >= static_cast<int>(isa); }

// Caps ActiveIsa at `ceiling` (process-wide, from now on); kAvx512Bf16
// lifts the cap. Kernels already running finish on the path they took.
void SetIsaCeiling(Isa ceiling);
// The cap in force: NIGHTSHIFT_MAX_ISA's until SetIsaCeiling is called,
// kAvx512Bf16 when neither says anything. A value of NIGHTSHIFT_MAX_ISA
// that ParseIsa refuses is reported on stderr once and ignored.
Isa IsaCeiling();

// Sets the ceiling for the lifetime of the object, restoring the previous
// one after (tests).
class ScopedIsaCeiling {
 public:
  explicit ScopedIsaCeiling(Isa ceiling) : previous_(IsaCeiling()) { SetIsaCeiling(ceiling); }
  ~ScopedIsaCeiling() { SetIsaCeiling(previous_); }
  ScopedIsaCeiling(const ScopedIsaCeiling&) = delete;
  ScopedIsaCeiling& operator=(const ScopedIsaCeiling&) = delete;

 private:
  Isa previous_;
};

}  // namespace nightshift::engine
