#include "worker/engine/architecture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace nightshift::engine {
namespace {

using checkpoint::Checkpoint;
using checkpoint::DType;
using checkpoint::TensorInfo;
using nlohmann::json;
using ::testing::HasSubstr;

json BaseConfig(const std::string& model_type) {
  json j = json::parse(R"({
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 384,
    "max_position_embeddings": 512
  })");
  j["model_type"] = model_type;
  return j;
}

// A checkpoint (metadata only) holding `names` with `shapes`, sorted by name.
Checkpoint MakeCheckpoint(std::vector<TensorInfo> tensors) {
  Checkpoint ckpt;
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  ckpt.tensors = std::move(tensors);
  return ckpt;
}

TensorInfo Tensor(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::kF32) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.size = static_cast<uint64_t>(t.numel()) * checkpoint::DTypeSize(dtype);
  return t;
}

// Every tensor `arch` expects for `config`, with the expected shapes.
std::vector<TensorInfo> ExpectedTensors(const Architecture& arch, const ModelConfig& c,
                                        bool with_lm_head) {
  const TensorNames& n = arch.names;
  std::vector<TensorInfo> out = {Tensor(n.embedding, {c.vocab_size, c.hidden_size}),
                                 Tensor(n.final_norm, {c.hidden_size})};
  if (c.norm == NormKind::kLayerNorm) out.push_back(Tensor(n.final_norm_bias, {c.hidden_size}));
  if (with_lm_head) out.push_back(Tensor(n.lm_head, {c.vocab_size, c.hidden_size}));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (LayerWeight role : ExpectedLayerWeights(c, 0)) {
      out.push_back(
          Tensor(n.layer_prefix + std::to_string(i) + "." + n.layer[static_cast<size_t>(role)],
                 ExpectedShape(c, role)));
    }
  }
  return out;
}

TEST(ArchitectureTest, TableHasUniqueModelTypesFoundByName) {
  std::set<std::string> seen;
  for (const Architecture* arch : Architectures()) {
    EXPECT_TRUE(seen.insert(arch->model_type).second) << arch->model_type;
    StatusOr<const Architecture*> found = FindArchitecture(arch->model_type);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found, arch);
  }
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gpt_neox", "phi3"}) {
    EXPECT_TRUE(seen.count(type)) << type;
  }
  EXPECT_EQ(FindArchitecture("bert").status().code(), StatusCode::kUnimplemented);
}

// One architecture (tensor names) per registered config family, in its order.
TEST(ArchitectureTest, OnePerConfigFamily) {
  const auto& families = checkpoint::ModelFamilies();
  ASSERT_EQ(Architectures().size(), families.size());
  for (size_t i = 0; i < families.size(); ++i) {
    EXPECT_EQ(Architectures()[i]->model_type, families[i]->model_type);
  }
}

TEST(ArchitectureTest, MixtureOfExpertsIsRefusedWithTheReason) {
  for (const char* type : {"mixtral", "qwen2_moe"}) {
    StatusOr<const Architecture*> found = FindArchitecture(type);
    EXPECT_EQ(found.status().code(), StatusCode::kUnimplemented);
    EXPECT_THAT(found.status().message(), HasSubstr("is a mixture-of-experts model"));
  }
}

TEST(ArchitectureTest, EveryExpectedRoleHasAName) {
  for (const Architecture* arch : Architectures()) {
    json j = BaseConfig(arch->model_type);
    j.erase("num_key_value_heads");  // GPT-NeoX has no grouped-query attention
    for (bool flag : {false, true}) {
      j["attention_bias"] = flag;
      j["mlp_bias"] = flag;
      StatusOr<ModelConfig> c = ParseModelConfig(j);
      ASSERT_TRUE(c.ok()) << arch->model_type << ": " << c.status().ToString();
      for (LayerWeight role : ExpectedLayerWeights(*c, 0)) {
        EXPECT_FALSE(arch->names.layer[static_cast<size_t>(role)].empty())
            << arch->model_type << " " << LayerWeightName(role);
      }
    }
  }
}

TEST(ArchitectureTest, ExpectedLayerWeightsFollowTheFlags) {
  ModelConfig c = *ParseModelConfig(BaseConfig("llama"));
  using W = LayerWeight;
  EXPECT_EQ(ExpectedLayerWeights(c, 0), (std::vector<W>{W::kAttnNorm, W::kQ, W::kK, W::kV, W::kO,
                                                        W::kMlpNorm, W::kGate, W::kUp, W::kDown}));
  c.qkv_bias = true;
  c.qk_norm = true;
  c.mlp = MlpKind::kGatedFused;
  c.qkv_layout = QkvLayout::kFusedBlocks;
  EXPECT_EQ(ExpectedLayerWeights(c, 0),
            (std::vector<W>{W::kAttnNorm, W::kQkv, W::kQkvBias, W::kO, W::kQNorm, W::kKNorm,
                            W::kMlpNorm, W::kGateUp, W::kDown}));
  c.norm = NormKind::kLayerNorm;
  c.mlp = MlpKind::kPlain;
  c.mlp_bias = c.o_bias = true;
  c.qk_norm = false;
  EXPECT_EQ(
      ExpectedLayerWeights(c, 0),
      (std::vector<W>{W::kAttnNorm, W::kAttnNormBias, W::kQkv, W::kQkvBias, W::kO, W::kOBias,
                      W::kMlpNorm, W::kMlpNormBias, W::kUp, W::kUpBias, W::kDown, W::kDownBias}));
}

TEST(ArchitectureTest, ExpectedShapes) {
  json j = BaseConfig("qwen3");
  j["head_dim"] = 32;
  ModelConfig c = *ParseModelConfig(j);
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kQ), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kK), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kO), (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kQNorm), (std::vector<int64_t>{32}));
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kQkv), (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kGateUp), (std::vector<int64_t>{352, 64}));
  EXPECT_EQ(ExpectedShape(c, LayerWeight::kDown), (std::vector<int64_t>{64, 176}));
}

class BindTest : public ::testing::Test {
 protected:
  const Architecture& arch_ = **FindArchitecture("llama");
  ModelConfig config_ = *ParseModelConfig(BaseConfig("llama"));
};

TEST_F(BindTest, BindsEveryRole) {
  Checkpoint ckpt = MakeCheckpoint(ExpectedTensors(arch_, config_, true));
  StatusOr<ModelTensors> bound = BindTensors(arch_, config_, ckpt);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(bound->embedding->name, "model.embed_tokens.weight");
  EXPECT_EQ(bound->lm_head->name, "lm_head.weight");
  EXPECT_EQ(bound->final_norm_bias, nullptr);
  ASSERT_EQ(bound->layers.size(), 2u);
  EXPECT_EQ(bound->layers[1][LayerWeight::kQ]->name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(bound->layers[1][LayerWeight::kQBias], nullptr);
  uint64_t layer_bytes = 0;
  for (LayerWeight role : ExpectedLayerWeights(config_, 0)) {
    layer_bytes += static_cast<uint64_t>(bound->layers[0][role]->numel()) * 4;
  }
  EXPECT_EQ(bound->layers[0].bytes, layer_bytes);
}

TEST_F(BindTest, MissingTensor) {
  std::vector<TensorInfo> tensors = ExpectedTensors(arch_, config_, true);
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const TensorInfo& t) {
                                 return t.name == "model.layers.1.mlp.up_proj.weight";
                               }),
                tensors.end());
  StatusOr<ModelTensors> bound = BindTensors(arch_, config_, MakeCheckpoint(tensors));
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bound.status().message(),
              HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight'"));
}

TEST_F(BindTest, UntiedConfigNeedsAnLmHead) {
  StatusOr<ModelTensors> bound =
      BindTensors(arch_, config_, MakeCheckpoint(ExpectedTensors(arch_, config_, false)));
  EXPECT_THAT(bound.status().message(), HasSubstr("missing tensor 'lm_head.weight'"));
}

TEST_F(BindTest, TiedHeadIsTheEmbeddingUnlessACopyIsStored) {
  config_.tied_embeddings = true;
  StatusOr<ModelTensors> tied =
      BindTensors(arch_, config_, MakeCheckpoint(ExpectedTensors(arch_, config_, false)));
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_EQ(tied->lm_head, tied->embedding);
  Checkpoint with_copy = MakeCheckpoint(ExpectedTensors(arch_, config_, true));
  StatusOr<ModelTensors> copy = BindTensors(arch_, config_, with_copy);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->lm_head->name, "lm_head.weight");
}

TEST_F(BindTest, UnexpectedTensorIsRefusedButInvFreqIgnored) {
  std::vector<TensorInfo> tensors = ExpectedTensors(arch_, config_, true);
  tensors.push_back(Tensor("model.layers.0.self_attn.rotary_emb.inv_freq", {8}));
  ASSERT_TRUE(BindTensors(arch_, config_, MakeCheckpoint(tensors)).ok());
  tensors.push_back(Tensor("model.layers.0.self_attn.extra.weight", {8}));
  StatusOr<ModelTensors> bound = BindTensors(arch_, config_, MakeCheckpoint(tensors));
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(
      bound.status().message(),
      HasSubstr(
          "unexpected tensor 'model.layers.0.self_attn.extra.weight' for model_type 'llama'"));
}

TEST_F(BindTest, LayersBeyondTheConfigAreUnexpected) {
  std::vector<TensorInfo> tensors = ExpectedTensors(arch_, config_, true);
  tensors.push_back(Tensor("model.layers.2.input_layernorm.weight", {64}));
  EXPECT_THAT(BindTensors(arch_, config_, MakeCheckpoint(tensors)).status().message(),
              HasSubstr("unexpected tensor 'model.layers.2.input_layernorm.weight'"));
}

TEST_F(BindTest, BiasesTheConfigDoesNotAskForAreUnexpected) {
  std::vector<TensorInfo> tensors = ExpectedTensors(arch_, config_, true);
  tensors.push_back(Tensor("model.layers.0.self_attn.q_proj.bias", {64}));
  EXPECT_THAT(BindTensors(arch_, config_, MakeCheckpoint(tensors)).status().message(),
              HasSubstr("unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"));
}

TEST_F(BindTest, WrongShape) {
  std::vector<TensorInfo> tensors = ExpectedTensors(arch_, config_, true);
  for (TensorInfo& t : tensors) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {64, 64};
  }
  StatusOr<ModelTensors> bound = BindTensors(arch_, config_, MakeCheckpoint(tensors));
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bound.status().message(),
              HasSubstr("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [64, 64], "
                        "expected [32, 64]"));
}

TEST_F(BindTest, UnsupportedDType) {
  std::vector<TensorInfo> tensors = ExpectedTensors(arch_, config_, true);
  for (TensorInfo& t : tensors) {
    if (t.name == "model.norm.weight") t.dtype = DType::kF8E4M3;
  }
  StatusOr<ModelTensors> bound = BindTensors(arch_, config_, MakeCheckpoint(tensors));
  EXPECT_EQ(bound.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(bound.status().message(), HasSubstr("'model.norm.weight' has dtype F8_E4M3"));
}

}  // namespace
}  // namespace nightshift::engine
