// A generated checkpoint of every registered family opens in the engine and
// runs a greedy generation: the generator's config.json (the one config
// writer, worker/checkpoint/model_config.h) and its tensors (the architecture
// table) are what the engine reads, for each family. libtorch-free.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "planner/model_facts.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/architecture.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"
#include "worker/generator/generator.h"

namespace nightshift::engine {
namespace {

generator::CheckpointSpec SmallSpec(const std::string& model_type, bool tied) {
  generator::CheckpointSpec spec;
  spec.arch = model_type;
  spec.hidden = 64;
  spec.layers = 2;
  spec.heads = 4;
  spec.kv_heads = model_type == "gpt_neox" ? 4 : 2;  // GPT-NeoX's fused qkv has no GQA
  spec.intermediate = 96;
  spec.vocab = 128;
  spec.max_position = 256;
  spec.tie_embeddings = tied;
  spec.seed = 5;
  return spec;
}

TEST(FamiliesTest, EveryRegisteredFamilyIsGeneratedOpenedAndRun) {
  ASSERT_EQ(Architectures().size(), checkpoint::ModelFamilies().size());
  for (const Architecture* arch : Architectures()) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(arch->model_type + (tied ? " tied" : ""));
      checkpoint::testing::TempDir dir;
      const std::string model_dir = dir.file("model");
      StatusOr<generator::WriteReport> wrote =
          generator::WriteCheckpoint(SmallSpec(arch->model_type, tied), model_dir);
      ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
      EngineOptions options;
      options.threads = 1;
      std::unique_ptr<Engine> engine = testing::OpenEngine(model_dir, options);
      ASSERT_NE(engine, nullptr);

      // The config the engine read is the generator's, and round-trips
      // through the family's writer and parser.
      const ModelConfig& c = engine->config();
      EXPECT_EQ(c.model_type, arch->model_type);
      EXPECT_EQ(c.hidden_size, 64);
      EXPECT_EQ(c.num_layers, 2);
      EXPECT_EQ(c.head_dim, 16);
      EXPECT_EQ(c.vocab_size, 128);
      EXPECT_EQ(c.tied_embeddings, tied);
      StatusOr<nlohmann::json> spelled = checkpoint::ModelConfigJson(c);
      ASSERT_TRUE(spelled.ok()) << spelled.status().ToString();
      StatusOr<ModelConfig> again = checkpoint::ParseModelConfig(*spelled);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_TRUE(*again == c) << spelled->dump();
      EXPECT_EQ(engine->max_context(), planner::MaxContextTokens(c));

      SequenceRequest request = testing::GreedyRequest({1, 5, 9, 2}, 3);
      EXPECT_EQ(engine->KvBytesFor(request),
                (4 + 2) * planner::KvBytesPerToken(c, planner::kEngineKvDtypeBytes));
      ASSERT_TRUE(engine->Add(request).ok());
      std::vector<SequenceResult> results = testing::Drain(*engine);
      ASSERT_EQ(results.size(), 1u);
      EXPECT_EQ(results[0].generated.size(), 3u);
      for (TokenId token : results[0].generated) {
        EXPECT_GE(token, 0);
        EXPECT_LT(token, 128);
      }
      ASSERT_EQ(results[0].last_logits.size(), 128u);
      for (float logit : results[0].last_logits) EXPECT_TRUE(std::isfinite(logit));
    }
  }
}

}  // namespace
}  // namespace nightshift::engine
