// Quantized checkpoints through the engine, beyond the registry-wide goldens
// (engine_golden_test.cc runs all four fixtures on both paths): the packed
// values are really read (mutating the one golden.json names moves the
// logits by what the reference measured), the host and device dequantisers
// agree bit for bit, resident runs match, and MoE configs are refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/isa.h"
#include "worker/engine/layer_loader.h"
#include "worker/engine/quant_linear.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::CopyFixture;
using checkpoint::testing::FixtureDir;
using checkpoint::testing::ReadFileBytes;
using checkpoint::testing::TempDir;
using checkpoint::testing::WriteFileBytes;
using nlohmann::json;
using testing::Golden;
using testing::LoadGolden;
using testing::MaxAbsDiff;

const std::vector<std::string> kQuantized = {"awq-int4", "gptq-int4", "ct-fp8-channel",
                                             "fp8-block"};

json GoldenJson(const std::string& fixture) {
  return json::parse(ReadFileBytes(FixtureDir(fixture) + "/golden.json"));
}

// Every prompt in one batch; the largest logit difference from the golden.
double MaxDiffFromGolden(const std::string& dir, const Golden& golden, const EngineOptions& options,
                         bool* greedy_matches) {
  std::unique_ptr<Engine> engine = testing::OpenEngine(dir, options);
  if (!engine) return -1;
  for (size_t i = 0; i < golden.prompts.size(); ++i) {
    EXPECT_TRUE(engine
                    ->Add(testing::GreedyRequest(golden.prompts[i],
                                                 static_cast<int64_t>(golden.greedy[i].size())))
                    .ok());
  }
  std::vector<SequenceResult> results = testing::Drain(*engine);
  EXPECT_EQ(results.size(), golden.prompts.size());
  double worst = 0;
  *greedy_matches = true;
  for (size_t i = 0; i < results.size(); ++i) {
    worst = std::max(worst, MaxAbsDiff(results[i].last_logits, golden.last_logits[i]));
    *greedy_matches &= results[i].generated == golden.greedy[i];
  }
  return worst;
}

EngineOptions OneThread() {
  EngineOptions options;
  options.threads = 1;
  return options;
}

class QuantFixtureTest : public ::testing::TestWithParam<std::string> {};

// golden.json's packed_value_mutation: element [0, 0] of the named tensor,
// int4: ^ 0x8 (the top bit of nibble 0), FP8: ^ 0x40 (0x20 where that gives
// NaN). The logits move past atol, by the amount the reference measured.
TEST_P(QuantFixtureTest, MutatingTheNamedPackedValueMovesTheLogitsAsTheReferenceSays) {
  const std::string fixture = GetParam();
  const json mutation = GoldenJson(fixture)["packed_value_mutation"];
  const std::string tensor = mutation["tensor"];
  TempDir tmp;
  const std::string dir = tmp.file(fixture);
  CopyFixture(fixture, dir);
  const std::string file = dir + "/model.safetensors";
  std::string bytes = ReadFileBytes(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const json entry = json::parse(bytes.substr(8, header))[tensor];
  const size_t at = 8 + header + entry["data_offsets"][0].get<size_t>();  // element [0, 0]
  unsigned char& b = reinterpret_cast<unsigned char&>(bytes[at]);
  if (entry["dtype"] == "I32") {
    b ^= 0x8;  // little-endian: nibble 0 is the low nibble of the first byte
  } else {
    ASSERT_EQ(entry["dtype"], "F8_E4M3");
    b = (b ^ 0x40) % 0x80 == 0x7f ? b ^ 0x20 : b ^ 0x40;
  }
  WriteFileBytes(file, bytes);

  const Golden golden = LoadGolden(fixture);
  bool greedy = false;
  const double moved = MaxDiffFromGolden(dir, golden, OneThread(), &greedy);
  const double atol = GoldenJson(fixture)["atol"];
  EXPECT_GT(moved, atol);
  EXPECT_NEAR(moved, mutation["max_abs_logit_diff"].get<double>(), 1e-3);
}

// The resident engine (groups read once, kept as stored) runs the same.
TEST_P(QuantFixtureTest, ResidentRunMatchesTheReference) {
  const Golden golden = LoadGolden(GetParam());
  EngineOptions options = OneThread();
  options.residency = Residency::kResident;
  bool greedy = false;
  EXPECT_LE(MaxDiffFromGolden(FixtureDir(GetParam()), golden, options, &greedy), golden.atol);
  EXPECT_TRUE(greedy);
}

// Every quantized tensor, loaded as the engine's loader places it,
// dequantises to the same float32 values on the host (block kernels, AVX2
// where present) and through the accelerator path's ATen ops on the CPU;
// and the block-wise host Linear equals x times that matrix.
TEST_P(QuantFixtureTest, HostAndDeviceDequantisationAgreeExactly) {
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::vector<TensorList> groups;
  for (const checkpoint::TensorInfo& t : ckpt->tensors) {
    if (t.quant) groups.push_back({&t});
  }
  ASSERT_EQ(groups.size(), 14u);
  LayerLoaderOptions loader_options;
  loader_options.prefetch = false;
  StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(*ckpt, groups, loader_options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  for (size_t g = 0; g < groups.size(); ++g) {
    StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const Weight host{groups[g][0], loaded->data[0], std::nullopt};
    const Weight device{groups[g][0], loaded->data[0], at::Device(at::kCPU)};
    const at::Tensor a = DequantizeWeight(host, at::kFloat);
    const at::Tensor b = DequantizeWeight(device, at::kFloat);
    EXPECT_TRUE(at::equal(a, b)) << groups[g][0]->name;
    EXPECT_TRUE(at::isfinite(a).all().item<bool>()) << groups[g][0]->name;
    const at::Tensor x = at::randn({3, a.size(1)});
    const at::Tensor y = QuantLinear(x, host, {});
    EXPECT_TRUE(at::allclose(y, at::matmul(x, a.t()), 1e-5, 1e-5)) << groups[g][0]->name;
    (*loader)->Release(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantFixtureTest, ::testing::ValuesIn(kQuantized),
                         testing::FixtureTestName);

// Every quantized fixture (any in tests/data whose config.json declares a
// quantization_config) under each --compute-dtype, streamed and resident,
// on each instruction set this CPU has (the ceiling standing in for a CPU
// without AVX512-BF16, without AVX-512, without AVX2): the reference's
// logits and greedy tokens, and the pass names the quantized kernel it ran.
struct QuantRunCase {
  std::string fixture;
  ComputeDType compute = ComputeDType::kAuto;
  Residency residency = Residency::kStream;
  Isa isa = Isa::kScalar;
};

std::vector<std::string> QuantizedFixtures() {
  std::vector<std::string> names;
  for (const std::string& name : checkpoint::testing::FixtureNames()) {
    if (json::parse(ReadFileBytes(FixtureDir(name) + "/config.json"))
            .contains("quantization_config")) {
      names.push_back(name);
    }
  }
  return names;
}

std::vector<QuantRunCase> QuantRunCases() {
  std::vector<QuantRunCase> cases;
  for (const std::string& fixture : QuantizedFixtures()) {
    for (ComputeDType compute :
         {ComputeDType::kAuto, ComputeDType::kFloat32, ComputeDType::kBFloat16}) {
      for (Residency residency : {Residency::kStream, Residency::kResident}) {
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
          if (static_cast<int>(isa) <= static_cast<int>(HostIsa())) {
            cases.push_back({fixture, compute, residency, isa});
          }
        }
      }
    }
  }
  return cases;
}

class QuantComputeTest : public ::testing::TestWithParam<QuantRunCase> {};

TEST_P(QuantComputeTest, MatchesTheReferenceUnderEveryComputeChoiceAndInstructionSet) {
  const QuantRunCase& c = GetParam();
  ScopedIsaCeiling ceiling(c.isa);
  const Golden golden = LoadGolden(c.fixture);
  EngineOptions options = OneThread();
  options.compute_dtype = c.compute;
  options.residency = c.residency;
  std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(c.fixture), options);
  ASSERT_NE(engine, nullptr);
  for (size_t i = 0; i < golden.prompts.size(); ++i) {
    ASSERT_TRUE(engine
                    ->Add(testing::GreedyRequest(golden.prompts[i],
                                                 static_cast<int64_t>(golden.greedy[i].size())))
                    .ok());
  }
  std::vector<PassStats> passes;
  std::vector<SequenceResult> results = testing::Drain(*engine, &passes);
  ASSERT_EQ(results.size(), golden.prompts.size());
  // BF16 projections round their inputs where the unquantized weights
  // (embedding, LM head) are 16-bit; the quantized ones stay float32.
  const std::string stored = testing::FixtureTorchDtype(c.fixture);
  const bool bf16_head = engine->compute().PlanDType() != std::string("f32") &&
                         (stored == "bfloat16" || stored == "float16");
  const double atol = bf16_head ? testing::Bf16ProjectionAtol(golden) : golden.atol;
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_LE(MaxAbsDiff(results[i].last_logits, golden.last_logits[i]), atol) << "prompt " << i;
    EXPECT_EQ(results[i].generated, golden.greedy[i]) << "prompt " << i;
  }
  ASSERT_FALSE(passes.empty());
  EXPECT_NE(passes[0].projection_kernels.find(std::string("-") + IsaName(c.isa)), std::string::npos)
      << passes[0].projection_kernels;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantComputeTest, ::testing::ValuesIn(QuantRunCases()),
                         [](const ::testing::TestParamInfo<QuantRunCase>& info) {
                           std::string name = info.param.fixture + "_" +
                                              ComputeDTypeName(info.param.compute) + "_" +
                                              ResidencyName(info.param.residency) + "_" +
                                              IsaName(info.param.isa);
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// A mixture of experts without a config family (mixtral, qwen2_moe and
// qwen3_moe have one).
TEST(QuantEngineTest, QuantizedUnsupportedMixtureOfExpertsIsRefused) {
  TempDir tmp;
  const std::string dir = tmp.file("moe");
  CopyFixture("awq-int4", dir);
  json config = json::parse(ReadFileBytes(dir + "/config.json"));
  config["model_type"] = "deepseek_v3";
  WriteFileBytes(dir + "/config.json", config.dump());
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(dir, OneThread());
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(engine.status().message().find("mixture-of-experts"), std::string::npos);
}

TEST(QuantEngineTest, NonFiniteScaleIsAnErrorNotGarbage) {
  TempDir tmp;
  const std::string dir = tmp.file("awq");
  CopyFixture("awq-int4", dir);
  const std::string file = dir + "/model.safetensors";
  std::string bytes = ReadFileBytes(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const json entry = json::parse(bytes.substr(8, header))["model.layers.1.mlp.up_proj.scales"];
  const size_t at = 8 + header + entry["data_offsets"][0].get<size_t>() + 2 * 5;
  bytes[at] = 0x00;  // F16 +infinity: 0x7c00, little-endian
  bytes[at + 1] = 0x7c;
  WriteFileBytes(file, bytes);
  std::unique_ptr<Engine> engine = testing::OpenEngine(dir, OneThread());
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Add(testing::GreedyRequest({1, 2, 3}, 1)).ok());
  StatusOr<PassStats> pass = engine->Step();
  ASSERT_FALSE(pass.ok());
  EXPECT_NE(pass.status().message().find("'model.layers.1.mlp.up_proj.scales': scale 5 is inf"),
            std::string::npos)
      << pass.status().ToString();
}

}  // namespace
}  // namespace nightshift::engine
