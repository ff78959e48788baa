// The adapter on every model fixture (tests/data/models) and on configs
// written the ways other families write them.
#include "planner/checkpoint_shape.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include "tests/testing/paths.h"

namespace nightshift::planner {
namespace {

std::string FixtureDir(const std::string& name) { return testutil::DataPath("models/" + name); }

struct FixtureCase {
  const char* name;
  int layers;
  int64_t hidden, heads, kv_heads, head_dim, intermediate, vocab;
  int stored_dtype_bytes;
  uint64_t tensor_bytes, file_bytes;
};

class FixtureShapeTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureShapeTest, ShapesAndSizes) {
  const FixtureCase& c = GetParam();
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(c.name));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  StatusOr<CheckpointShape> shape = ShapeOf(*ckpt);
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  EXPECT_EQ(shape->layers, c.layers);
  EXPECT_EQ(shape->hidden, c.hidden);
  EXPECT_EQ(shape->heads, c.heads);
  EXPECT_EQ(shape->kv_heads, c.kv_heads);
  EXPECT_EQ(shape->head_dim, c.head_dim);
  EXPECT_EQ(shape->intermediate, c.intermediate);
  EXPECT_EQ(shape->vocab, c.vocab);
  EXPECT_EQ(shape->stored_dtype_bytes, c.stored_dtype_bytes);
  EXPECT_EQ(shape->tensor_bytes, c.tensor_bytes);
  EXPECT_EQ(shape->file_bytes, c.file_bytes);
  EXPECT_EQ(shape->parameters, c.tensor_bytes / c.stored_dtype_bytes);
  EXPECT_EQ(shape->largest_group_bytes, ckpt->LargestGroupBytes());
  for (const checkpoint::TensorGroup& layer : ckpt->layers) {
    EXPECT_GE(shape->largest_group_bytes, layer.bytes);
  }
  EXPECT_GE(shape->largest_group_bytes, ckpt->embedding.bytes);
}

// Shapes from each fixture's config.json (head_dim = hidden / heads where the
// config has none); byte counts from its safetensors headers and file sizes.
INSTANTIATE_TEST_SUITE_P(
    Models, FixtureShapeTest,
    ::testing::Values(
        FixtureCase{"gemma", 2, 64, 4, 1, 32, 176, 448, 4, 550144, 552216},
        FixtureCase{"gpt-neox", 2, 64, 4, 4, 16, 128, 384, 4, 464896, 467864},
        FixtureCase{"llama-bf16", 2, 64, 4, 2, 16, 176, 384, 2, 283264, 285416},
        FixtureCase{"llama-fp16", 2, 64, 4, 1, 16, 176, 384, 2, 275072, 277208},
        FixtureCase{"llama-gqa-sharded", 2, 64, 4, 2, 16, 176, 384, 4, 566528, 568696},
        FixtureCase{"llama3-tied-invfreq", 2, 64, 4, 2, 16, 176, 256, 4, 435520, 437792},
        FixtureCase{"mistral", 2, 64, 8, 2, 8, 160, 320, 4, 492800, 494944},
        FixtureCase{"phi3", 2, 64, 4, 2, 16, 128, 320, 4, 460032, 461576},
        FixtureCase{"qwen2-bias", 2, 64, 4, 2, 16, 144, 400, 4, 526592, 529336},
        FixtureCase{"qwen3-qknorm", 2, 64, 4, 2, 32, 128, 352, 4, 485120, 487592},
        FixtureCase{"stories260k", 5, 64, 8, 4, 8, 172, 512, 4, 1040128, 1044984}),
    [](const ::testing::TestParamInfo<FixtureCase>& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

// Quantized checkpoints are priced as stored: the tensor bytes are the
// packed tensors' (every byte the headers span), the parameters
// the logical weights, and their compute dtype F16.
TEST(FixtureShapeTest, QuantizedCheckpointsArePricedAsStored) {
  struct Case {
    const char* name;
    uint64_t tensor_bytes, file_bytes;
  };
  for (const Case& c :
       {Case{"awq-int4", 425216, 430216}, Case{"gptq-int4", 344832, 351968},
        Case{"ct-fp8-channel", 596224, 599984}, Case{"fp8-block", 1247984, 1251688}}) {
    StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(c.name));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    StatusOr<CheckpointShape> shape = ShapeOf(*ckpt);
    ASSERT_TRUE(shape.ok()) << shape.status().ToString();
    EXPECT_EQ(shape->tensor_bytes, c.tensor_bytes) << c.name;
    EXPECT_EQ(shape->file_bytes, c.file_bytes) << c.name;
    EXPECT_EQ(shape->stored_dtype_bytes, 2) << c.name;
  }
  // AWQ: 2 layers of q, o 128x128, k, v 64x128, gate, up, down 384x128 and
  // two norms; embedding and LM head 384x128; the final norm.
  StatusOr<checkpoint::Checkpoint> awq = checkpoint::ReadCheckpoint(FixtureDir("awq-int4"));
  ASSERT_TRUE(awq.ok());
  EXPECT_EQ(ShapeOf(*awq)->parameters,
            2u * (2 * 16384 + 2 * 8192 + 3 * 49152 + 256) + 2 * 49152 + 128);
}

TEST(FixtureShapeTest, GemmaLargestGroupIsADecoderLayer) {
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir("gemma"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  StatusOr<CheckpointShape> shape = ShapeOf(*ckpt);
  ASSERT_TRUE(shape.ok());
  // q 64x128, k and v 64x32, o 128x64, gate and up 64x176, down 176x64,
  // two norms of 64: 54400 floats.
  EXPECT_EQ(shape->largest_group_bytes, 217600u);
  // 2 (K, V) x 2 layers x 1 KV head x 32 x 4 bytes
  EXPECT_EQ(KvBytesPerToken(*shape, ComputeDtypeBytes(*shape, Device::kCpu)), 512u);
}

// A mixture of experts carries its MoeFacts; a dense checkpoint has none.
TEST(FixtureShapeTest, MixturesOfExpertsCarryTheirFacts) {
  for (const char* name : {"mixtral", "qwen2-moe", "qwen3-moe"}) {
    StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(name));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    StatusOr<CheckpointShape> shape = ShapeOf(*ckpt);
    ASSERT_TRUE(shape.ok()) << shape.status().ToString();
    const MoeFacts facts = MoeFactsOf(*ckpt);
    EXPECT_TRUE(shape->moe.is_moe()) << name;
    EXPECT_EQ(shape->moe.sparse_layers, facts.sparse_layers) << name;
    EXPECT_EQ(shape->moe.group_bytes, facts.group_bytes) << name;
    EXPECT_EQ(shape->moe.active_parameters, facts.active_parameters) << name;
    EXPECT_EQ(shape->moe.total_parameters, shape->parameters) << name;
    EXPECT_EQ(shape->tensor_bytes, ckpt->total_bytes) << name;
    // The loader's largest unit: the embedding, the head, a dense layer, a
    // sparse layer's dense part or an expert slice; never a sparse layer whole.
    uint64_t largest = std::max(ckpt->embedding.bytes, ckpt->head.bytes);
    for (uint64_t group : facts.group_bytes) largest = std::max(largest, group);
    EXPECT_EQ(shape->largest_group_bytes, largest) << name;
  }
  // qwen3-moe: its largest unit is a sparse layer's slice of 8 experts of
  // 24576 bytes, smaller than the layer.
  StatusOr<checkpoint::Checkpoint> qwen3 = checkpoint::ReadCheckpoint(FixtureDir("qwen3-moe"));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status().ToString();
  EXPECT_EQ(ShapeOf(*qwen3)->largest_group_bytes, 8u * 24576);
  EXPECT_LT(ShapeOf(*qwen3)->largest_group_bytes, qwen3->LargestGroupBytes());
  StatusOr<checkpoint::Checkpoint> dense = checkpoint::ReadCheckpoint(FixtureDir("mistral"));
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  EXPECT_FALSE(ShapeOf(*dense)->moe.is_moe());
}

// A checkpoint with one decoder layer of one tensor and the given config.
checkpoint::Checkpoint Synthetic(nlohmann::json config) {
  checkpoint::Checkpoint ckpt;
  ckpt.dir = "/models/synthetic";
  ckpt.config = std::move(config);
  checkpoint::TensorInfo t;
  t.name = "model.layers.0.mlp.weight";
  t.dtype = checkpoint::DType::kBF16;
  t.shape = {8, 4};
  t.size = 64;
  ckpt.tensors.push_back(t);
  checkpoint::TensorGroup layer;
  layer.kind = checkpoint::TensorGroup::Kind::kLayer;
  layer.layer = 0;
  layer.tensors = {0};
  layer.bytes = 64;
  ckpt.layers.push_back(layer);
  ckpt.total_bytes = 64;
  checkpoint::FileInfo file;
  file.size = 200;
  ckpt.files.push_back(file);
  return ckpt;
}

TEST(ShapeOfTest, Gpt2Names) {
  StatusOr<CheckpointShape> s = ShapeOf(
      Synthetic({{"n_embd", 768}, {"n_head", 12}, {"n_inner", nullptr}, {"vocab_size", 50257}}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->hidden, 768);
  EXPECT_EQ(s->heads, 12);
  EXPECT_EQ(s->kv_heads, 12);
  EXPECT_EQ(s->head_dim, 64);
  EXPECT_EQ(s->intermediate, 4 * 768);  // n_inner null means 4 x hidden
  EXPECT_EQ(s->stored_dtype_bytes, 2);
  EXPECT_EQ(s->parameters, 32u);
  EXPECT_EQ(s->file_bytes, 200u);
}

TEST(ShapeOfTest, FalconMultiQueryAndKvHeadNames) {
  StatusOr<CheckpointShape> mq = ShapeOf(
      Synthetic({{"hidden_size", 4544}, {"num_attention_heads", 71}, {"multi_query", true}}));
  ASSERT_TRUE(mq.ok());
  EXPECT_EQ(mq->kv_heads, 1);
  StatusOr<CheckpointShape> kv = ShapeOf(
      Synthetic({{"hidden_size", 8192}, {"num_attention_heads", 128}, {"num_kv_heads", 8}}));
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->kv_heads, 8);
}

TEST(ShapeOfTest, NullHeadDimFallsBackToHiddenOverHeads) {
  StatusOr<CheckpointShape> s = ShapeOf(
      Synthetic({{"hidden_size", 4096}, {"num_attention_heads", 32}, {"head_dim", nullptr}}));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->head_dim, 128);
}

TEST(ShapeOfTest, NestedTextConfig) {
  StatusOr<CheckpointShape> s = ShapeOf(Synthetic({{"model_type", "gemma3"},
                                                   {"text_config",
                                                    {{"hidden_size", 2560},
                                                     {"num_attention_heads", 8},
                                                     {"num_key_value_heads", 4},
                                                     {"head_dim", 256},
                                                     {"intermediate_size", 10240},
                                                     {"vocab_size", 262208}}}}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->hidden, 2560);
  EXPECT_EQ(s->kv_heads, 4);
  EXPECT_EQ(s->head_dim, 256);
  EXPECT_EQ(s->vocab, 262208);
}

TEST(ShapeOfTest, MissingShapesAreDataLoss) {
  StatusOr<CheckpointShape> no_hidden = ShapeOf(Synthetic({{"num_attention_heads", 8}}));
  ASSERT_FALSE(no_hidden.ok());
  EXPECT_EQ(no_hidden.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(no_hidden.status().message().find("hidden_size"), std::string::npos);

  StatusOr<CheckpointShape> no_heads = ShapeOf(Synthetic({{"hidden_size", 64}}));
  ASSERT_FALSE(no_heads.ok());
  EXPECT_NE(no_heads.status().message().find("num_attention_heads"), std::string::npos);

  StatusOr<CheckpointShape> tiny =
      ShapeOf(Synthetic({{"hidden_size", 4}, {"num_attention_heads", 8}}));
  ASSERT_FALSE(tiny.ok());

  checkpoint::Checkpoint no_layers = Synthetic({{"hidden_size", 64}, {"num_attention_heads", 4}});
  no_layers.layers.clear();
  StatusOr<CheckpointShape> s = ShapeOf(no_layers);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no decoder layers"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::planner
