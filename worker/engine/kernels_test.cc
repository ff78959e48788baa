// The decoder's kernels against plain ATen formulations: blocked weight
// conversion, norms, rotary embedding, grouped-query attention in chunks.
#include "worker/engine/kernels.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "worker/engine/bf16_matmul.h"
#include "worker/engine/compute_pool.h"
#include "worker/engine/decoder.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;

// A weight stored as `dtype` bytes, starting `offset` bytes into its buffer
// (to make it unaligned), and the float32 values it holds.
class StoredWeight {
 public:
  StoredWeight(const at::Tensor& values, DType dtype, size_t offset = 0) {
    at::Tensor stored = values
                            .to(dtype == DType::kBF16  ? at::kBFloat16
                                : dtype == DType::kF16 ? at::kHalf
                                                       : at::kFloat)
                            .contiguous();
    exact_ = stored.to(at::kFloat);
    info_.dtype = dtype;
    info_.shape = values.sizes().vec();
    info_.size = static_cast<uint64_t>(stored.nbytes());
    bytes_.resize(offset + stored.nbytes());
    std::memcpy(bytes_.data() + offset, stored.data_ptr(), stored.nbytes());
    weight_ = {&info_, bytes_.data() + offset, std::nullopt, nullptr};
  }
  const Weight& weight() const { return weight_; }
  const at::Tensor& exact() const { return exact_; }  // the stored values as float32

 private:
  checkpoint::TensorInfo info_;
  std::vector<unsigned char> bytes_;
  Weight weight_;
  at::Tensor exact_;
};

void ExpectClose(const at::Tensor& actual, const at::Tensor& expected, double atol = 1e-5) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  EXPECT_LE((actual - expected).abs().max().item<double>(), atol);
}

class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override { at::manual_seed(3); }
};

TEST_F(KernelsTest, LinearConvertsInBlocksForEveryDTypeAndAlignment) {
  at::Tensor x = at::randn({5, 24});
  at::Tensor w = at::randn({37, 24});
  at::Tensor b = at::randn({37});
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t offset : {0, 2}) {
      StoredWeight weight(w, dtype, offset);
      StoredWeight bias(b, dtype, offset);
      at::Tensor expected = at::linear(x, weight.exact(), bias.exact());
      // 3 rows per block: 13 blocks, the last one short.
      ExpectClose(Linear(x, weight.weight(), bias.weight(), 3 * 24 * 4), expected);
      ExpectClose(Linear(x, weight.weight(), bias.weight()), expected);
      ExpectClose(Linear(x, weight.weight()), at::linear(x, weight.exact()));
    }
  }
}

// The BF16 kernels this CPU runs: oneDNN's, and the engine's own where the
// CPU has AVX512-BF16.
std::vector<KernelPlan> Bf16Plans() {
  std::vector<KernelPlan> plans;
  for (ProjectionKernel k : {ProjectionKernel::kBf16Gemm, ProjectionKernel::kBf16Avx512}) {
    if (k == ProjectionKernel::kBf16Avx512 && !Bf16MatmulSupported()) continue;
    plans.emplace_back().fill(k);
  }
  return plans;
}

// Each BF16 kernel computes what the accelerator path computes on a device:
// x rounded to BF16 times the BF16 weights, accumulated in float32 (so
// within a few float32 ulps of double), the product rounded to BF16.
TEST_F(KernelsTest, Bf16PlanIsTheAcceleratorPathsProductOnTheCpu) {
  EXPECT_EQ(Bf16Plan()[0],
            Bf16MatmulSupported() ? ProjectionKernel::kBf16Avx512 : ProjectionKernel::kBf16Gemm);
  for (const KernelPlan& bf16 : Bf16Plans()) {
    SCOPED_TRACE(ProjectionKernelName(bf16[0]));
    at::Tensor w = at::randn({37, 24});
    at::Tensor b = at::randn({37});
    for (int64_t rows : {1, 3, 17, 64, 130}) {
      at::Tensor x = at::randn({rows, 24});
      for (size_t offset : {0, 2, 1}) {  // in place, and copied when not 2-byte aligned
        StoredWeight weight(w, DType::kBF16, offset);
        Weight host = weight.weight();
        host.plan = &bf16;
        Weight device = weight.weight();
        device.device = at::Device(at::kCPU);
        StoredWeight bias(b, DType::kF32);
        at::Tensor ours = Linear(x, host, bias.weight(), 5 * 24 * 2);
        at::Tensor accelerator = Linear(x, device, bias.weight());
        // In double from the BF16 inputs, then rounded to BF16 as the product is.
        at::Tensor exact =
            at::linear(x.to(at::kBFloat16).to(at::kDouble), weight.exact().to(at::kDouble))
                .to(at::kFloat)
                .to(at::kBFloat16)
                .to(at::kFloat) +
            b;
        const double scale = exact.abs().max().item<double>();
        ExpectClose(ours, accelerator, scale * 0x1p-7);  // one BF16 step at most apart
        ExpectClose(ours, exact, scale * 0x1p-7);
        // And further from float32 than float32 is: rounding really happened.
        EXPECT_GT((ours - at::linear(x, weight.exact(), b)).abs().max().item<double>(), 1e-6);
      }
    }
  }
}

TEST_F(KernelsTest, Bf16PlanConvertsF16WeightsToBf16AndLeavesF32Ones) {
  for (const KernelPlan& bf16 : Bf16Plans()) {
    SCOPED_TRACE(ProjectionKernelName(bf16[0]));
    at::Tensor x = at::randn({6, 24});
    at::Tensor w = at::randn({37, 24});
    StoredWeight f16(w, DType::kF16, 2);
    Weight host = f16.weight();
    host.plan = &bf16;
    // The F16 values rounded to BF16, multiplied as BF16 weights are.
    StoredWeight as_bf16(f16.exact(), DType::kBF16);
    Weight reference = as_bf16.weight();
    reference.plan = &bf16;
    for (int64_t block : {int64_t{3 * 24 * 2}, kConvertBlockBytes}) {
      ExpectClose(Linear(x, host, {}, block), Linear(x, reference), 0);
    }
    // F32 weights stay float32 under the BF16 plan: the float32 path's
    // result, or under an invariant plan (bf16-avx512 at every bucket) the
    // invariant float32 kernel's.
    StoredWeight f32(w, DType::kF32);
    Weight f32_host = f32.weight();
    f32_host.plan = &bf16;
    KernelPlan tile;
    tile.fill(ProjectionKernel::kF32Tile);
    Weight f32_tile = f32.weight();
    f32_tile.plan = &tile;
    ExpectClose(Linear(x, f32_host), Linear(x, IsInvariantPlan(bf16) ? f32_tile : f32.weight()), 0);
  }
}

// f32-tile: float32 within float32 rounding of ATen's product, for every
// stored dtype and alignment, with a bias; and a row's products bitwise the
// same in any batch.
TEST_F(KernelsTest, F32TilePlanIsFloat32AndBatchInvariant) {
  KernelPlan tile;
  tile.fill(ProjectionKernel::kF32Tile);
  at::Tensor w = at::randn({37, 24});
  at::Tensor b = at::randn({37});
  at::Tensor x = at::randn({9, 24});
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t offset : {0, 2}) {
      StoredWeight weight(w, dtype, offset);
      StoredWeight bias(b, DType::kF32);
      Weight host = weight.weight();
      host.plan = &tile;
      const at::Tensor ours = Linear(x, host, bias.weight());
      ExpectClose(ours, at::linear(x, weight.exact(), b), 1e-5);
      for (int64_t t : {0, 4, 8}) {
        EXPECT_TRUE(at::equal(Linear(x.narrow(0, t, 1), host, bias.weight()), ours.narrow(0, t, 1)))
            << "row " << t;
      }
    }
  }
}

// Debian's libtorch multiplies float32 through OpenBLAS: its core is named,
// and it is the one OPENBLAS_CORETYPE forces when that is set.
TEST_F(KernelsTest, OpenBlasCoreNamesTheCoreOpenBlasRuns) {
  const std::string core = OpenBlasCore();
  ASSERT_FALSE(core.empty());
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    std::string a = core, b = forced;
    for (std::string* s : {&a, &b}) {
      std::transform(s->begin(), s->end(), s->begin(),
                     [](unsigned char c) { return std::tolower(c); });
    }
    EXPECT_EQ(a, b);
  }
}

TEST_F(KernelsTest, EveryFloat32KernelGivesTheFloat32Product) {
  at::Tensor w = at::randn({37, 24});
  at::Tensor b = at::randn({37});
  for (ProjectionKernel kernel : {ProjectionKernel::kF32Small, ProjectionKernel::kF32Gemm}) {
    KernelPlan plan;
    plan.fill(kernel);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      StoredWeight weight(w, dtype, 2);
      StoredWeight bias(b, dtype);
      Weight host = weight.weight();
      host.plan = &plan;
      for (int64_t rows : {1, 5, 40}) {
        at::Tensor x = at::randn({rows, 24});
        ExpectClose(Linear(x, host, bias.weight()), at::linear(x, weight.exact(), bias.exact()));
      }
    }
  }
}

TEST_F(KernelsTest, ToFloatIsAZeroCopyViewOnlyForAlignedF32) {
  at::Tensor w = at::randn({4, 6});
  StoredWeight aligned(w, DType::kF32);
  EXPECT_EQ(ToFloat(aligned.weight()).data_ptr(), aligned.weight().data);
  StoredWeight unaligned(w, DType::kF32, 2);
  at::Tensor copy = ToFloat(unaligned.weight());
  EXPECT_NE(copy.data_ptr(), unaligned.weight().data);
  ExpectClose(copy, w, 0);
}

TEST_F(KernelsTest, Norms) {
  at::Tensor x = at::randn({3, 16});
  StoredWeight w(at::randn({16}), DType::kF32);
  StoredWeight b(at::randn({16}), DType::kF32);
  at::Tensor rms = x / at::sqrt(x.pow(2).mean(-1, true) + 1e-6);
  ExpectClose(Norm(x, NormKind::kRms, w.weight(), {}, 1e-6), rms * w.exact());
  ExpectClose(Norm(x, NormKind::kRmsUnitOffset, w.weight(), {}, 1e-6), rms * (1 + w.exact()));
  at::Tensor centred = x - x.mean(-1, true);
  at::Tensor layer_norm =
      centred / at::sqrt(centred.pow(2).mean(-1, true) + 1e-5) * w.exact() + b.exact();
  ExpectClose(Norm(x, NormKind::kLayerNorm, w.weight(), b.weight(), 1e-5), layer_norm);
}

TEST_F(KernelsTest, GatherRowsReadsOnlyTheRowsAsked) {
  at::Tensor table = at::randn({10, 8});
  StoredWeight stored(table, DType::kBF16);
  at::Tensor rows = GatherRows(stored.weight(), {7, 0, 7});
  ExpectClose(rows, stored.exact().index_select(0, at::tensor({7, 0, 7}, at::kLong)), 0);
}

TEST_F(KernelsTest, RopeRotatesHalvesAndPassesTheRestThrough) {
  const std::vector<float> inv_freq = {1.0f, 0.1f};  // rotary dim 4 of head dim 6
  RopeAngles angles = ComputeRopeAngles(inv_freq, {0, 3});
  at::Tensor x = at::randn({2, 2, 6});  // [tokens, heads, head_dim]
  at::Tensor out = ApplyRope(x, angles);
  ExpectClose(out[0], x[0]);  // position 0 rotates by nothing
  ExpectClose(out.narrow(2, 4, 2), x.narrow(2, 4, 2), 0);
  // Position 3, dims (0, 2) rotate together by angle 3 * 1.0; (1, 3) by 3 * 0.1.
  for (int pair = 0; pair < 2; ++pair) {
    const double angle = 3 * inv_freq[pair];
    at::Tensor a = x[1].select(1, pair), b = x[1].select(1, pair + 2);
    ExpectClose(out[1].select(1, pair), a * std::cos(angle) - b * std::sin(angle));
    ExpectClose(out[1].select(1, pair + 2), b * std::cos(angle) + a * std::sin(angle));
  }
}

TEST_F(KernelsTest, CausalMaskAfterCachedTokens) {
  at::Tensor mask = CausalMask(2, 3);
  at::Tensor expected = at::tensor({1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, at::kLong)
                            .view({3, 5})
                            .to(at::kBool);
  EXPECT_TRUE(at::equal(mask, expected));
}

// Multi-head attention written out head by head, KV head h / group for query head h.
at::Tensor ReferenceAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& allowed, double scale) {
  const int64_t heads = q.size(1), group = heads / k.size(0);
  std::vector<at::Tensor> outs;
  for (int64_t h = 0; h < heads; ++h) {
    at::Tensor scores = at::matmul(q.select(1, h), k[h / group].t()) * scale;
    scores = scores.masked_fill(allowed.logical_not(), -INFINITY);
    outs.push_back(at::matmul(at::softmax(scores, -1), v[h / group]));
  }
  return at::cat(outs, 1);
}

TEST_F(KernelsTest, GroupedQueryAttentionInChunksEqualsTheReference) {
  const int64_t rows = 7, past = 4, heads = 6, kv_heads = 2, dim = 8;
  at::Tensor q = at::randn({rows, heads, dim});
  at::Tensor k = at::randn({kv_heads, past + rows, dim});
  at::Tensor v = at::randn({kv_heads, past + rows, dim});
  at::Tensor allowed = CausalMask(past, rows);
  at::Tensor expected = ReferenceAttention(q, k, v, allowed, 0.3);
  ExpectClose(Attention(q, k, v, allowed, 0.3), expected);
  const int64_t one_row = heads * (past + rows) * 4;
  ExpectClose(Attention(q, k, v, allowed, 0.3, 2 * one_row), expected);  // chunks of 2 rows
  ExpectClose(Attention(q, k, v, allowed, 0.3, 1), expected);            // one row at a time
}

// A prefill-sized chunk splits its KV heads across the compute pool, evenly
// or not; every split gives the reference's output, in chunks or whole.
TEST_F(KernelsTest, AttentionSplitAcrossThePoolEqualsTheReference) {
  const int64_t rows = 64, past = 200, heads = 8, kv_heads = 4, dim = 32;
  ASSERT_GE(4 * rows * heads * (past + rows) * dim, kParallelAttentionFlops);
  at::Tensor q = at::randn({rows, heads, dim});
  at::Tensor k = at::randn({kv_heads, past + rows, dim});
  at::Tensor v = at::randn({kv_heads, past + rows, dim});
  at::Tensor allowed = CausalMask(past, rows);
  const at::Tensor expected = ReferenceAttention(q, k, v, allowed, 0.3);
  const int before = ComputePoolThreads();
  for (int threads : {1, 2, 3, 4}) {
    SCOPED_TRACE(threads);
    SetComputePoolThreads(threads);
    ExpectClose(Attention(q, k, v, allowed, 0.3), expected);
    ExpectClose(Attention(q, k, v, allowed, 0.3, rows / 2 * heads * (past + rows) * 4), expected);
  }
  SetComputePoolThreads(before);
}

// Decode rows of several sequences, each over its own cache (narrowed from
// a longer one, as KVCache::Append returns it), written into their rows of
// one output and split across pools of 1-4 threads: each row as the
// reference attends that row alone; the rows not listed are left as they were.
TEST_F(KernelsTest, DecodeRowsAcrossThePoolEqualTheReference) {
  const int64_t heads = 8, kv_heads = 2, dim = 24, capacity = 40;
  const std::vector<int64_t> lengths = {1, 9, 40, 17, 3, 30, 2};
  at::Tensor q = at::randn({static_cast<int64_t>(lengths.size()) + 1, heads, dim});
  std::vector<DecodeRow> rows;
  std::vector<at::Tensor> expected;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t row = static_cast<int64_t>(lengths.size() - i);  // out of order; row 0 unused
    at::Tensor k = at::randn({kv_heads, capacity, dim}).narrow(1, 0, lengths[i]);
    at::Tensor v = at::randn({kv_heads, capacity, dim}).narrow(1, 0, lengths[i]);
    expected.push_back(
        ReferenceAttention(q.narrow(0, row, 1), k, v, at::ones({1, lengths[i]}, at::kBool), 0.2));
    rows.push_back({row, k, v});
  }
  const int before = ComputePoolThreads();
  for (int threads : {1, 2, 3, 4}) {
    SCOPED_TRACE(threads);
    SetComputePoolThreads(threads);
    at::Tensor out = at::full({q.size(0), heads * dim}, -7.0f);
    AttendDecodeRows(q, rows, 0.2, out);
    EXPECT_TRUE(at::equal(out[0], at::full({heads * dim}, -7.0f)));
    for (size_t i = 0; i < rows.size(); ++i) {
      ExpectClose(out.narrow(0, rows[i].row, 1), expected[i]);
    }
  }
  SetComputePoolThreads(before);
}

TEST_F(KernelsTest, AttentionWithoutAMaskAttendsToEveryKey) {
  at::Tensor q = at::randn({3, 4, 8});
  at::Tensor k = at::randn({2, 5, 8});
  at::Tensor v = at::randn({2, 5, 8});
  at::Tensor all = at::ones({3, 5}, at::TensorOptions().dtype(at::kBool));
  const at::Tensor expected = ReferenceAttention(q, k, v, all, 0.3);
  ExpectClose(Attention(q, k, v, at::Tensor(), 0.3), expected);
  ExpectClose(Attention(q, k, v, at::Tensor(), 0.3, 1), expected);  // one row at a time
}

}  // namespace
}  // namespace nightshift::engine
