#include "worker/engine/architecture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "worker/checkpoint/test_util.h"

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

// Every tensor `arch` expects for `config`, with the expected shapes (a
// sparse layer's experts included).
std::vector<TensorInfo> ExpectedTensors(const Architecture& arch, const ModelConfig& c,
                                        bool with_lm_head) {
  const TensorNames& n = arch.names;
  std::vector<TensorInfo> out = {Tensor(n.embedding, {c.vocab_size, c.hidden_size}),
                                 Tensor(n.final_norm, {c.hidden_size})};
  if (c.norm == NormKind::kLayerNorm) out.push_back(Tensor(n.final_norm_bias, {c.hidden_size}));
  if (with_lm_head) out.push_back(Tensor(n.lm_head, {c.vocab_size, c.hidden_size}));
  const int64_t h = c.hidden_size, width = c.moe.expert_intermediate_size;
  const std::vector<int64_t> expert_shapes[kExpertWeightCount] = {
      {width, h}, {width, h}, {h, width}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string prefix = n.layer_prefix + std::to_string(i) + ".";
    for (LayerWeight role : ExpectedLayerWeights(c, i)) {
      out.push_back(Tensor(prefix + n.layer[static_cast<size_t>(role)], ExpectedShape(c, role)));
    }
    if (!c.IsSparseLayer(i)) continue;
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      for (size_t w = 0; w < kExpertWeightCount; ++w) {
        out.push_back(Tensor(prefix + n.expert_prefix + std::to_string(e) + "." + n.expert[w],
                             expert_shapes[w]));
      }
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
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gpt_neox", "phi3",
                           "mixtral", "qwen2_moe", "qwen3_moe"}) {
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

TEST(ArchitectureTest, OtherMixturesOfExpertsAreRefusedWithTheReason) {
  for (const char* type : {"deepseek_v3", "gpt_oss", "olmoe"}) {
    StatusOr<const Architecture*> found = FindArchitecture(type);
    EXPECT_EQ(found.status().code(), StatusCode::kUnimplemented) << type;
    EXPECT_THAT(found.status().message(), HasSubstr("is a mixture-of-experts model"));
  }
  for (const char* type : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    EXPECT_TRUE(FindArchitecture(type).ok()) << type;
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
      for (int64_t i = 0; i < c->num_layers; ++i) {
        for (LayerWeight role : ExpectedLayerWeights(*c, i)) {
          EXPECT_FALSE(arch->names.layer[static_cast<size_t>(role)].empty())
              << arch->model_type << " " << LayerWeightName(role);
        }
      }
      if (!c->is_moe()) continue;
      EXPECT_FALSE(arch->names.expert_prefix.empty()) << arch->model_type;
      for (const std::string& name : arch->names.expert) {
        EXPECT_FALSE(name.empty()) << arch->model_type;
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
  EXPECT_EQ(bound->layers[0].dense_bytes, layer_bytes);
  EXPECT_TRUE(bound->layers[0].experts.empty());
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

// A sparse layer has the router (and Qwen2-MoE's shared expert) in place of
// the dense MLP; a dense layer of the same model keeps the dense MLP.
TEST(MoeArchitectureTest, ExpectedLayerWeightsOfSparseAndDenseLayers) {
  json j = BaseConfig("qwen2_moe");
  j["num_hidden_layers"] = 3;
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["shared_expert_intermediate_size"] = 96;
  j["mlp_only_layers"] = {1};
  ModelConfig c = *ParseModelConfig(j);
  using W = LayerWeight;
  const std::vector<W> attention = {W::kAttnNorm, W::kQ,     W::kQBias, W::kK,      W::kKBias,
                                    W::kV,        W::kVBias, W::kO,     W::kMlpNorm};
  auto with = [&attention](std::vector<W> mlp) {
    std::vector<W> out = attention;
    out.insert(out.end(), mlp.begin(), mlp.end());
    return out;
  };
  const std::vector<W> sparse =
      with({W::kRouter, W::kSharedGate, W::kSharedUp, W::kSharedDown, W::kSharedExpertGate});
  EXPECT_EQ(ExpectedLayerWeights(c, 0), sparse);
  EXPECT_EQ(ExpectedLayerWeights(c, 1), with({W::kGate, W::kUp, W::kDown}));
  EXPECT_EQ(ExpectedLayerWeights(c, 2), sparse);
  EXPECT_EQ(ExpectedShape(c, W::kRouter), (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(ExpectedShape(c, W::kSharedGate), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(ExpectedShape(c, W::kSharedUp), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(ExpectedShape(c, W::kSharedDown), (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(ExpectedShape(c, W::kSharedExpertGate), (std::vector<int64_t>{1, 64}));
  EXPECT_EQ(ExpectedShape(c, W::kGate), (std::vector<int64_t>{176, 64}));  // intermediate_size

  c.moe.shared_expert_intermediate_size = 0;  // Qwen3-MoE, Mixtral: no shared expert
  EXPECT_EQ(ExpectedLayerWeights(c, 0), with({W::kRouter}));
  EXPECT_TRUE(IsProjection(W::kSharedUp));
  EXPECT_FALSE(IsProjection(W::kRouter));
  EXPECT_FALSE(IsProjection(W::kSharedExpertGate));
}

// Each MoE fixture (tests/data/models/README.md) binds: the router and E
// experts in every sparse layer under the family's names, the dense MLP in
// the others, Qwen2-MoE's shared expert; the bytes add up to the reader's
// layer groups, and an expert's are those of the tensors ExpertIndex finds.
struct MoeFixture {
  const char* dir;
  std::vector<int64_t> sparse_layers;
  const char* router;  // after "model.layers.N."
  const char* expert;  // expert 0's gate, after "model.layers.N."
  bool shared_expert;
};

class MoeFixtureTest : public ::testing::TestWithParam<MoeFixture> {};

TEST_P(MoeFixtureTest, BindsRouterExpertsAndDenseLayers) {
  const MoeFixture& f = GetParam();
  StatusOr<Checkpoint> ckpt = checkpoint::ReadCheckpoint(checkpoint::testing::FixtureDir(f.dir));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  StatusOr<ModelConfig> c = ParseModelConfig(ckpt->config);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StatusOr<const Architecture*> arch = FindArchitecture(c->model_type);
  ASSERT_TRUE(arch.ok()) << arch.status().ToString();
  StatusOr<ModelTensors> bound = BindTensors(**arch, *c, *ckpt);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ASSERT_EQ(bound->layers.size(), static_cast<size_t>(c->num_layers));
  ASSERT_EQ(ckpt->layers.size(), bound->layers.size());

  const int64_t h = c->hidden_size, width = c->moe.expert_intermediate_size;
  const std::vector<int64_t> expert_shapes[kExpertWeightCount] = {
      {width, h}, {width, h}, {h, width}};
  std::vector<int64_t> sparse;
  for (int64_t i = 0; i < c->num_layers; ++i) {
    SCOPED_TRACE(std::string(f.dir) + " layer " + std::to_string(i));
    const LayerTensors& layer = bound->layers[static_cast<size_t>(i)];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    // Whatever the kind, the layer's bytes are the reader's group's.
    EXPECT_EQ(layer.bytes, ckpt->layers[static_cast<size_t>(i)].bytes);
    if (!c->IsSparseLayer(i)) {
      EXPECT_TRUE(layer.experts.empty());
      EXPECT_EQ(layer[LayerWeight::kRouter], nullptr);
      EXPECT_EQ(layer[LayerWeight::kSharedUp], nullptr);
      for (LayerWeight role : {LayerWeight::kGate, LayerWeight::kUp, LayerWeight::kDown}) {
        ASSERT_NE(layer[role], nullptr) << LayerWeightName(role);
        EXPECT_EQ(layer[role]->shape, ExpectedShape(*c, role));
      }
      EXPECT_EQ(layer[LayerWeight::kGate]->shape, (std::vector<int64_t>{c->intermediate_size, h}));
      EXPECT_EQ(layer.bytes, layer.dense_bytes);
      continue;
    }
    sparse.push_back(i);
    for (LayerWeight role : {LayerWeight::kGate, LayerWeight::kUp, LayerWeight::kDown}) {
      EXPECT_EQ(layer[role], nullptr) << LayerWeightName(role);
    }
    ASSERT_NE(layer[LayerWeight::kRouter], nullptr);
    EXPECT_EQ(layer[LayerWeight::kRouter]->name, prefix + f.router);
    EXPECT_EQ(layer[LayerWeight::kRouter]->shape, (std::vector<int64_t>{c->moe.num_experts, h}));
    for (LayerWeight role : {LayerWeight::kSharedGate, LayerWeight::kSharedUp,
                             LayerWeight::kSharedDown, LayerWeight::kSharedExpertGate}) {
      EXPECT_EQ(layer[role] != nullptr, f.shared_expert) << LayerWeightName(role);
      if (layer[role] != nullptr) {
        EXPECT_EQ(layer[role]->shape, ExpectedShape(*c, role));
      }
    }
    if (f.shared_expert) {
      EXPECT_EQ(layer[LayerWeight::kSharedUp]->name, prefix + "mlp.shared_expert.up_proj.weight");
      EXPECT_EQ(layer[LayerWeight::kSharedExpertGate]->shape, (std::vector<int64_t>{1, h}));
    }
    ASSERT_EQ(layer.experts.size(), static_cast<size_t>(c->moe.num_experts));
    EXPECT_EQ(layer.experts[0].weights[0]->name, prefix + f.expert);

    // Each expert's bytes are its tensors' in the reader's group, found by
    // ExpertIndex; the rest of the group is the dense part.
    std::vector<uint64_t> by_index(layer.experts.size(), 0);
    uint64_t rest = 0;
    for (int t : ckpt->layers[static_cast<size_t>(i)].tensors) {
      const TensorInfo& tensor = ckpt->tensors[static_cast<size_t>(t)];
      const int e = checkpoint::ExpertIndex(tensor.name);
      ASSERT_LT(e, static_cast<int>(by_index.size())) << tensor.name;
      (e >= 0 ? by_index[static_cast<size_t>(e)] : rest) += tensor.size;
    }
    EXPECT_EQ(layer.dense_bytes, rest);
    uint64_t experts = 0;
    for (size_t e = 0; e < layer.experts.size(); ++e) {
      const ExpertTensors& expert = layer.experts[e];
      for (size_t w = 0; w < kExpertWeightCount; ++w) {
        ASSERT_NE(expert.weights[w], nullptr) << e << " " << w;
        EXPECT_EQ(checkpoint::ExpertIndex(expert.weights[w]->name), static_cast<int>(e));
        EXPECT_EQ(expert.weights[w]->shape, expert_shapes[w]) << expert.weights[w]->name;
      }
      EXPECT_EQ(expert.bytes, by_index[e]) << e;
      experts += expert.bytes;
    }
    EXPECT_EQ(layer.bytes, layer.dense_bytes + experts);
  }
  EXPECT_EQ(sparse, f.sparse_layers);
}

// A missing expert tensor is DataLoss naming it.
TEST_P(MoeFixtureTest, MissingExpertTensorIsNamed) {
  const MoeFixture& f = GetParam();
  StatusOr<Checkpoint> ckpt = checkpoint::ReadCheckpoint(checkpoint::testing::FixtureDir(f.dir));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const ModelConfig c = *ParseModelConfig(ckpt->config);
  const Architecture& arch = **FindArchitecture(c.model_type);
  const int64_t layer = f.sparse_layers.back(), expert = c.moe.num_experts - 1;
  const std::string name = "model.layers." + std::to_string(layer) + "." +
                           arch.names.expert_prefix + std::to_string(expert) + "." +
                           arch.names.expert[static_cast<size_t>(ExpertWeight::kDown)];
  Checkpoint edited = *ckpt;
  auto it = std::find_if(edited.tensors.begin(), edited.tensors.end(),
                         [&name](const TensorInfo& t) { return t.name == name; });
  ASSERT_NE(it, edited.tensors.end()) << name;
  edited.tensors.erase(it);
  StatusOr<ModelTensors> bound = BindTensors(arch, c, edited);
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bound.status().message(), HasSubstr("missing tensor '" + name + "'"));

  // Fewer experts in the config than in the file: the extra one is unexpected.
  ModelConfig fewer = c;
  fewer.moe.num_experts = c.moe.num_experts - 1;
  fewer.moe.top_k = std::min(fewer.moe.top_k, fewer.moe.num_experts);
  bound = BindTensors(arch, fewer, *ckpt);
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bound.status().message(), HasSubstr("unexpected tensor"));
  EXPECT_THAT(bound.status().message(),
              HasSubstr(arch.names.expert_prefix + std::to_string(expert) + "."));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, MoeFixtureTest,
    ::testing::Values(
        MoeFixture{"mixtral",
                   {0, 1},
                   "block_sparse_moe.gate.weight",
                   "block_sparse_moe.experts.0.w1.weight",
                   false},
        MoeFixture{"qwen2-moe", {0, 2}, "mlp.gate.weight", "mlp.experts.0.gate_proj.weight", true},
        MoeFixture{
            "qwen3-moe", {1, 3}, "mlp.gate.weight", "mlp.experts.0.gate_proj.weight", false}),
    [](const ::testing::TestParamInfo<MoeFixture>& info) {
      std::string name = info.param.dir;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// A dense layer's MLP in a sparse layer's place (or the reverse) fails to
// bind: the names differ (`mlp.gate_proj` against `mlp.gate`).
TEST(MoeArchitectureTest, DenseAndSparseLayersAreNotInterchangeable) {
  StatusOr<Checkpoint> ckpt =
      checkpoint::ReadCheckpoint(checkpoint::testing::FixtureDir("qwen3-moe"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ModelConfig c = *ParseModelConfig(ckpt->config);
  const Architecture& arch = **FindArchitecture("qwen3_moe");
  c.moe.decoder_sparse_step = 1;  // layer 0 would be sparse: the file has its dense MLP
  StatusOr<ModelTensors> bound = BindTensors(arch, c, *ckpt);
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bound.status().message(), HasSubstr("model.layers.0.mlp."));
}

// A synthetic MoE checkpoint from ExpectedTensors binds, and an expert of
// the wrong width is refused with both shapes.
TEST(MoeArchitectureTest, ExpertOfTheWrongShapeIsRefused) {
  json j = BaseConfig("mixtral");
  j["num_local_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  const ModelConfig c = *ParseModelConfig(j);
  const Architecture& arch = **FindArchitecture("mixtral");
  std::vector<TensorInfo> tensors = ExpectedTensors(arch, c, true);
  StatusOr<ModelTensors> bound = BindTensors(arch, c, MakeCheckpoint(tensors));
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(bound->layers[1].experts.size(), 4u);
  const std::string name = "model.layers.1.block_sparse_moe.experts.2.w3.weight";
  for (TensorInfo& t : tensors) {
    if (t.name == name) t.shape = {64, 176};
  }
  bound = BindTensors(arch, c, MakeCheckpoint(tensors));
  EXPECT_EQ(bound.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bound.status().message(),
              HasSubstr("tensor '" + name + "' has shape [64, 176], expected [176, 64]"));
}

}  // namespace
}  // namespace nightshift::engine
