// The engine's API for the worker: log-probabilities, the KV budget,
// Generated/Finish/Cancel, the per-pass callback and the options it refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using testing::Drain;
using testing::Golden;
using ::testing::HasSubstr;
using testing::LoadGolden;
using testing::MaxAbsDiff;

constexpr char kFixture[] = "llama-gqa-sharded";
// KV bytes per position of the fixture: K and V x 2 layers x 2 KV heads x 16 dims x float.
constexpr uint64_t kKvPerPosition = 2 * 2 * 2 * 16 * 4;

EngineOptions Options() {
  EngineOptions options;
  options.threads = 1;
  return options;
}

std::unique_ptr<Engine> OpenOrDie(const EngineOptions& options = Options()) {
  return testing::OpenEngine(FixtureDir(kFixture), options);
}

SequenceRequest Request(const std::vector<TokenId>& prompt, int64_t max_new_tokens) {
  SequenceRequest r;
  r.prompt = prompt;
  r.max_new_tokens = max_new_tokens;
  r.ignore_eos = true;
  return r;
}

// Log-softmax in double of `logits`.
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  double max = -INFINITY;
  for (float v : logits) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(v - max);
  std::vector<double> out;
  for (float v : logits) out.push_back(v - max - std::log(sum));
  return out;
}

// The last-position logits of `prompt` run alone.
std::vector<float> LastLogits(const std::vector<TokenId>& prompt) {
  std::unique_ptr<Engine> engine = OpenOrDie();
  SequenceRequest r = Request(prompt, 0);
  r.return_last_logits = true;
  EXPECT_TRUE(engine->Add(r).ok());
  std::vector<SequenceResult> results = Drain(*engine);
  return results.empty() ? std::vector<float>() : results[0].last_logits;
}

TEST(EngineApiTest, Names) {
  EXPECT_STREQ(ResidencyName(Residency::kStream), "streaming");
  EXPECT_STREQ(ResidencyName(Residency::kResident), "resident");
}

TEST(EngineApiTest, LogprobsAreTheLogSoftmaxOfEachStepsLogits) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie();
  SequenceRequest r = Request(golden.prompts[1], 3);
  r.logprobs = true;
  r.top_logprobs = 5;
  ASSERT_TRUE(engine->Add(r).ok());
  std::vector<SequenceResult> results = Drain(*engine);
  ASSERT_EQ(results.size(), 1u);
  const SequenceResult& result = results[0];
  ASSERT_EQ(result.generated.size(), 3u);
  ASSERT_EQ(result.logprobs.size(), 3u);

  std::vector<TokenId> context = golden.prompts[1];
  for (size_t step = 0; step < 3; ++step) {
    const TokenLogprob& got = result.logprobs[step];
    std::vector<double> want = LogSoftmax(LastLogits(context));
    ASSERT_EQ(want.size(), 384u);
    EXPECT_EQ(got.token, result.generated[step]);
    EXPECT_NEAR(got.logprob, want[static_cast<size_t>(got.token)], 1e-4) << step;
    ASSERT_EQ(got.top.size(), 5u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(got.top[0].first, got.token);
    for (size_t j = 0; j < got.top.size(); ++j) {
      EXPECT_NEAR(got.top[j].second, want[static_cast<size_t>(got.top[j].first)], 1e-4);
      if (j > 0) {
        EXPECT_GE(got.top[j - 1].second, got.top[j].second);
      }
    }
    // Nothing outside the top entries is more likely than the last of them.
    for (size_t id = 0; id < want.size(); ++id) {
      bool listed = false;
      for (const auto& [token, logprob] : got.top) listed |= static_cast<size_t>(token) == id;
      if (!listed) {
        EXPECT_LE(want[id], got.top.back().second + 1e-4) << id;
      }
    }
    context.push_back(result.generated[step]);
  }
}

TEST(EngineApiTest, LogprobsOnlyWhenAskedAndTopLogprobsIsChecked) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie();
  SequenceRequest plain = Request(golden.prompts[0], 2);
  ASSERT_TRUE(engine->Add(plain).ok());
  SequenceRequest no_top = plain;
  no_top.logprobs = true;
  ASSERT_TRUE(engine->Add(no_top).ok());
  std::vector<SequenceResult> results = Drain(*engine);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].logprobs.empty());
  ASSERT_EQ(results[1].logprobs.size(), 2u);
  EXPECT_TRUE(results[1].logprobs[0].top.empty());
  EXPECT_LT(results[1].logprobs[0].logprob, 0);

  SequenceRequest too_many = no_top;
  too_many.top_logprobs = 21;
  EXPECT_THAT(engine->Add(too_many).status().message(), HasSubstr("top_logprobs must be in 0..20"));
  SequenceRequest top_only = plain;
  top_only.top_logprobs = 2;
  EXPECT_THAT(engine->Add(top_only).status().message(), HasSubstr("top_logprobs needs logprobs"));
}

TEST(EngineApiTest, KvBytesFollowThePromptAndMaxNewTokens) {
  std::unique_ptr<Engine> engine = OpenOrDie();
  // 7 prompt tokens + 8 new: the last new token is never fed back.
  SequenceRequest r = Request(std::vector<TokenId>(7, 5), 8);
  EXPECT_EQ(engine->KvBytesFor(r), (7 + 7) * kKvPerPosition);
  r.max_new_tokens = 2;
  EXPECT_EQ(engine->KvBytesFor(r), (7 + 1) * kKvPerPosition);
  r.max_new_tokens = 100000;  // capped by the context (512)
  EXPECT_EQ(engine->KvBytesFor(r), 512 * kKvPerPosition);
  // Sequences that end in their first pass reserve nothing.
  r.max_new_tokens = 1;
  EXPECT_EQ(engine->KvBytesFor(r), 0u);
  r.max_new_tokens = 0;
  EXPECT_EQ(engine->KvBytesFor(r), 0u);
  SequenceRequest labels = Request({1, 2, 3}, 8);
  labels.labels = {{4, 5}, {6}};
  EXPECT_EQ(engine->KvBytesFor(labels), 0u);
  EXPECT_EQ(Engine::FirstPassTokens(labels), 3 + 2 + 1);
  EXPECT_EQ(Engine::FirstPassTokens(r), 7);

  EXPECT_EQ(engine->kv_bytes_in_use(), 0u);
  r.max_new_tokens = 3;
  ASSERT_TRUE(engine->Add(r).ok());
  ASSERT_TRUE(engine->Add(labels).ok());
  EXPECT_EQ(engine->kv_bytes_in_use(), (7 + 2) * kKvPerPosition);
  EXPECT_EQ(engine->next_pass_tokens(), 7 + 6);
  StatusOr<PassStats> pass = engine->Step();
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->kv_bytes, (7 + 2) * kKvPerPosition);
  EXPECT_EQ(engine->active(), 1);  // the classification left after its one pass
  EXPECT_EQ(engine->next_pass_tokens(), 1);
  Drain(*engine);
  EXPECT_EQ(engine->kv_bytes_in_use(), 0u);
}

// A KV budget too small for any generation still admits every sequence that
// ends in its first pass, with the results it gets alone.
TEST(EngineApiTest, OnePassSequencesNeedNoKvBudget) {
  const Golden golden = LoadGolden(kFixture);
  EngineOptions options = Options();
  options.kv_budget_bytes = kKvPerPosition;  // one position
  std::unique_ptr<Engine> engine = OpenOrDie(options);
  EXPECT_EQ(engine->Add(Request(golden.prompts[0], 4)).status().code(),
            StatusCode::kResourceExhausted);
  for (const std::vector<TokenId>& prompt : golden.prompts) {
    SequenceRequest last = Request(prompt, 0);
    last.return_last_logits = true;
    ASSERT_TRUE(engine->Add(last).ok());
    SequenceRequest scored = Request(prompt, 1);
    scored.labels = {{4, 5}, {6}, {7, 8, 9}};
    ASSERT_TRUE(engine->Add(scored).ok());
  }
  EXPECT_EQ(engine->kv_bytes_in_use(), 0u);
  std::vector<SequenceResult> results = Drain(*engine);
  ASSERT_EQ(results.size(), 2 * golden.prompts.size());
  for (size_t i = 0; i < golden.prompts.size(); ++i) {
    EXPECT_LT(MaxAbsDiff(results[2 * i].last_logits, golden.last_logits[i]), golden.atol) << i;
    std::unique_ptr<Engine> alone = OpenOrDie();
    SequenceRequest scored = Request(golden.prompts[i], 1);
    scored.labels = {{4, 5}, {6}, {7, 8, 9}};
    ASSERT_TRUE(alone->Add(scored).ok());
    std::vector<SequenceResult> reference = Drain(*alone);
    ASSERT_EQ(reference.size(), 1u);
    ASSERT_EQ(results[2 * i + 1].labels.size(), 3u);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_NEAR(results[2 * i + 1].labels[j].logprob, reference[0].labels[j].logprob, 1e-4);
    }
  }
}

TEST(EngineApiTest, ThePassTokenBudgetRefusesWhatDoesNotFitTheNextPass) {
  EngineOptions options = Options();
  options.pass_token_budget = 10;
  std::unique_ptr<Engine> engine = OpenOrDie(options);
  ASSERT_TRUE(engine->Add(Request(std::vector<TokenId>(6, 5), 3)).ok());
  StatusOr<SequenceId> refused = engine->Add(Request(std::vector<TokenId>(5, 6), 3));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("pass's budget of 10 tokens"));
  ASSERT_TRUE(engine->Add(Request(std::vector<TokenId>(4, 7), 3)).ok());  // 6 + 4 fit
  ASSERT_TRUE(engine->Step().ok());
  // Decoding, each sequence feeds one token: 2 + 8 fit.
  EXPECT_EQ(engine->next_pass_tokens(), 2);
  ASSERT_TRUE(engine->Add(Request(std::vector<TokenId>(8, 5), 1)).ok());
  EXPECT_FALSE(engine->Add(Request({6}, 1)).ok());
  Drain(*engine);
  // A prompt that begins as one waiting for its pass adds only its own
  // tokens: 8 + 2 fit, and the pass computes 10.
  ASSERT_TRUE(engine->Add(Request(std::vector<TokenId>(8, 5), 1)).ok());
  ASSERT_TRUE(engine->Add(Request(std::vector<TokenId>(10, 5), 1)).ok());
  EXPECT_EQ(engine->next_pass_tokens(), 10);
  EXPECT_FALSE(engine->Add(Request({6}, 1)).ok());
  std::vector<PassStats> shared;
  EXPECT_EQ(Drain(*engine, &shared).size(), 2u);
  ASSERT_FALSE(shared.empty());
  EXPECT_EQ(shared[0].tokens, 10);
  EXPECT_EQ(shared[0].fed_tokens, 18);
  EXPECT_EQ(shared[0].shared_tokens, 8);
  // A prompt longer than the budget runs when nothing else would ride its pass.
  ASSERT_TRUE(engine->Add(Request(std::vector<TokenId>(12, 5), 1)).ok());
  EXPECT_FALSE(engine->Add(Request({6}, 1)).ok());
  EXPECT_EQ(Drain(*engine).size(), 1u);

  options.pass_token_budget = -1;
  EXPECT_EQ(Engine::Open(FixtureDir(kFixture), options).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(EngineApiTest, ABf16KvCacheHalvesWhatASequenceReserves) {
  EngineOptions options = Options();
  options.kv_dtype = KvDType::kBFloat16;
  std::unique_ptr<Engine> engine = OpenOrDie(options);
  const SequenceRequest r = Request(std::vector<TokenId>(7, 5), 8);
  EXPECT_EQ(engine->KvBytesFor(r), (7 + 7) * kKvPerPosition / 2);
  ASSERT_TRUE(engine->Add(r).ok());
  EXPECT_EQ(engine->kv_bytes_in_use(), (7 + 7) * kKvPerPosition / 2);
  EXPECT_EQ(Drain(*engine).size(), 1u);
  EXPECT_STREQ(KvDTypeName(KvDType::kBFloat16), "bf16");
  EXPECT_EQ(ParseKvDType("bf16").value(), KvDType::kBFloat16);
  EXPECT_EQ(ParseKvDType("float32").value(), KvDType::kFloat32);
  EXPECT_EQ(ParseKvDType("f16").value(), KvDType::kFloat16);
  EXPECT_EQ(ParseKvDType("auto").value(), KvDType::kAuto);
  EXPECT_EQ(ParseKvDType("f8").status().code(), StatusCode::kInvalidArgument);
}

// --kv-dtype auto: float32 on the CPU path; on the accelerator path the
// projections' 16-bit dtype, float32 for float32 weights.
TEST(EngineApiTest, AnAutoKvDtypeFollowsThePathAndTheWeights) {
  using checkpoint::DType;
  EXPECT_EQ(ResolveKvDType(KvDType::kAuto, false, DType::kBF16), KvDType::kFloat32);
  EXPECT_EQ(ResolveKvDType(KvDType::kAuto, true, DType::kBF16), KvDType::kBFloat16);
  EXPECT_EQ(ResolveKvDType(KvDType::kAuto, true, DType::kF16), KvDType::kFloat16);
  EXPECT_EQ(ResolveKvDType(KvDType::kAuto, true, DType::kF32), KvDType::kFloat32);
  EXPECT_EQ(ResolveKvDType(KvDType::kFloat32, true, DType::kBF16), KvDType::kFloat32);
  EXPECT_EQ(ResolveKvDType(KvDType::kBFloat16, false, DType::kF32), KvDType::kBFloat16);

  const std::pair<const char*, KvDType> on_the_accelerator_path[] = {
      {"llama-bf16", KvDType::kBFloat16},
      {"llama-fp16", KvDType::kFloat16},
      {"stories260k", KvDType::kFloat32}};
  for (const auto& [fixture, expected] : on_the_accelerator_path) {
    SCOPED_TRACE(fixture);
    EngineOptions options = Options();
    std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), options);
    EXPECT_EQ(engine->kv_dtype(), KvDType::kFloat32);
    options.accelerator_path_on_cpu = true;
    engine = testing::OpenEngine(FixtureDir(fixture), options);
    EXPECT_EQ(engine->kv_dtype(), expected);
    const SequenceRequest r = Request(std::vector<TokenId>(7, 5), 8);
    EXPECT_EQ(engine->KvBytesFor(r),
              (7 + 7) * planner::KvBytesPerToken(engine->config(), KvDTypeBytes(expected)));
  }
}

TEST(EngineApiTest, TheKvBudgetRefusesWhatDoesNotFitAndFreesOnExit) {
  // Two prompts that share no prefix (a shared one is held once:
  // shared_prefix_test.cc).
  const SequenceRequest r = Request(std::vector<TokenId>(7, 5), 4);
  const SequenceRequest other = Request(std::vector<TokenId>(7, 6), 4);
  EngineOptions options = Options();
  options.kv_budget_bytes = (7 + 3) * kKvPerPosition * 3 / 2;  // one fits, two do not
  std::unique_ptr<Engine> engine = OpenOrDie(options);
  StatusOr<SequenceId> first = engine->Add(r);
  ASSERT_TRUE(first.ok());
  StatusOr<SequenceId> second = engine->Add(other);
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("KV"));
  EXPECT_EQ(engine->active(), 1);

  // Cancelling frees the budget at once.
  ASSERT_TRUE(engine->Cancel(*first).ok());
  ASSERT_TRUE(engine->Add(other).ok());
  EXPECT_FALSE(engine->Add(r).ok());
  // So does finishing.
  EXPECT_EQ(Drain(*engine).size(), 1u);
  EXPECT_TRUE(engine->Add(r).ok());
  // The same prompt again holds only its own 3 new positions: it fits.
  EXPECT_TRUE(engine->Add(r).ok());
}

TEST(EngineApiTest, GeneratedShowsTheTokensSoFar) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie();
  StatusOr<SequenceId> id = engine->Add(Request(golden.prompts[2], 8));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*engine->Generated(*id), std::vector<TokenId>());
  ASSERT_TRUE(engine->Step().ok());
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(*engine->Generated(*id),
            std::vector<TokenId>(golden.greedy[2].begin(), golden.greedy[2].begin() + 2));
  EXPECT_EQ(engine->Generated(*id + 1).status().code(), StatusCode::kNotFound);
  Drain(*engine);
  EXPECT_EQ(engine->Generated(*id).status().code(), StatusCode::kNotFound);
}

TEST(EngineApiTest, FinishEndsASequenceWithItsTokensAndReason) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie();
  StatusOr<SequenceId> stopped = engine->Add(Request(golden.prompts[2], 8));
  StatusOr<SequenceId> other = engine->Add(Request(golden.prompts[1], 8));
  ASSERT_TRUE(stopped.ok() && other.ok());
  ASSERT_TRUE(engine->Step().ok());
  ASSERT_TRUE(engine->Step().ok());
  ASSERT_TRUE(engine->Finish(*stopped, FinishReason::kStop).ok());
  EXPECT_EQ(engine->active(), 1);
  std::vector<SequenceResult> done = engine->TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, *stopped);
  EXPECT_EQ(done[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(done[0].generated,
            std::vector<TokenId>(golden.greedy[2].begin(), golden.greedy[2].begin() + 2));
  EXPECT_EQ(engine->Finish(*stopped, FinishReason::kStop).code(), StatusCode::kNotFound);

  std::vector<SequenceResult> rest = Drain(*engine);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].generated, golden.greedy[1]);
}

TEST(EngineApiTest, CancelDropsASequenceWithoutAResult) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie();
  StatusOr<SequenceId> dropped = engine->Add(Request(golden.prompts[2], 8));
  StatusOr<SequenceId> kept = engine->Add(Request(golden.prompts[1], 8));
  ASSERT_TRUE(dropped.ok() && kept.ok());
  ASSERT_TRUE(engine->Step().ok());
  ASSERT_TRUE(engine->Cancel(*dropped).ok());
  EXPECT_EQ(engine->Cancel(*dropped).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->Cancel(12345).code(), StatusCode::kNotFound);
  std::vector<SequenceResult> results = Drain(*engine);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].id, *kept);
  EXPECT_EQ(results[0].generated, golden.greedy[1]);
}

TEST(EngineApiTest, OnPassSeesEveryPassAsStepReturnsIt) {
  Golden golden = LoadGolden(kFixture);
  std::vector<PassStats> seen;
  EngineOptions options = Options();
  options.on_pass = [&seen](const PassStats& stats) { seen.push_back(stats); };
  std::unique_ptr<Engine> engine = OpenOrDie(options);
  ASSERT_TRUE(engine->Add(Request(golden.prompts[1], 3)).ok());
  std::vector<PassStats> returned;
  while (engine->active() > 0) {
    StatusOr<PassStats> stats = engine->Step();
    ASSERT_TRUE(stats.ok());
    ASSERT_EQ(seen.size(), returned.size() + 1);  // called before Step returned
    returned.push_back(*stats);
  }
  ASSERT_EQ(seen.size(), 3u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].index, returned[i].index);
    EXPECT_EQ(seen[i].bytes_read, returned[i].bytes_read);
    EXPECT_EQ(seen[i].tokens, returned[i].tokens);
    EXPECT_EQ(seen[i].seconds, returned[i].seconds);
    EXPECT_EQ(seen[i].residency, Residency::kStream);
    EXPECT_GT(seen[i].load_seconds, 0);
  }
  // A refused Step calls nothing.
  EXPECT_FALSE(engine->Step().ok());
  EXPECT_EQ(seen.size(), 3u);
}

TEST(EngineApiTest, DevicesAndOptionsAreChecked) {
  EngineOptions options = Options();
  options.device = "cpu";
  EXPECT_NE(OpenOrDie(options), nullptr);
  for (const char* device : {"cuda", "cuda:0", "cuda:9999"}) {
    options.device = device;
    StatusOr<std::unique_ptr<Engine>> cuda = Engine::Open(FixtureDir(kFixture), options);
    EXPECT_EQ(CheckDevice(device).ToString(), cuda.status().ToString()) << device;
    if (!CudaAvailable()) {
      EXPECT_EQ(cuda.status().code(), StatusCode::kUnimplemented) << device;
      EXPECT_THAT(cuda.status().message(), HasSubstr("has no CUDA or sees no GPU"));
    } else if (std::string(device) == "cuda:9999") {
      EXPECT_EQ(cuda.status().code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(cuda.status().message(), HasSubstr("GPU(s)"));
    } else {
      EXPECT_TRUE(cuda.ok()) << device << ": " << cuda.status().ToString();
    }
  }
  for (const char* device : {"", "gpu", "cuda:", "cuda:x", "CPU"}) {
    options.device = device;
    StatusOr<std::unique_ptr<Engine>> bad = Engine::Open(FixtureDir(kFixture), options);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << device;
    EXPECT_THAT(bad.status().message(), HasSubstr("expected cpu, cuda or cuda:N"));
    EXPECT_EQ(CheckDevice(device).ToString(), bad.status().ToString()) << device;
  }
  EXPECT_TRUE(CheckDevice("cpu").ok());
  options = Options();
  options.read_streams = -1;
  EXPECT_EQ(Engine::Open(FixtureDir(kFixture), options).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nightshift::engine
