#include "worker/checkpoint/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/testing/paths.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json LlamaConfig() {
  return json::parse(R"({
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
    "vocab_size": 384, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
    "eos_token_id": 2
  })");
}

TEST(ModelConfigTest, ReadsLlamaFieldsAndDefaults) {
  StatusOr<ModelConfig> c = ParseModelConfig(LlamaConfig());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);  // hidden / heads when absent
  EXPECT_EQ(c->intermediate_size, 176);
  EXPECT_EQ(c->vocab_size, 384);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
  EXPECT_EQ(c->rope.rotary_dim, 16);
  EXPECT_EQ(c->activation, Activation::kSilu);
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->sliding_window.has_value());
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
}

TEST(ModelConfigTest, KvHeadsDefaultToHeadsAndEosMayBeAList) {
  json j = LlamaConfig();
  j.erase("num_key_value_heads");
  j["eos_token_id"] = {2, 7};
  j["head_dim"] = 32;
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->rope.rotary_dim, 32);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 7}));
}

TEST(ModelConfigTest, EachRequiredFieldIsNamedWhenMissing) {
  for (const char* field : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    json j = LlamaConfig();
    j.erase(field);
    StatusOr<ModelConfig> c = ParseModelConfig(j);
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(c.status().message(),
                HasSubstr(std::string("required field '") + field + "' is missing"));
  }
}

TEST(ModelConfigTest, NullCountsAsMissing) {
  json j = LlamaConfig();
  j["hidden_size"] = nullptr;
  EXPECT_THAT(ParseModelConfig(j).status().message(), HasSubstr("'hidden_size' is missing"));
}

TEST(ModelConfigTest, WrongTypeNamesTheField) {
  json j = LlamaConfig();
  j["hidden_size"] = "64";
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("'hidden_size' must be an integer"));
  j = LlamaConfig();
  j["tie_word_embeddings"] = 1;
  EXPECT_THAT(ParseModelConfig(j).status().message(),
              HasSubstr("'tie_word_embeddings' must be true or false"));
}

TEST(ModelConfigTest, IntegralFloatsAreIntegers) {
  json j = LlamaConfig();
  j["hidden_size"] = 64.0;
  ASSERT_TRUE(ParseModelConfig(j).ok());
  j["hidden_size"] = 64.5;
  EXPECT_THAT(ParseModelConfig(j).status().message(),
              HasSubstr("'hidden_size' must be an integer"));
}

TEST(ModelConfigTest, ZeroHeadsIsRefused) {
  json j = LlamaConfig();
  j["num_attention_heads"] = 0;
  j["head_dim"] = 16;
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("'num_attention_heads' must be positive, got 0"));
  j = LlamaConfig();
  j["num_key_value_heads"] = 0;
  EXPECT_THAT(ParseModelConfig(j).status().message(),
              HasSubstr("'num_key_value_heads' must be positive, got 0"));
}

TEST(ModelConfigTest, HeadsNotDivisibleByKvHeadsIsRefused) {
  json j = LlamaConfig();
  j["num_key_value_heads"] = 3;
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(),
              HasSubstr("num_attention_heads 4 is not divisible by num_key_value_heads 3"));
}

TEST(ModelConfigTest, NegativeSizesAreRefused) {
  json j = LlamaConfig();
  j["vocab_size"] = -5;
  EXPECT_THAT(ParseModelConfig(j).status().message(), HasSubstr("'vocab_size' must be positive"));
}

TEST(ModelConfigTest, LinearRopeScalingUnderTheLegacyKey) {
  json j = LlamaConfig();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.0);
}

TEST(ModelConfigTest, Llama3RopeScaling) {
  json j = LlamaConfig();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 64}};
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 64);
}

TEST(ModelConfigTest, Llama3RopeScalingNeedsItsFields) {
  json j = LlamaConfig();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(),
              HasSubstr("rope_scaling: required field 'low_freq_factor' is missing"));
}

TEST(ModelConfigTest, DefaultRopeTypeInsideRopeScalingIsPlainRope) {
  json j = LlamaConfig();
  j["rope_scaling"] = {{"rope_type", "default"}};
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
}

TEST(ModelConfigTest, OtherRopeTypesAreRefusedByName) {
  for (const char* type : {"yarn", "dynamic", "longrope", "su", "ntk"}) {
    json j = LlamaConfig();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    StatusOr<ModelConfig> c = ParseModelConfig(j);
    EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented) << type;
    EXPECT_THAT(c.status().message(),
                HasSubstr(std::string("rope_scaling type '") + type + "' is not supported"));
  }
}

TEST(ModelConfigTest, UnknownActivationIsRefusedByName) {
  json j = LlamaConfig();
  j["hidden_act"] = "relu2";
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(c.status().message(), HasSubstr("activation 'relu2' is not supported"));
}

TEST(ModelConfigTest, UnknownAndMissingModelType) {
  json j = LlamaConfig();
  j["model_type"] = "mamba";
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(c.status().message(),
              HasSubstr("model_type 'mamba' is not supported (supported: llama"));
  j.erase("model_type");
  c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("'model_type' is missing"));
}

TEST(ModelConfigTest, ConfigMustBeAnObject) {
  EXPECT_THAT(ParseModelConfig(json::array({1, 2})).status().message(),
              HasSubstr("not a JSON object"));
}

TEST(ModelConfigTest, MistralSlidingWindow) {
  json j = LlamaConfig();
  j["model_type"] = "mistral";
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->sliding_window, 4096);  // transformers' default when the key is absent
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(ParseModelConfig(j)->sliding_window.has_value());
  j["sliding_window"] = 128;
  EXPECT_EQ(ParseModelConfig(j)->sliding_window, 128);
}

TEST(ModelConfigTest, QwenSlidingWindowOnlyWhenEnabled) {
  for (const char* type : {"qwen2", "qwen3"}) {
    json j = LlamaConfig();
    j["model_type"] = type;
    j["sliding_window"] = 128;
    StatusOr<ModelConfig> c = ParseModelConfig(j);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE(c->sliding_window.has_value()) << type;
    j["use_sliding_window"] = true;
    EXPECT_EQ(ParseModelConfig(j)->sliding_window, 128) << type;
  }
}

TEST(ModelConfigTest, FamilyFlags) {
  json j = LlamaConfig();
  j["model_type"] = "qwen2";
  StatusOr<ModelConfig> qwen2 = ParseModelConfig(j);
  ASSERT_TRUE(qwen2.ok());
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_bias);
  EXPECT_FALSE(qwen2->qk_norm);

  j["model_type"] = "qwen3";
  StatusOr<ModelConfig> qwen3 = ParseModelConfig(j);
  ASSERT_TRUE(qwen3.ok());
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_FALSE(qwen3->qkv_bias);

  j["model_type"] = "llama";
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["tie_word_embeddings"] = true;
  StatusOr<ModelConfig> llama = ParseModelConfig(j);
  ASSERT_TRUE(llama.ok());
  EXPECT_TRUE(llama->qkv_bias);
  EXPECT_TRUE(llama->o_bias);
  EXPECT_TRUE(llama->mlp_bias);
  EXPECT_TRUE(llama->tied_embeddings);
}

TEST(ModelConfigTest, GemmaDefaults) {
  json j = LlamaConfig();
  j["model_type"] = "gemma";
  j["hidden_act"] = "gelu";  // ignored: Gemma reads hidden_activation
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 256);  // transformers' GemmaConfig default
  EXPECT_EQ(c->rope.rotary_dim, 256);
  EXPECT_EQ(c->norm, NormKind::kRmsUnitOffset);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_TRUE(c->scale_embeddings);
  j["hidden_activation"] = "gelu";
  j["head_dim"] = 32;
  c = ParseModelConfig(j);
  EXPECT_EQ(c->activation, Activation::kGeluErf);
  EXPECT_EQ(c->head_dim, 32);
}

TEST(ModelConfigTest, GptNeoxPartialRotaryAndParallelResidual) {
  json j = LlamaConfig();
  j["model_type"] = "gpt_neox";
  j.erase("num_key_value_heads");
  j["rotary_emb_base"] = 5000;
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.rotary_dim, 4);  // 16 x rotary_pct 0.25 (default)
  EXPECT_DOUBLE_EQ(c->rope.theta, 5000);
  EXPECT_EQ(c->norm, NormKind::kLayerNorm);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_EQ(c->qkv_layout, QkvLayout::kFusedPerHead);
  EXPECT_EQ(c->mlp, MlpKind::kPlain);
  EXPECT_EQ(c->activation, Activation::kGeluErf);
  EXPECT_TRUE(c->qkv_bias && c->o_bias && c->mlp_bias);
  EXPECT_TRUE(c->parallel_residual);
  j["use_parallel_residual"] = false;
  j["rotary_pct"] = 0.5;
  c = ParseModelConfig(j);
  EXPECT_FALSE(c->parallel_residual);
  EXPECT_EQ(c->rope.rotary_dim, 8);
  j["num_key_value_heads"] = 2;  // a per-head fused qkv cannot be grouped
  EXPECT_THAT(ParseModelConfig(j).status().message(), HasSubstr("as many KV heads as heads"));
}

TEST(ModelConfigTest, Phi3FusedProjectionsAndPartialRotary) {
  json j = LlamaConfig();
  j["model_type"] = "phi3";
  j["partial_rotary_factor"] = 0.5;
  j["sliding_window"] = 2047;
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->qkv_layout, QkvLayout::kFusedBlocks);
  EXPECT_EQ(c->mlp, MlpKind::kGatedFused);
  EXPECT_EQ(c->rope.rotary_dim, 8);
  EXPECT_EQ(c->sliding_window, 2047);
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  EXPECT_EQ(ParseModelConfig(j).status().code(), StatusCode::kUnimplemented);
}

TEST(ModelConfigTest, RotaryDimensionMustFitTheHead) {
  ModelConfig c = *ParseModelConfig(LlamaConfig());
  c.rope.rotary_dim = 18;
  EXPECT_THAT(ValidateModelConfig(c).message(), HasSubstr("rotary dimension 18"));
  c.rope.rotary_dim = 7;
  EXPECT_THAT(ValidateModelConfig(c).message(), HasSubstr("must be even"));
}

TEST(ModelFamilyTest, TableHasUniqueModelTypesFoundByName) {
  std::set<std::string> seen;
  for (const ModelFamily* family : ModelFamilies()) {
    EXPECT_TRUE(seen.insert(family->model_type).second) << family->model_type;
    StatusOr<const ModelFamily*> found = FindModelFamily(family->model_type);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found, family);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"llama", "mistral", "qwen2", "qwen3", "gemma", "gpt_neox",
                                         "phi3", "mixtral", "qwen2_moe", "qwen3_moe"}));
  EXPECT_THAT(FindModelFamily("deepseek_v3").status().message(),
              HasSubstr("is a mixture-of-experts model"));
}

// A config of `family` that sets what the Llama spelling can, with
// non-default values where the family reads them.
json VariedConfig(const std::string& model_type) {
  json j = LlamaConfig();
  j["model_type"] = model_type;
  j["head_dim"] = 32;
  j["rope_theta"] = 250000.0;
  j["eos_token_id"] = {2, 5};
  j["tie_word_embeddings"] = true;
  if (model_type == "gpt_neox") {
    j.erase("num_key_value_heads");
    j["rotary_pct"] = 0.375;  // 12 of 32
    j["use_parallel_residual"] = false;
    j["layer_norm_eps"] = 1e-4;
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}};
  }
  if (model_type == "phi3") j["partial_rotary_factor"] = 0.75;
  if (model_type == "mistral" || model_type == "phi3" || model_type == "mixtral") {
    j["sliding_window"] = 256;
  }
  if (model_type == "qwen2" || model_type == "qwen3" || model_type == "qwen2_moe" ||
      model_type == "qwen3_moe") {
    j["use_sliding_window"] = true;
    j["sliding_window"] = 256;
  }
  if (model_type == "gemma") j["hidden_activation"] = "gelu";
  if (model_type == "llama") j["mlp_bias"] = true;
  if (model_type == "llama" || model_type == "qwen3" || model_type == "gemma" ||
      model_type == "qwen3_moe") {
    j["attention_bias"] = true;
  }
  if (model_type == "mixtral") {
    j["num_local_experts"] = 4;
    j["num_experts_per_tok"] = 1;
  }
  if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    j["num_experts"] = 6;
    j["num_experts_per_tok"] = 3;
    j["moe_intermediate_size"] = 48;
    j["norm_topk_prob"] = true;  // the readers' default is false
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = {1};
  }
  if (model_type == "qwen2_moe") {
    j["shared_expert_intermediate_size"] = 80;
    j["qkv_bias"] = false;
  }
  return j;
}

// What each family's writer spells, its parser reads back unchanged: the
// generator's configs are the engine's.
TEST(ModelFamilyTest, EveryFamilyRoundTripsThroughItsWriter) {
  for (const ModelFamily* family : ModelFamilies()) {
    for (bool varied : {false, true}) {
      json given = LlamaConfig();
      given["model_type"] = family->model_type;
      if (family->model_type == "gpt_neox") given.erase("num_key_value_heads");
      if (varied) given = VariedConfig(family->model_type);
      StatusOr<ModelConfig> parsed = ParseModelConfig(given);
      ASSERT_TRUE(parsed.ok()) << family->model_type << ": " << parsed.status().ToString();
      StatusOr<json> written = ModelConfigJson(*parsed);
      ASSERT_TRUE(written.ok()) << written.status().ToString();
      EXPECT_EQ((*written)["model_type"], family->model_type);
      StatusOr<ModelConfig> again = ParseModelConfig(*written);
      ASSERT_TRUE(again.ok()) << family->model_type << ": " << again.status().ToString();
      EXPECT_TRUE(*again == *parsed)
          << family->model_type << (varied ? " varied" : "") << ": " << written->dump();
    }
  }
  ModelConfig unknown;
  unknown.model_type = "mamba";
  EXPECT_EQ(ModelConfigJson(unknown).status().code(), StatusCode::kUnimplemented);
}

// Partial rotary fractions that do not divide evenly still read back as the
// same rotary dimension (the writer nudges the fraction up by one ulp).
TEST(ModelFamilyTest, PartialRotaryFractionsRoundTrip) {
  for (const char* model_type : {"gpt_neox", "phi3"}) {
    ModelConfig c = *ParseModelConfig(VariedConfig(model_type));
    for (int64_t head_dim : {44, 47, 49, 96}) {
      for (int64_t rotary = 2; rotary <= head_dim; rotary += 2) {
        c.head_dim = head_dim;
        c.rope.rotary_dim = rotary;
        StatusOr<ModelConfig> back = ParseModelConfig(*ModelConfigJson(c));
        ASSERT_TRUE(back.ok()) << back.status().ToString();
        EXPECT_EQ(back->rope.rotary_dim, rotary) << model_type << " " << head_dim;
      }
    }
  }
}

TEST(ModelShapeTest, RegisteredFamiliesReadByTheirParser) {
  json j = LlamaConfig();
  j["model_type"] = "gemma";
  j.erase("head_dim");
  StatusOr<ModelConfig> shape = ParseModelShape(j);
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  EXPECT_EQ(shape->head_dim, 256);  // Gemma's default, as the engine reads it
  EXPECT_TRUE(*shape == *ParseModelConfig(j));
}

TEST(ModelShapeTest, OtherFamiliesUnderTheirOwnNames) {
  StatusOr<ModelConfig> gpt2 = ParseModelShape(json{{"model_type", "gpt2"},
                                                    {"n_embd", 768},
                                                    {"n_head", 12},
                                                    {"n_layer", 12},
                                                    {"n_positions", 1024},
                                                    {"vocab_size", 50257}});
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().ToString();
  EXPECT_EQ(gpt2->model_type, "gpt2");
  EXPECT_EQ(gpt2->hidden_size, 768);
  EXPECT_EQ(gpt2->num_kv_heads, 12);
  EXPECT_EQ(gpt2->head_dim, 64);
  EXPECT_EQ(gpt2->intermediate_size, 4 * 768);
  EXPECT_EQ(gpt2->num_layers, 12);
  EXPECT_EQ(gpt2->max_position_embeddings, 1024);

  // A registered family the engine refuses (its rope type) is still sized.
  json yarn = LlamaConfig();
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  StatusOr<ModelConfig> sized = ParseModelShape(yarn);
  ASSERT_TRUE(sized.ok()) << sized.status().ToString();
  EXPECT_EQ(sized->num_kv_heads, 2);
  EXPECT_EQ(sized->num_layers, 2);

  StatusOr<ModelConfig> missing = ParseModelShape(json{{"n_head", 4}}, "/m/config.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(missing.status().message(), HasSubstr("/m/config.json: no hidden size"));
}

// The mixture-of-experts fixtures (tests/data/models/README.md), read field
// by field.
json FixtureConfig(const std::string& name) {
  const std::string text =
      testutil::ReadFile(testutil::DataPath("models/" + name + "/config.json"));
  EXPECT_FALSE(text.empty()) << name;
  return json::parse(text);
}

std::vector<int64_t> SparseLayers(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.IsSparseLayer(i)) out.push_back(i);
  }
  return out;
}

TEST(MoeConfigTest, Qwen2MoeFixture) {
  StatusOr<ModelConfig> c = ParseModelConfig(FixtureConfig("qwen2-moe"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "qwen2_moe");
  EXPECT_TRUE(c->is_moe());
  EXPECT_EQ(c->moe.num_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->moe.expert_intermediate_size, 32);
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 96);
  EXPECT_FALSE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.decoder_sparse_step, 1);
  EXPECT_EQ(c->moe.mlp_only_layers, std::vector<int64_t>{1});
  EXPECT_EQ(c->intermediate_size, 128);  // the dense layer's
  EXPECT_EQ(c->num_layers, 3);
  EXPECT_EQ(SparseLayers(*c), (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->tied_embeddings);
}

TEST(MoeConfigTest, Qwen3MoeFixture) {
  StatusOr<ModelConfig> c = ParseModelConfig(FixtureConfig("qwen3-moe"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "qwen3_moe");
  EXPECT_TRUE(c->is_moe());
  EXPECT_EQ(c->moe.num_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->moe.expert_intermediate_size, 32);
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.decoder_sparse_step, 2);
  EXPECT_TRUE(c->moe.mlp_only_layers.empty());
  EXPECT_EQ(c->intermediate_size, 96);
  EXPECT_EQ(c->num_layers, 4);
  EXPECT_EQ(SparseLayers(*c), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c->head_dim, 24);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
}

TEST(MoeConfigTest, MixtralFixture) {
  StatusOr<ModelConfig> c = ParseModelConfig(FixtureConfig("mixtral"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "mixtral");
  EXPECT_TRUE(c->is_moe());
  EXPECT_EQ(c->moe.num_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->intermediate_size, 32);
  EXPECT_EQ(c->moe.expert_intermediate_size, c->intermediate_size);
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.decoder_sparse_step, 1);
  EXPECT_TRUE(c->moe.mlp_only_layers.empty());
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(SparseLayers(*c), (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(c->sliding_window.has_value());  // "sliding_window": null
}

TEST(MoeConfigTest, DenseModelsHaveNoSparseLayer) {
  StatusOr<ModelConfig> c = ParseModelConfig(LlamaConfig());
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->is_moe());
  EXPECT_TRUE(SparseLayers(*c).empty());
}

TEST(MoeConfigTest, FixturesRoundTripThroughTheWriter) {
  for (const char* name : {"mixtral", "qwen2-moe", "qwen3-moe"}) {
    StatusOr<ModelConfig> parsed = ParseModelConfig(FixtureConfig(name));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    StatusOr<json> written = ModelConfigJson(*parsed);
    ASSERT_TRUE(written.ok()) << name << ": " << written.status().ToString();
    StatusOr<ModelConfig> again = ParseModelConfig(*written);
    ASSERT_TRUE(again.ok()) << name << ": " << again.status().ToString();
    EXPECT_TRUE(*again == *parsed) << name << ": " << written->dump();
    EXPECT_TRUE(again->moe == parsed->moe) << name;
  }
}

// The writer spells every MoE field, also the ones a family's reader would
// otherwise default (transformers' defaults differ from the fixtures').
TEST(MoeConfigTest, WriterSpellsTheFamilysKeys) {
  json qwen2 = *ModelConfigJson(*ParseModelConfig(FixtureConfig("qwen2-moe")));
  EXPECT_EQ(qwen2["num_experts"], 8);
  EXPECT_EQ(qwen2["num_experts_per_tok"], 2);
  EXPECT_EQ(qwen2["moe_intermediate_size"], 32);
  EXPECT_EQ(qwen2["shared_expert_intermediate_size"], 96);
  EXPECT_EQ(qwen2["norm_topk_prob"], false);
  EXPECT_EQ(qwen2["decoder_sparse_step"], 1);
  EXPECT_EQ(qwen2["mlp_only_layers"], json({1}));
  json mixtral = *ModelConfigJson(*ParseModelConfig(FixtureConfig("mixtral")));
  EXPECT_EQ(mixtral["num_local_experts"], 8);
  EXPECT_EQ(mixtral["num_experts_per_tok"], 2);
  EXPECT_EQ(mixtral["intermediate_size"], 32);
  EXPECT_FALSE(mixtral.contains("moe_intermediate_size"));
}

TEST(MoeConfigTest, OtherMixturesOfExpertsAreRefusedNamingWhatTheyNeed) {
  const std::pair<const char*, const char*> cases[] = {
      {"deepseek_v3", "multi-head latent attention"},
      {"gpt_oss", "attention sinks"},
      {"olmoe", "q/k norm over the whole projection"},
  };
  for (const auto& [type, need] : cases) {
    json j = FixtureConfig("qwen3-moe");
    j["model_type"] = type;
    StatusOr<ModelConfig> c = ParseModelConfig(j);
    ASSERT_FALSE(c.ok()) << type;
    EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented) << type;
    EXPECT_THAT(c.status().message(),
                HasSubstr(std::string("model_type '") + type + "' is a mixture-of-experts model"));
    EXPECT_THAT(c.status().message(), HasSubstr(need)) << type;
    EXPECT_THAT(c.status().message(), HasSubstr("supported: mixtral, qwen2_moe, qwen3_moe"));
    EXPECT_EQ(FindModelFamily(type).status().code(), StatusCode::kUnimplemented) << type;
  }
}

TEST(MoeConfigTest, TopKAboveTheExpertsIsRefused) {
  json j = FixtureConfig("qwen3-moe");
  j["num_experts_per_tok"] = 9;
  StatusOr<ModelConfig> c = ParseModelConfig(j);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(),
              HasSubstr("'num_experts_per_tok' 9 is more than the 8 experts"));
  json m = FixtureConfig("mixtral");
  m["num_experts_per_tok"] = 9;
  EXPECT_THAT(ParseModelConfig(m).status().message(),
              HasSubstr("'num_experts_per_tok' 9 is more than the 8 experts"));
  j["num_experts_per_tok"] = 8;  // all of them is allowed
  EXPECT_TRUE(ParseModelConfig(j).ok());
}

TEST(MoeConfigTest, MlpOnlyLayersOutOfRangeAreRefused) {
  for (int64_t layer : {3, -1}) {
    json j = FixtureConfig("qwen2-moe");  // 3 layers
    j["mlp_only_layers"] = {0, layer};
    StatusOr<ModelConfig> c = ParseModelConfig(j);
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << layer;
    EXPECT_THAT(c.status().message(), HasSubstr("'mlp_only_layers' names layer " +
                                                std::to_string(layer) + " of a 3-layer model"));
  }
}

TEST(MoeConfigTest, NonPositiveMoeSizesAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"num_experts_per_tok", "num_experts_per_tok"},
      {"moe_intermediate_size", "moe_intermediate_size"},
      {"decoder_sparse_step", "decoder_sparse_step"},
  };
  for (const auto& [key, named] : cases) {
    json j = FixtureConfig("qwen3-moe");
    j[key] = 0;
    StatusOr<ModelConfig> c = ParseModelConfig(j);
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << key;
    EXPECT_THAT(c.status().message(), HasSubstr(std::string("'") + named + "' must be positive"));
  }
  json j = FixtureConfig("qwen2-moe");
  j["shared_expert_intermediate_size"] = -1;
  EXPECT_THAT(ParseModelConfig(j).status().message(),
              HasSubstr("'shared_expert_intermediate_size' must not be negative"));
}

}  // namespace
}  // namespace nightshift::checkpoint
