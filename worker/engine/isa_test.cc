// The instruction-set ceiling: names, the cap, and the kernels that follow it.
#include "worker/engine/isa.h"

#include <gtest/gtest.h>

#include <iostream>

#include "worker/engine/bf16_matmul.h"
#include "worker/engine/quant_dequant.h"
#include "worker/engine/small_matmul.h"

namespace nightshift::engine {
namespace {

TEST(IsaTest, NamesRoundTripAndUnknownOnesAreRefused) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    StatusOr<Isa> parsed = ParseIsa(IsaName(isa));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, isa);
  }
  StatusOr<Isa> bad = ParseIsa("sse4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected scalar, avx2, avx512 or avx512-bf16"),
            std::string::npos);
}

TEST(IsaTest, TheCeilingCapsWhatTheKernelsRunAndIsRestored) {
  std::cout << "host " << IsaName(HostIsa()) << ", active " << IsaName(ActiveIsa()) << "\n";
  const Isa before = ActiveIsa();
  EXPECT_LE(static_cast<int>(before), static_cast<int>(HostIsa()));
  {
    ScopedIsaCeiling cap(Isa::kScalar);
    EXPECT_EQ(ActiveIsa(), Isa::kScalar);
    EXPECT_FALSE(Bf16MatmulSupported());
    EXPECT_FALSE(SmallMatmulFast());
    EXPECT_FALSE(QuantDequantFast());
  }
  {
    ScopedIsaCeiling cap(Isa::kAvx512);
    EXPECT_FALSE(Bf16MatmulSupported());  // AVX512-BF16 is above the cap
    EXPECT_EQ(SmallMatmulFast(), IsaActive(Isa::kAvx2));
  }
  EXPECT_EQ(ActiveIsa(), before);
}

}  // namespace
}  // namespace nightshift::engine
