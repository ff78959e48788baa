// Engine behaviour beyond the reference logits: continuous batching, pass
// figures, stopping, the context limit, sampling, refusals.
#include "worker/engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::CopyFixture;
using checkpoint::testing::FixtureDir;
using checkpoint::testing::ReadFileBytes;
using checkpoint::testing::TempDir;
using checkpoint::testing::WriteFileBytes;
using testing::Drain;
using testing::Golden;
using ::testing::HasSubstr;
using testing::LoadGolden;
using testing::MaxAbsDiff;

constexpr char kFixture[] = "llama-gqa-sharded";

// One compute thread: the test machine's cores are shared, and a second
// OpenMP thread waiting on a busy core makes tiny passes 50x slower.
EngineOptions Options(int64_t max_context = 0) {
  EngineOptions options;
  options.threads = 1;
  options.max_context = max_context;
  return options;
}

std::unique_ptr<Engine> OpenOrDie(const std::string& dir,
                                  const EngineOptions& options = Options()) {
  return testing::OpenEngine(dir, options);
}

SequenceRequest Request(const std::vector<TokenId>& prompt, int64_t max_new_tokens) {
  return testing::GreedyRequest(prompt, max_new_tokens);
}

// Edits the config.json of the checkpoint copy in `dir`.
template <typename Edit>
void EditConfig(const std::string& dir, Edit edit) {
  nlohmann::json config = nlohmann::json::parse(ReadFileBytes(dir + "/config.json"));
  edit(config);
  WriteFileBytes(dir + "/config.json", config.dump());
}

// On the CPU path and on the accelerator path run on the CPU (the fixture is
// float32, so both compute in float32 to the reference's tolerance).
class EngineTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    golden_ = LoadGolden(kFixture);
    EngineOptions options = Options();
    options.accelerator_path_on_cpu = GetParam();
    engine_ = OpenOrDie(FixtureDir(kFixture), options);
    ASSERT_NE(engine_, nullptr);
  }

  Golden golden_;
  std::unique_ptr<Engine> engine_;
};

INSTANTIATE_TEST_SUITE_P(Paths, EngineTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Accelerator" : "Cpu";
                         });

TEST_P(EngineTest, ASequenceJoiningARunningBatchGetsWhatItGetsAlone) {
  ASSERT_TRUE(engine_->Add(Request(golden_.prompts[2], 8)).ok());
  std::vector<PassStats> passes;
  for (int i = 0; i < 3; ++i) passes.push_back(*engine_->Step());
  ASSERT_TRUE(engine_->Add(Request(golden_.prompts[1], 8)).ok());
  std::vector<SequenceResult> results = Drain(*engine_, &passes);
  ASSERT_EQ(results.size(), 2u);
  for (const SequenceResult& r : results) {
    size_t i = r.id == 0 ? 2 : 1;
    EXPECT_EQ(r.generated, golden_.greedy[i]) << i;
    EXPECT_LE(MaxAbsDiff(r.last_logits, golden_.last_logits[i]), golden_.atol) << i;
  }
  // The newcomer's prompt rode the same pass as the first sequence's 4th step.
  ASSERT_EQ(passes.size(), 11u);
  EXPECT_EQ(passes[3].sequences, 2);
  EXPECT_EQ(passes[3].tokens, 1 + static_cast<int64_t>(golden_.prompts[1].size()));
  EXPECT_EQ(passes[2].sequences, 1);
  EXPECT_EQ(passes[10].sequences, 1);
  for (size_t i = 0; i < passes.size(); ++i) EXPECT_EQ(passes[i].index, static_cast<int64_t>(i));
}

TEST_P(EngineTest, APassReadsEveryLayerOnceAndOnlyTheEmbeddingRowsInFlight) {
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(kFixture));
  ASSERT_TRUE(ckpt.ok());
  const checkpoint::TensorInfo* embedding = ckpt->Find("model.embed_tokens.weight");
  ASSERT_NE(embedding, nullptr);
  const uint64_t row = embedding->size / static_cast<uint64_t>(embedding->shape[0]);
  const uint64_t streamed = ckpt->total_bytes - embedding->size;  // untied: lm_head is separate

  ASSERT_TRUE(engine_->Add(Request(golden_.prompts[2], 2)).ok());
  ASSERT_TRUE(engine_->Add(Request(golden_.prompts[1], 2)).ok());
  std::vector<PassStats> passes;
  Drain(*engine_, &passes);
  ASSERT_EQ(passes.size(), 2u);
  const uint64_t prompt_tokens = golden_.prompts[2].size() + golden_.prompts[1].size();
  EXPECT_EQ(passes[0].tokens, static_cast<int64_t>(prompt_tokens));
  EXPECT_EQ(passes[0].bytes_read, streamed + prompt_tokens * row);
  EXPECT_EQ(passes[1].tokens, 2);
  EXPECT_EQ(passes[1].bytes_read, streamed + 2 * row);
  for (const PassStats& p : passes) {
    EXPECT_EQ(p.sequences, 2);
    EXPECT_GT(p.seconds, 0);
    EXPECT_LE(p.io_seconds + p.compute_seconds, p.seconds * 1.01 + 1e-4);
    EXPECT_GT(p.kv_bytes, 0u);
  }
  // KV: 2 layers x (K + V) x 2 KV heads x 16 dims x float, per reserved position.
  const uint64_t per_token = 2 * 2 * 2 * 16 * 4;
  const uint64_t reserved = (golden_.prompts[2].size() + 1) + (golden_.prompts[1].size() + 1);
  EXPECT_EQ(passes[0].kv_bytes, reserved * per_token);
}

TEST_P(EngineTest, MaxNewTokensZeroRunsThePromptOnly) {
  ASSERT_TRUE(engine_->Add(Request(golden_.prompts[1], 0)).ok());
  std::vector<PassStats> passes;
  std::vector<SequenceResult> results = Drain(*engine_, &passes);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(passes.size(), 1u);
  EXPECT_TRUE(results[0].generated.empty());
  EXPECT_EQ(results[0].finish_reason, FinishReason::kLength);
  EXPECT_LE(MaxAbsDiff(results[0].last_logits, golden_.last_logits[1]), golden_.atol);
}

TEST_P(EngineTest, LogitsOnlyWhenAsked) {
  SequenceRequest r = Request(golden_.prompts[0], 1);
  r.return_last_logits = false;
  ASSERT_TRUE(engine_->Add(r).ok());
  std::vector<SequenceResult> results = Drain(*engine_);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].last_logits.empty());
  EXPECT_EQ(results[0].generated, std::vector<TokenId>{golden_.greedy[0][0]});
}

TEST_P(EngineTest, StopIdsEndTheSequenceAndAreKept) {
  SequenceRequest r = Request(golden_.prompts[1], 8);
  r.stop_ids = {golden_.greedy[1][2]};
  ASSERT_TRUE(engine_->Add(r).ok());
  std::vector<SequenceResult> results = Drain(*engine_);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(results[0].generated,
            std::vector<TokenId>(golden_.greedy[1].begin(), golden_.greedy[1].begin() + 3));
}

TEST_P(EngineTest, StepWithNothingInFlightIsRefused) {
  EXPECT_EQ(engine_->Step().status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(EngineTest, BadRequestsAreRefused) {
  EXPECT_THAT(engine_->Add(Request({}, 1)).status().message(), HasSubstr("empty prompt"));
  StatusOr<SequenceId> out_of_vocab = engine_->Add(Request({1, 384}, 1));
  EXPECT_EQ(out_of_vocab.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_vocab.status().message(),
              HasSubstr("token id 384 is outside the vocabulary [0, 384)"));
  EXPECT_THAT(engine_->Add(Request({1, -1}, 1)).status().message(), HasSubstr("token id -1"));
  EXPECT_THAT(engine_->Add(Request({1}, -1)).status().message(), HasSubstr("max_new_tokens"));
  SequenceRequest hot = Request({1}, 1);
  hot.sampling.temperature = -1;
  EXPECT_THAT(engine_->Add(hot).status().message(), HasSubstr("temperature"));
  EXPECT_EQ(engine_->active(), 0);
}

// Reading with O_DIRECT (as a worker does where its disk measured that
// fastest), one read or several in flight, gives the reference's tokens.
TEST(EngineReadModeTest, DirectReadsGiveTheReferenceOutput) {
  const Golden golden = LoadGolden(kFixture);
  for (int streams : {1, 3}) {
    SCOPED_TRACE(streams);
    EngineOptions options = Options();
    options.direct_reads = true;
    options.read_streams = streams;
    std::unique_ptr<Engine> engine = OpenOrDie(FixtureDir(kFixture), options);
    ASSERT_NE(engine, nullptr);
    for (size_t i = 0; i < golden.prompts.size(); ++i) {
      ASSERT_TRUE(engine->Add(Request(golden.prompts[i], golden.greedy[i].size())).ok());
    }
    const std::vector<SequenceResult> results = Drain(*engine);
    ASSERT_EQ(results.size(), golden.prompts.size());
    for (const SequenceResult& r : results) {
      const size_t i = static_cast<size_t>(r.id);
      EXPECT_EQ(r.generated, golden.greedy[i]) << i;
      EXPECT_LE(MaxAbsDiff(r.last_logits, golden.last_logits[i]), golden.atol) << i;
    }
  }
}

TEST(EngineContextTest, APromptLongerThanTheContextIsAnErrorNeverTruncated) {
  std::unique_ptr<Engine> engine = OpenOrDie(FixtureDir(kFixture), Options(8));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->max_context(), 8);
  StatusOr<SequenceId> added = engine->Add(Request(std::vector<TokenId>(9, 5), 1));
  EXPECT_EQ(added.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(added.status().message(),
              HasSubstr("prompt of 9 tokens is longer than the context of 8 tokens"));
  EXPECT_EQ(engine->active(), 0);
}

TEST(EngineContextTest, GenerationStopsWhenTheContextIsFull) {
  std::unique_ptr<Engine> engine = OpenOrDie(FixtureDir(kFixture), Options(10));
  ASSERT_NE(engine, nullptr);
  Golden golden = LoadGolden(kFixture);
  ASSERT_EQ(golden.prompts[1].size(), 7u);
  ASSERT_TRUE(engine->Add(Request(golden.prompts[1], 8)).ok());
  std::vector<SequenceResult> results = Drain(*engine);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(results[0].generated,
            std::vector<TokenId>(golden.greedy[1].begin(), golden.greedy[1].begin() + 3));
}

TEST(EngineContextTest, AContextBeyondTheModelIsRefused) {
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(FixtureDir(kFixture), Options(513));
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(engine.status().message(), HasSubstr("max_position_embeddings 512"));
}

TEST(EngineContextTest, SlidingWindowLimitsTheContextAndLongerIsRefusedByName) {
  TempDir tmp;
  const std::string dir = tmp.file("mistral");
  CopyFixture("mistral", dir);
  EditConfig(dir, [](nlohmann::json& c) { c["sliding_window"] = 16; });

  std::unique_ptr<Engine> engine = OpenOrDie(dir);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->max_context(), 16);
  StatusOr<SequenceId> added = engine->Add(Request(std::vector<TokenId>(17, 3), 1));
  EXPECT_THAT(added.status().message(), HasSubstr("limited by sliding_window"));

  StatusOr<std::unique_ptr<Engine>> refused = Engine::Open(dir, Options(32));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(
      refused.status().message(),
      HasSubstr("longer than sliding_window 16; sliding-window attention is not implemented"));
}

TEST(EngineEosTest, GenerationConfigEosWinsAndIgnoreEosOverrides) {
  Golden golden = LoadGolden(kFixture);
  TempDir tmp;
  const std::string dir = tmp.file("model");
  CopyFixture(kFixture, dir);
  const TokenId eos = golden.greedy[1][1];
  WriteFileBytes(dir + "/generation_config.json",
                 nlohmann::json{{"eos_token_id", {999, eos}}}.dump());
  std::unique_ptr<Engine> engine = OpenOrDie(dir);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->eos_token_ids(), (std::vector<int64_t>{999, eos}));

  SequenceRequest stops = Request(golden.prompts[1], 8);
  stops.ignore_eos = false;
  ASSERT_TRUE(engine->Add(stops).ok());
  ASSERT_TRUE(engine->Add(Request(golden.prompts[1], 8)).ok());  // ignore_eos
  std::vector<SequenceResult> results = Drain(*engine);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(results[0].generated,
            std::vector<TokenId>(golden.greedy[1].begin(), golden.greedy[1].begin() + 2));
  EXPECT_EQ(results[1].finish_reason, FinishReason::kLength);
  EXPECT_EQ(results[1].generated, golden.greedy[1]);
}

TEST(EngineEosTest, ConfigEosIsUsedWithoutGenerationConfig) {
  std::unique_ptr<Engine> engine = OpenOrDie(FixtureDir(kFixture));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->eos_token_ids(), std::vector<int64_t>{2});
}

TEST(EngineSamplingTest, SeededSamplingIsReproducibleAndIndependentOfTheBatch) {
  Golden golden = LoadGolden(kFixture);
  SequenceRequest r = Request(golden.prompts[2], 8);
  r.sampling.temperature = 1.5;
  r.sampling.seed = 1234;
  auto run = [&](bool with_company) {
    std::unique_ptr<Engine> engine = OpenOrDie(FixtureDir(kFixture));
    if (with_company) {
      SequenceRequest other = r;
      other.sampling.seed = 99;
      EXPECT_TRUE(engine->Add(other).ok());
    }
    EXPECT_TRUE(engine->Add(r).ok());
    return Drain(*engine).back().generated;
  };
  std::vector<TokenId> alone = run(false);
  EXPECT_EQ(alone, run(false));
  EXPECT_EQ(alone, run(true));
  EXPECT_NE(alone, golden.greedy[2]);  // at temperature 1.5 sampling leaves the greedy path

  r.sampling.top_k = 1;  // top-1 sampling is greedy
  EXPECT_EQ(run(false), golden.greedy[2]);
}

TEST(EngineOpenTest, CorruptCheckpointsAreRefusedWithTheDirectoryNamed) {
  TempDir tmp;
  const std::string dir = tmp.file("model");
  CopyFixture("qwen3-qknorm", dir);
  EditConfig(dir, [](nlohmann::json& c) { c["num_key_value_heads"] = 3; });
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(dir, Options());
  EXPECT_EQ(engine.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(engine.status().message(), HasSubstr(dir + ": config.json"));
  EXPECT_THAT(engine.status().message(), HasSubstr("not divisible"));
}

}  // namespace
}  // namespace nightshift::engine
