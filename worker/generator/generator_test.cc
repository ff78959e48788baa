#include "worker/generator/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "tests/testing/paths.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/quantization.h"
#include "worker/engine/architecture.h"
#include "worker/engine/convert.h"
#include "worker/engine/quant_dequant.h"

namespace nightshift::generator {
namespace {
namespace fs = std::filesystem;
using checkpoint::DType;
using engine::LayerWeight;

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ns_generator_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static CheckpointSpec Small(const std::string& arch) {
    CheckpointSpec s;
    s.arch = arch;
    s.hidden = 64;
    s.layers = 3;
    s.heads = 4;
    s.kv_heads = 2;
    s.intermediate = 96;
    s.vocab = 200;
    s.seed = 7;
    if (IsMixtureOfExperts(arch)) {
      s.experts = 4;
      s.top_k = 2;
      if (arch != "mixtral") s.moe_intermediate = 32;
      if (arch == "qwen2_moe") s.shared_expert_intermediate = 48;
    }
    return s;
  }

  fs::path root_;
};

std::string ReadBytes(const fs::path& path, uint64_t offset, uint64_t size) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string out(size, '\0');
  in.read(out.data(), static_cast<std::streamsize>(size));
  return out;
}

std::string TensorBytes(const checkpoint::Checkpoint& c, const std::string& name) {
  const checkpoint::TensorInfo* t = c.Find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return "";
  return ReadBytes(c.files[static_cast<size_t>(t->file)].path, t->offset, t->size);
}

// Every registered family reads back through the metadata reader and the
// one config reader, and binds to the engine's architecture with no missing
// or extra tensor.
TEST_F(GeneratorTest, EveryArchitectureBindsInTheEngine) {
  ASSERT_EQ(checkpoint::ModelFamilies().size(), engine::Architectures().size());
  for (const checkpoint::ModelFamily* family : checkpoint::ModelFamilies()) {
    const std::string& arch = family->model_type;
    for (bool tied : {false, true}) {
      CheckpointSpec spec = Small(arch);
      if (arch == "gpt_neox") spec.kv_heads = spec.heads;  // per-head fused qkv: no GQA
      spec.tie_embeddings = tied;
      fs::path dir = root_ / (std::string(arch) + (tied ? "_tied" : ""));
      auto report = WriteCheckpoint(spec, dir.string());
      ASSERT_TRUE(report.ok()) << arch << ": " << report.status().ToString();
      auto ckpt = checkpoint::ReadCheckpoint(dir.string());
      ASSERT_TRUE(ckpt.ok()) << arch << ": " << ckpt.status().ToString();
      EXPECT_EQ(ckpt->ModelType(), arch);
      EXPECT_EQ(ckpt->layers.size(), 3u);
      EXPECT_EQ(ckpt->tied_embeddings, tied);
      EXPECT_EQ(ckpt->total_bytes, report->tensor_bytes);
      EXPECT_EQ(static_cast<int64_t>(ckpt->tensors.size()), report->tensors);
      auto config = checkpoint::ParseModelConfig(ckpt->config);
      ASSERT_TRUE(config.ok()) << config.status().ToString();
      EXPECT_EQ(config->hidden_size, 64);
      EXPECT_EQ(config->num_layers, 3);
      EXPECT_EQ(config->num_kv_heads, spec.kv_heads);
      EXPECT_EQ(config->head_dim, 16);
      EXPECT_EQ(config->tied_embeddings, tied);
      EXPECT_DOUBLE_EQ(config->norm_eps, spec.norm_eps);
      // Every key the family's writer spells is in the file as written.
      auto spelled = checkpoint::ModelConfigJson(*config);
      ASSERT_TRUE(spelled.ok()) << spelled.status().ToString();
      for (const auto& [key, value] : spelled->items()) {
        EXPECT_EQ(ckpt->config.value(key, nlohmann::json()), value) << arch << " " << key;
      }
      auto found = engine::FindArchitecture(arch);
      ASSERT_TRUE(found.ok());
      auto bound = engine::BindTensors(**found, *config, *ckpt);
      EXPECT_TRUE(bound.ok()) << arch << ": " << bound.status().ToString();
      EXPECT_EQ(ckpt->generation_config["eos_token_id"], 2);
    }
  }
}

// --quantize writes each format exactly as the reader expects it (any
// family, parts across shards), and the stored values are the rounding of
// the unquantized checkpoint of the same seed: within half a step of int4,
// within an E4M3 rounding (1/16 relative) of FP8.
TEST_F(GeneratorTest, QuantizedCheckpointsReadAsTheirFormatAndRoundTheFloatWeights) {
  CheckpointSpec plain = Small("phi3");  // fused qkv and gate_up
  plain.dtype = DType::kF32;
  plain.intermediate = 128;
  ASSERT_TRUE(WriteCheckpoint(plain, (root_ / "f32").string()).ok());
  auto reference = checkpoint::ReadCheckpoint((root_ / "f32").string());
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  using checkpoint::QuantFormat;
  for (QuantFormat format :
       {QuantFormat::kAwq, QuantFormat::kGptq, QuantFormat::kFp8Channel, QuantFormat::kFp8Block}) {
    CheckpointSpec spec = Small("phi3");
    spec.intermediate = 128;
    spec.shards = 3;
    spec.quantize.format = format;
    spec.quantize.group_size = 32;
    const fs::path dir = root_ / checkpoint::QuantFormatName(format);
    auto report = WriteCheckpoint(spec, dir.string());
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    auto ckpt = checkpoint::ReadCheckpoint(dir.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ(ckpt->quantization.format, format);
    EXPECT_EQ(ckpt->total_bytes, report->tensor_bytes);
    auto config = checkpoint::ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok());
    auto bound = engine::BindTensors(**engine::FindArchitecture("phi3"), *config, *ckpt);
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    int quantized = 0;
    for (const checkpoint::TensorInfo& t : ckpt->tensors) {
      if (!t.quant) continue;
      ++quantized;
      const checkpoint::QuantizedTensor& q = *t.quant;
      // The parts where a loader puts them.
      std::string buffer(q.region_bytes + checkpoint::kPartAlign, '\0');
      const size_t first = q.parts[0].offset % checkpoint::kPartAlign;
      for (size_t k = 0; k < q.parts.size(); ++k) {
        const checkpoint::TensorInfo& p = q.parts[k];
        buffer.replace(first + q.part_offsets[k], p.size,
                       ReadBytes(ckpt->files[static_cast<size_t>(p.file)].path, p.offset, p.size));
      }
      const engine::QuantView view(t,
                                   reinterpret_cast<const unsigned char*>(buffer.data()) + first);
      std::vector<float> w(static_cast<size_t>(q.out * q.in));
      if (view.input_major()) {
        std::vector<float> wt(w.size());
        engine::DequantInputRows(view, 0, q.in, 0, q.out, wt.data());
        for (int64_t i = 0; i < q.in; ++i) {
          for (int64_t o = 0; o < q.out; ++o) w[o * q.in + i] = wt[i * q.out + o];
        }
      } else {
        engine::DequantOutputRows(view, 0, q.out, w.data());
      }
      const std::string f = TensorBytes(*reference, t.name);
      ASSERT_EQ(f.size(), w.size() * 4) << t.name;
      const float* original = reinterpret_cast<const float*>(f.data());
      const int64_t g = 32;
      for (int64_t o = 0; o < q.out; ++o) {
        for (int64_t i = 0; i < q.in; ++i) {
          const float x = original[o * q.in + i], y = w[static_cast<size_t>(o * q.in + i)];
          if (view.input_major()) {
            float lo = 0, hi = 0;
            for (int64_t j = i / g * g; j < i / g * g + g; ++j) {
              lo = std::min(lo, original[o * q.in + j]);
              hi = std::max(hi, original[o * q.in + j]);
            }
            ASSERT_LE(std::fabs(x - y), 0.51f * (hi - lo) / 15 + 1e-6f) << t.name << " " << o;
          } else {
            ASSERT_LE(std::fabs(x - y), std::fabs(x) / 16 + 1e-4f) << t.name << " " << o;
          }
        }
      }
    }
    EXPECT_EQ(quantized, 3 * 4);  // qkv, o, gate_up, down per layer
  }
  CheckpointSpec bad = Small("llama");
  bad.quantize.format = QuantFormat::kAwq;
  bad.quantize.group_size = 40;
  auto refused = WriteCheckpoint(bad, (root_ / "bad").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cannot quantize 'model.layers.0.self_attn.q_proj'"),
            std::string::npos)
      << refused.status().ToString();
}

// The same seed gives the same model whatever the sharding; another seed
// gives another model.
TEST_F(GeneratorTest, ValuesDependOnSeedAndNameNotOnShards) {
  CheckpointSpec spec = Small("llama");
  ASSERT_TRUE(WriteCheckpoint(spec, (root_ / "one").string()).ok());
  spec.shards = 3;
  ASSERT_TRUE(WriteCheckpoint(spec, (root_ / "three").string()).ok());
  spec.seed = 8;
  spec.shards = 1;
  ASSERT_TRUE(WriteCheckpoint(spec, (root_ / "other").string()).ok());

  auto one = checkpoint::ReadCheckpoint((root_ / "one").string());
  auto three = checkpoint::ReadCheckpoint((root_ / "three").string());
  auto other = checkpoint::ReadCheckpoint((root_ / "other").string());
  ASSERT_TRUE(one.ok() && three.ok() && other.ok()) << three.status().ToString();
  EXPECT_EQ(one->files.size(), 1u);
  EXPECT_EQ(three->files.size(), 3u);
  EXPECT_TRUE(fs::exists(root_ / "three" / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(root_ / "three" / "model-00002-of-00003.safetensors"));
  for (const auto& t : one->tensors) {
    EXPECT_EQ(TensorBytes(*one, t.name), TensorBytes(*three, t.name)) << t.name;
  }
  EXPECT_NE(TensorBytes(*one, "model.layers.0.self_attn.q_proj.weight"),
            TensorBytes(*other, "model.layers.0.self_attn.q_proj.weight"));
  // Shards hold about equal shares: none more than twice the average.
  uint64_t largest = 0;
  for (const auto& f : three->files) largest = std::max(largest, f.size);
  EXPECT_LT(largest, 2 * three->total_bytes / 3);
}

std::vector<float> ReadFloats(const checkpoint::Checkpoint& c, const std::string& name) {
  const checkpoint::TensorInfo* t = c.Find(name);
  std::string bytes = TensorBytes(c, name);
  std::vector<float> out(static_cast<size_t>(t->numel()));
  engine::ConvertToFloat(bytes.data(), t->dtype, t->numel(), out.data());
  return out;
}

void MeanStd(const std::vector<float>& v, double* mean, double* std) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  *mean = s / static_cast<double>(v.size());
  for (float x : v) s2 += (x - *mean) * (x - *mean);
  *std = std::sqrt(s2 / static_cast<double>(v.size()));
}

// Linear weights are N(0, 1/fan_in); norm weights 1 + 0.1 N(0, 1).
TEST_F(GeneratorTest, WeightsHaveTheDocumentedDistribution) {
  CheckpointSpec spec = Small("qwen2");
  spec.hidden = 256;
  spec.intermediate = 512;
  spec.dtype = DType::kF16;
  ASSERT_TRUE(WriteCheckpoint(spec, root_.string()).ok());
  auto c = checkpoint::ReadCheckpoint(root_.string());
  ASSERT_TRUE(c.ok());
  double mean, std;
  MeanStd(ReadFloats(*c, "model.layers.1.mlp.down_proj.weight"), &mean, &std);  // fan_in 512
  EXPECT_NEAR(mean, 0.0, 0.003);
  EXPECT_NEAR(std, 1.0 / std::sqrt(512.0), 0.03 / std::sqrt(512.0));
  MeanStd(ReadFloats(*c, "model.layers.2.input_layernorm.weight"), &mean, &std);
  EXPECT_NEAR(mean, 1.0, 0.03);
  EXPECT_NEAR(std, 0.1, 0.02);
  MeanStd(ReadFloats(*c, "model.layers.0.self_attn.k_proj.bias"), &mean, &std);
  EXPECT_NEAR(std, 0.02, 0.01);
}

// FromFloat is the exact inverse of the engine's ConvertToFloat on values
// each format can hold, and rounds to nearest even otherwise.
TEST(FromFloatTest, RoundTripsThroughTheEnginesConversion) {
  std::mt19937 gen(3);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, 1e-7f, 6.1e-5f, 0.1f, 3.0e38f};
  std::lognormal_distribution<float> mag(0.0f, 6.0f);
  for (int i = 0; i < 20000; ++i) values.push_back((i % 2 ? -1 : 1) * mag(gen));
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> once(values.size()), twice(values.size());
    std::vector<float> back(values.size());
    FromFloat(values.data(), n, dtype, once.data());
    engine::ConvertToFloat(once.data(), dtype, n, back.data());
    FromFloat(back.data(), n, dtype, twice.data());
    EXPECT_EQ(once, twice) << checkpoint::DTypeName(
        dtype);  // representable values are fixed points
    const double rel = dtype == DType::kF16 ? 1.0 / 2048 : 1.0 / 256;  // half an ulp
    for (size_t i = 0; i < values.size(); ++i) {
      float v = values[i];
      if (dtype == DType::kF16 && (std::fabs(v) > 65504.0f || std::fabs(v) < 6.2e-5f)) continue;
      EXPECT_LE(std::fabs(back[i] - v), rel * std::fabs(v) + 1e-45) << v;
    }
  }
  uint16_t h[4];
  float special[4] = {1.0f, 0.1f, 1e-7f, 1e6f};
  FromFloat(special, 4, DType::kF16, h);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x2E66);  // 0.1 rounds to 0.0999755859375
  EXPECT_EQ(h[2], 0x0002);  // subnormal: 1e-7 / 2^-24 = 1.68 rounds to 2
  EXPECT_EQ(h[3], 0x7C00);  // overflow: +inf
}

TEST_F(GeneratorTest, TakesVocabularyAndSpecialTokensFromATokenizer) {
  CheckpointSpec spec = Small("llama");
  spec.vocab = 0;
  spec.tokenizer_dir = testutil::DataPath("tokenizers/mistral7b");
  ASSERT_TRUE(WriteCheckpoint(spec, root_.string()).ok());
  auto c = checkpoint::ReadCheckpoint(root_.string());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->config["vocab_size"], 32000);
  EXPECT_EQ(c->config["bos_token_id"], 1);  // <s>
  EXPECT_EQ(c->config["eos_token_id"], 2);  // </s>
  EXPECT_TRUE(fs::exists(root_ / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(root_ / "tokenizer_config.json"));

  spec.vocab = 100;  // smaller than the tokenizer's
  auto refused = WriteCheckpoint(spec, (root_ / "small").string());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("smaller than the tokenizer's 32000"),
            std::string::npos);
}

TEST_F(GeneratorTest, RefusesBadSpecsAndNonEmptyDirectories) {
  CheckpointSpec spec = Small("llama");
  spec.kv_heads = 3;  // 4 heads are not divisible into 3 groups
  auto bad = WriteCheckpoint(spec, (root_ / "bad").string());
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("num_key_value_heads"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(fs::exists(root_ / "bad" / "config.json"));

  spec = Small("gpt2");
  EXPECT_EQ(WriteCheckpoint(spec, (root_ / "gpt2").string()).status().code(),
            StatusCode::kUnimplemented);

  spec = Small("llama");
  std::ofstream(root_ / "keep.txt") << "x";
  EXPECT_EQ(WriteCheckpoint(spec, root_.string()).status().code(), StatusCode::kFailedPrecondition);
}

// Each mixture-of-experts family: the config says what the spec asked, and
// the checkpoint holds exactly what the engine binds: a router and E experts
// under the family's names in each sparse layer (Qwen2-MoE's shared expert
// and its gate too), a dense MLP in the others.
TEST_F(GeneratorTest, MixturesOfExpertsBindWithEveryExpert) {
  struct Case {
    const char* arch;
    std::vector<int64_t> sparse;
  };
  for (const Case& k :
       {Case{"mixtral", {0, 1, 2}}, Case{"qwen2_moe", {0, 2}}, Case{"qwen3_moe", {1, 3}}}) {
    SCOPED_TRACE(k.arch);
    CheckpointSpec spec = Small(k.arch);
    spec.dtype = DType::kF32;
    spec.experts = 6;
    spec.top_k = 2;
    if (spec.arch == "qwen2_moe") {
      spec.mlp_only_layers = {1};
      spec.norm_topk_prob = false;
    }
    if (spec.arch == "qwen3_moe") {
      spec.layers = 4;
      spec.decoder_sparse_step = 2;
      spec.norm_topk_prob = true;
    }
    spec.shards = 2;
    const fs::path dir = root_ / k.arch;
    auto report = WriteCheckpoint(spec, dir.string());
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    auto ckpt = checkpoint::ReadCheckpoint(dir.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    auto config = checkpoint::ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    const checkpoint::MoeConfig& m = config->moe;
    EXPECT_EQ(m.num_experts, 6);
    EXPECT_EQ(m.top_k, 2);
    EXPECT_EQ(m.expert_intermediate_size, spec.arch == "mixtral" ? 96 : 32);
    EXPECT_EQ(m.shared_expert_intermediate_size, spec.arch == "qwen2_moe" ? 48 : 0);
    EXPECT_EQ(m.norm_topk_prob, spec.arch != "qwen2_moe");
    EXPECT_EQ(m.mlp_only_layers, spec.mlp_only_layers);
    std::vector<int64_t> sparse;
    for (int64_t i = 0; i < config->num_layers; ++i) {
      if (config->IsSparseLayer(i)) sparse.push_back(i);
    }
    EXPECT_EQ(sparse, k.sparse);

    const engine::Architecture& arch = **engine::FindArchitecture(spec.arch);
    auto bound = engine::BindTensors(arch, *config, *ckpt);
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    int64_t expected_tensors = 3;  // embedding, final norm, LM head
    for (int64_t i = 0; i < config->num_layers; ++i) {
      const engine::LayerTensors& layer = bound->layers[static_cast<size_t>(i)];
      const bool is_sparse = config->IsSparseLayer(i);
      expected_tensors += static_cast<int64_t>(engine::ExpectedLayerWeights(*config, i).size());
      EXPECT_EQ(layer[LayerWeight::kRouter] != nullptr, is_sparse) << i;
      EXPECT_EQ(layer[LayerWeight::kDown] != nullptr, !is_sparse) << i;
      EXPECT_EQ(layer[LayerWeight::kSharedExpertGate] != nullptr,
                is_sparse && spec.arch == "qwen2_moe")
          << i;
      EXPECT_EQ(layer.experts.size(), is_sparse ? 6u : 0u) << i;
      expected_tensors += static_cast<int64_t>(layer.experts.size() * 3);
    }
    EXPECT_EQ(report->tensors, expected_tensors);
    EXPECT_EQ(static_cast<int64_t>(ckpt->tensors.size()), expected_tensors);
    EXPECT_EQ(ckpt->total_bytes, report->tensor_bytes);
    // Experts are N(0, 1/fan_in) like any projection, each its own draw.
    const std::string prefix =
        "model.layers." + std::to_string(k.sparse.back()) + "." + arch.names.expert_prefix;
    const std::string up = arch.names.expert[static_cast<size_t>(engine::ExpertWeight::kUp)];
    EXPECT_NE(TensorBytes(*ckpt, prefix + "0." + up), TensorBytes(*ckpt, prefix + "1." + up));
    double mean, std;
    MeanStd(ReadFloats(*ckpt, prefix + "5." + up), &mean, &std);
    EXPECT_NEAR(std, 1.0 / 8, 0.15 / 8);  // fan_in = hidden 64
  }
}

// Quantized, the experts and the shared expert are stored in the format like
// any projection; the router and the shared expert's gate stay in the model
// dtype (they are not projections the engine may quantize).
TEST_F(GeneratorTest, QuantizedMixtureOfExpertsQuantizesTheExperts) {
  using checkpoint::QuantFormat;
  for (QuantFormat format : {QuantFormat::kAwq, QuantFormat::kFp8Block}) {
    CheckpointSpec spec = Small("qwen2_moe");
    spec.shared_expert_intermediate = 64;  // int4 groups of 32 along its input
    spec.quantize.format = format;
    spec.quantize.group_size = 32;
    const fs::path dir = root_ / checkpoint::QuantFormatName(format);
    auto report = WriteCheckpoint(spec, dir.string());
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    auto ckpt = checkpoint::ReadCheckpoint(dir.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ(ckpt->quantization.format, format);
    auto config = checkpoint::ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    auto bound = engine::BindTensors(**engine::FindArchitecture("qwen2_moe"), *config, *ckpt);
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    for (const engine::LayerTensors& layer : bound->layers) {
      for (const engine::ExpertTensors& expert : layer.experts) {
        for (const checkpoint::TensorInfo* t : expert.weights) {
          EXPECT_TRUE(t->quant) << t->name;
        }
      }
      if (layer.experts.empty()) continue;
      EXPECT_EQ(layer.experts.size(), 4u);
      EXPECT_FALSE(layer[LayerWeight::kRouter]->quant);
      EXPECT_EQ(layer[LayerWeight::kRouter]->dtype, DType::kBF16);
      EXPECT_FALSE(layer[LayerWeight::kSharedExpertGate]->quant);
      EXPECT_TRUE(layer[LayerWeight::kSharedUp]->quant);
    }
  }
}

TEST_F(GeneratorTest, RefusesExpertsTheFamilyCannotStore) {
  CheckpointSpec spec = Small("llama");
  spec.experts = 8;
  auto refused = WriteCheckpoint(spec, (root_ / "llama").string());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("not 'llama'"), std::string::npos)
      << refused.status().message();

  spec = Small("mixtral");
  spec.shared_expert_intermediate = 32;
  refused = WriteCheckpoint(spec, (root_ / "shared").string());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "model_type 'mixtral' cannot store --shared-expert-intermediate"),
            std::string::npos)
      << refused.status().message();

  spec = Small("mixtral");
  spec.moe_intermediate = 32;  // Mixtral's experts are intermediate_size wide
  refused = WriteCheckpoint(spec, (root_ / "width").string());
  EXPECT_NE(refused.status().message().find("cannot store --moe-intermediate"), std::string::npos)
      << refused.status().message();

  spec = Small("mixtral");
  spec.norm_topk_prob = false;
  EXPECT_NE(WriteCheckpoint(spec, (root_ / "norm").string())
                .status()
                .message()
                .find("cannot store --norm-topk-prob"),
            std::string::npos);

  spec = Small("mixtral");
  spec.decoder_sparse_step = 2;
  EXPECT_NE(WriteCheckpoint(spec, (root_ / "step").string())
                .status()
                .message()
                .find("cannot store --decoder-sparse-step"),
            std::string::npos);

  spec = Small("qwen3_moe");
  spec.top_k = 5;  // of 4
  refused = WriteCheckpoint(spec, (root_ / "topk").string());
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("'num_experts_per_tok' 5 is more than the 4 experts"),
            std::string::npos)
      << refused.status().message();

  spec = Small("qwen2_moe");
  spec.mlp_only_layers = {3};  // of 3 layers
  refused = WriteCheckpoint(spec, (root_ / "dense").string());
  EXPECT_NE(refused.status().message().find("'mlp_only_layers' names layer 3"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(fs::exists(root_ / "dense" / "config.json"));

  EXPECT_TRUE(IsMixtureOfExperts("qwen3_moe"));
  EXPECT_FALSE(IsMixtureOfExperts("qwen3"));
  EXPECT_FALSE(IsMixtureOfExperts("deepseek_v3"));
}

TEST(PresetTest, MixtureOfExpertsPresets) {
  struct Want {
    const char* name;
    const char* model_type;
    int64_t hidden, layers, heads, kv_heads, head_dim, experts, width, top_k, vocab;
    bool norm_topk_prob;
  };
  for (const Want& w : {
           Want{"mixtral-8x7b", "mixtral", 4096, 32, 32, 8, 128, 8, 14336, 2, 32000, true},
           Want{"qwen3-30b-a3b", "qwen3_moe", 2048, 48, 32, 4, 128, 128, 768, 8, 151936, true},
           Want{"qwen3-235b-a22b", "qwen3_moe", 4096, 94, 64, 4, 128, 128, 1536, 8, 151936, true},
       }) {
    SCOPED_TRACE(w.name);
    auto spec = Preset(w.name);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto json = ConfigJson(*spec);
    ASSERT_TRUE(json.ok()) << json.status().ToString();
    auto c = checkpoint::ParseModelConfig(*json);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->model_type, w.model_type);
    EXPECT_EQ(c->hidden_size, w.hidden);
    EXPECT_EQ(c->num_layers, w.layers);
    EXPECT_EQ(c->num_heads, w.heads);
    EXPECT_EQ(c->num_kv_heads, w.kv_heads);
    EXPECT_EQ(c->head_dim, w.head_dim);
    EXPECT_EQ(c->vocab_size, w.vocab);
    EXPECT_EQ(c->moe.num_experts, w.experts);
    EXPECT_EQ(c->moe.expert_intermediate_size, w.width);
    EXPECT_EQ(c->moe.top_k, w.top_k);
    EXPECT_EQ(c->moe.norm_topk_prob, w.norm_topk_prob);
    EXPECT_EQ(c->moe.shared_expert_intermediate_size, 0);
    for (int64_t i = 0; i < c->num_layers; ++i) EXPECT_TRUE(c->IsSparseLayer(i)) << i;
  }
  EXPECT_EQ((*ConfigJson(*Preset("qwen3-30b-a3b")))["intermediate_size"], 6144);
  EXPECT_EQ((*ConfigJson(*Preset("qwen3-235b-a22b")))["intermediate_size"], 12288);
  EXPECT_EQ((*ConfigJson(*Preset("mixtral-8x7b")))["architectures"][0], "MixtralForCausalLM");
}

TEST(PresetTest, PresetsHaveRealShapes) {
  auto llama3 = Preset("llama-3-8b");
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(llama3->hidden, 4096);
  EXPECT_EQ(llama3->vocab, 128256);
  EXPECT_EQ((*ConfigJson(*llama3))["rope_scaling"]["rope_type"], "llama3");
  for (const std::string& name : PresetNames()) {
    auto spec = Preset(name);
    ASSERT_TRUE(spec.ok()) << name;
    auto json = ConfigJson(*spec);
    ASSERT_TRUE(json.ok()) << name << ": " << json.status().ToString();
    auto config = checkpoint::ParseModelConfig(*json);
    EXPECT_TRUE(config.ok()) << name << ": " << config.status().ToString();
  }
  EXPECT_EQ(Preset("gpt-5").status().code(), StatusCode::kNotFound);
  EXPECT_NE(Preset("gpt-5").status().message().find("llama-2-70b"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::generator
