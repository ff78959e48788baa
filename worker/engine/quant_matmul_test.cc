// The quantized kernels against the dequantisers (quant_dequant.h, an
// independent decode) and the summation order quant_matmul.h promises:
// every format, on every instruction set this CPU has, with ragged tiles,
// and bitwise the same result for a row whatever rides beside it.
#include "worker/engine/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "worker/engine/dot_kernel.h"
#include "worker/engine/quant_synthetic.h"

namespace nightshift::engine {
namespace {

using checkpoint::DType;
using checkpoint::QuantFormat;

struct Case {
  std::string name;
  QuantWeightSpec spec;
};

std::vector<Case> Cases() {
  auto spec = [](QuantFormat f, int64_t out, int64_t in) {
    QuantWeightSpec s;
    s.format = f;
    s.out = out;
    s.in = in;
    return s;
  };
  std::vector<Case> cases;
  // 136 outputs: two whole 64-column tiles and a tail of 8.
  QuantWeightSpec awq = spec(QuantFormat::kAwq, 136, 192);
  awq.group_size = 64;
  cases.push_back({"awq", awq});
  QuantWeightSpec awq_bf16 = awq;
  awq_bf16.scale_dtype = DType::kBF16;
  cases.push_back({"awq_bf16_scales", awq_bf16});
  // float32 scales: z s is not always exact, so AVX-512 cannot fuse the
  // decode's subtraction and product into one rounding there.
  QuantWeightSpec awq_f32 = awq;
  awq_f32.scale_dtype = DType::kF32;
  cases.push_back({"awq_f32_scales", awq_f32});
  QuantWeightSpec gptq = spec(QuantFormat::kGptq, 136, 200);  // 200 = 3 groups of 64 and 8
  gptq.group_size = 64;
  cases.push_back({"gptq", gptq});
  QuantWeightSpec gptq_act = gptq;
  gptq_act.g_idx = true;
  cases.push_back({"gptq_g_idx", gptq_act});
  QuantWeightSpec gptq_one = gptq;
  gptq_one.group_size = -1;
  gptq_one.scale_dtype = DType::kF32;
  cases.push_back({"gptq_one_group", gptq_one});
  QuantWeightSpec channel = spec(QuantFormat::kFp8Channel, 21, 100);  // in not a multiple of 16
  channel.scale_dtype = DType::kF32;
  cases.push_back({"fp8_channel", channel});
  QuantWeightSpec block = spec(QuantFormat::kFp8Block, 21, 100);
  block.block_out = 8;
  block.block_in = 24;  // ragged: 5 blocks of inputs, the last of 4
  block.scale_dtype = DType::kBF16;
  cases.push_back({"fp8_block", block});
  return cases;
}

std::vector<Isa> IsasHere() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  return isas;
}

std::vector<float> RandomX(int64_t rows, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * in));
  for (float& v : x) v = dist(rng);
  return x;
}

// W [out, in] as the dequantisers decode it.
std::vector<float> Decoded(const QuantView& v) {
  const int64_t out = v.q->out, in = v.q->in;
  std::vector<float> w(static_cast<size_t>(out * in));
  if (v.input_major()) {
    std::vector<float> wt(w.size());
    DequantInputRows(v, 0, in, 0, out, wt.data());
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t o = 0; o < out; ++o) w[o * in + i] = wt[i * out + o];
    }
  } else {
    DequantOutputRows(v, 0, out, w.data());
  }
  return w;
}

// The order the header promises: int4 written out plainly; FP8 the dot
// kernel's plain loops, whose order dot_kernel_test writes out.
float PromisedSum(const float* x, const float* w, int64_t in, bool input_major) {
  float acc = 0.0f;
  if (input_major) {
    for (int64_t i = 0; i < in; ++i) acc = std::fma(x[i], w[i], acc);
  } else {
    DotRows(x, in, 1, w, in, 1, &acc, 1, Isa::kScalar);
  }
  return acc;
}

class QuantMatmulTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    weight_ = MakeSyntheticQuantWeight(GetParam().spec, 7);
    view_ = std::make_unique<QuantView>(weight_.info, weight_.data());
    out_ = weight_.info.shape[0];
    in_ = weight_.info.shape[1];
  }

  std::vector<float> Run(const std::vector<float>& x, int64_t rows, Isa isa) const {
    std::vector<float> y(static_cast<size_t>(rows * out_), -1.0f);
    QuantMatmul(*view_, x.data(), rows, 0, out_, y.data(), out_, isa);
    return y;
  }

  SyntheticQuantWeight weight_;
  std::unique_ptr<QuantView> view_;
  int64_t out_ = 0, in_ = 0;
};

TEST_P(QuantMatmulTest, EveryPathSumsTheDecodedWeightsInThePromisedOrder) {
  const int64_t rows = 7;
  const std::vector<float> x = RandomX(rows, in_, 3);
  const std::vector<float> w = Decoded(*view_);
  for (Isa isa : IsasHere()) {
    const std::vector<float> y = Run(x, rows, isa);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t o = 0; o < out_; ++o) {
        const float want = PromisedSum(&x[t * in_], &w[o * in_], in_, view_->input_major());
        ASSERT_EQ(y[t * out_ + o], want) << IsaName(isa) << " row " << t << " output " << o;
      }
    }
  }
}

TEST_P(QuantMatmulTest, MatchesADoublePrecisionProduct) {
  const int64_t rows = 3;
  const std::vector<float> x = RandomX(rows, in_, 4);
  const std::vector<float> w = Decoded(*view_);
  const std::vector<float> y = Run(x, rows, ActiveIsa());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t o = 0; o < out_; ++o) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < in_; ++i) {
        sum += static_cast<double>(x[t * in_ + i]) * w[o * in_ + i];
        magnitude += std::abs(static_cast<double>(x[t * in_ + i]) * w[o * in_ + i]);
      }
      EXPECT_NEAR(y[t * out_ + o], sum, 1e-6 * magnitude + 1e-30) << t << " " << o;
    }
  }
}

TEST_P(QuantMatmulTest, ARowIsBitwiseTheSameAloneInAnyBatchAndAnySplit) {
  for (Isa isa : IsasHere()) {
    for (int64_t rows : {2, 5, 6, 7, 13, 64}) {
      const std::vector<float> x = RandomX(rows, in_, 10 + static_cast<uint64_t>(rows));
      const std::vector<float> batch = Run(x, rows, isa);
      // Outputs split at a tile boundary, as two threads would.
      std::vector<float> split(batch.size(), -1.0f);
      const int64_t cut = std::min<int64_t>(kQuantTileColumns, out_ / 8 * 8);
      QuantMatmul(*view_, x.data(), rows, 0, cut, split.data(), out_, isa);
      QuantMatmul(*view_, x.data(), rows, cut, out_, split.data(), out_, isa);
      ASSERT_EQ(split, batch) << IsaName(isa) << " " << rows << " rows";
      for (int64_t t : {int64_t{0}, rows / 2, rows - 1}) {
        const std::vector<float> row(x.begin() + t * in_, x.begin() + (t + 1) * in_);
        const std::vector<float> alone = Run(row, 1, isa);
        const std::vector<float> in_batch(batch.begin() + t * out_, batch.begin() + (t + 1) * out_);
        ASSERT_EQ(alone, in_batch) << IsaName(isa) << " row " << t << " of " << rows;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmulTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace nightshift::engine
