// Classification in one pass: every fixture's one-pass label scores against
// teacher forcing through the plain generation path (prompt + each label
// prefix as its own causal sequence, log-softmax of its last logits), the pass
// count, classification sharing passes with generation, and bad labels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using checkpoint::testing::FixtureNames;
using testing::Golden;
using ::testing::HasSubstr;
using testing::LoadGolden;

using Label = std::vector<TokenId>;

// One compute thread: the test machine's cores are shared.
std::unique_ptr<Engine> OpenOrDie(const std::string& fixture, int64_t max_context = 0) {
  EngineOptions options;
  options.threads = 1;
  options.max_context = max_context;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(FixtureDir(fixture), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

SequenceRequest Classification(const std::vector<TokenId>& prompt, std::vector<Label> labels) {
  SequenceRequest r;
  r.prompt = prompt;
  r.labels = std::move(labels);
  return r;
}

// Steps until nothing is in flight; results by sequence id, pass figures in `passes`.
std::map<SequenceId, SequenceResult> Drain(Engine& engine, std::vector<PassStats>* passes) {
  std::map<SequenceId, SequenceResult> results;
  while (engine.active() > 0) {
    StatusOr<PassStats> stats = engine.Step();
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (!stats.ok()) break;
    passes->push_back(*stats);
    for (SequenceResult& r : engine.TakeFinished()) results[r.id] = std::move(r);
  }
  return results;
}

SequenceId AddOrDie(Engine& engine, const SequenceRequest& request) {
  StatusOr<SequenceId> id = engine.Add(request);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : -1;
}

// log P(label[k] | prompt, label[0..k)) for every k, by teacher forcing: each
// prefix runs as a plain sequence (max_new_tokens 0, its last logits), all
// in one batch, and the log-softmax is taken here in double precision.
std::vector<double> TeacherForcedLogprobs(Engine& engine, const std::vector<TokenId>& prompt,
                                          const Label& label) {
  std::vector<SequenceId> ids;
  for (size_t k = 0; k < label.size(); ++k) {
    SequenceRequest r;
    r.prompt = prompt;
    r.prompt.insert(r.prompt.end(), label.begin(), label.begin() + static_cast<long>(k));
    r.max_new_tokens = 0;
    r.return_last_logits = true;
    ids.push_back(AddOrDie(engine, r));
  }
  std::vector<PassStats> passes;
  std::map<SequenceId, SequenceResult> results = Drain(engine, &passes);
  std::vector<double> logprobs;
  for (size_t k = 0; k < label.size(); ++k) {
    const std::vector<float>& logits = results[ids[k]].last_logits;
    double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float v : logits) sum += std::exp(v - top);
    logprobs.push_back(logits[static_cast<size_t>(label[k])] - top - std::log(sum));
  }
  return logprobs;
}

// `score` equals teacher forcing of `label` after `prompt`: each token within
// 2 x atol (a log-softmax moves at most twice its logits' error), the sum
// within that times the label's length.
void ExpectMatchesTeacherForcing(Engine& engine, const std::vector<TokenId>& prompt,
                                 const Label& label, const LabelScore& score, double atol) {
  EXPECT_EQ(score.ids, label);
  std::vector<double> expected = TeacherForcedLogprobs(engine, prompt, label);
  ASSERT_EQ(score.token_logprobs.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_NEAR(score.token_logprobs[k], expected[k], 2 * atol) << "token " << k;
  }
  EXPECT_NEAR(score.logprob, std::accumulate(expected.begin(), expected.end(), 0.0),
              2 * atol * static_cast<double>(label.size()));
}

// The result's own consistency: logprob is the sum, probabilities are the
// renormalised exp(logprob), best is the argmax.
void ExpectConsistent(const SequenceResult& r) {
  ASSERT_FALSE(r.labels.empty());
  double total = 0, normaliser = 0;
  for (const LabelScore& s : r.labels) normaliser += std::exp(s.logprob);
  for (size_t j = 0; j < r.labels.size(); ++j) {
    const LabelScore& s = r.labels[j];
    EXPECT_NEAR(s.logprob, std::accumulate(s.token_logprobs.begin(), s.token_logprobs.end(), 0.0),
                1e-9);
    EXPECT_LT(s.logprob, 0);
    EXPECT_NEAR(s.probability, std::exp(s.logprob) / normaliser, 1e-9);
    EXPECT_LE(s.logprob, r.labels[static_cast<size_t>(r.best_label)].logprob) << j;
    total += s.probability;
  }
  EXPECT_NEAR(total, 1.0, 1e-9);
  EXPECT_TRUE(r.generated.empty());
}

// Labels of lengths 1 to 4 over ids below `vocab`, sharing first tokens
// (1 and 2 both start with 5) so that branches with a common prefix are
// told apart by the mask, not by their tokens.
std::vector<Label> SomeLabels() { return {{5, 9}, {5}, {17, 3, 11}, {30, 2, 2, 40}}; }

class ClassifyFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ClassifyFixtureTest, OnePassScoresEqualTeacherForcingEachLabel) {
  Golden golden = LoadGolden(GetParam());
  std::unique_ptr<Engine> engine = OpenOrDie(GetParam());
  ASSERT_NE(engine, nullptr);
  const std::vector<Label> labels = SomeLabels();
  std::vector<SequenceId> ids;
  for (const auto& prompt : golden.prompts) {
    ids.push_back(AddOrDie(*engine, Classification(prompt, labels)));
  }
  std::vector<PassStats> passes;
  std::map<SequenceId, SequenceResult> results = Drain(*engine, &passes);
  ASSERT_EQ(passes.size(), 1u);  // every prompt, every label: one pass
  // The head ran at each prompt's last row and at every label row but the last.
  EXPECT_EQ(passes[0].logit_rows,
            static_cast<int64_t>(golden.prompts.size() * (1 + 1 + 0 + 2 + 3)));
  for (size_t i = 0; i < golden.prompts.size(); ++i) {
    const SequenceResult& r = results[ids[i]];
    EXPECT_EQ(r.prompt, golden.prompts[i]);
    ExpectConsistent(r);
    ASSERT_EQ(r.labels.size(), labels.size());
    for (size_t j = 0; j < labels.size(); ++j) {
      SCOPED_TRACE("prompt " + std::to_string(i) + " label " + std::to_string(j));
      ExpectMatchesTeacherForcing(*engine, golden.prompts[i], labels[j], r.labels[j], golden.atol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ClassifyFixtureTest, ::testing::ValuesIn(FixtureNames()),
                         testing::FixtureTestName);

constexpr char kFixture[] = "llama-gqa-sharded";  // vocabulary 384, context 512

// `count` labels of lengths 1 to 8, cycling, with varied ids below 384.
std::vector<Label> ManyLabels(int count) {
  std::vector<Label> labels;
  for (int j = 0; j < count; ++j) {
    Label label;
    for (int k = 0; k <= j % 8; ++k) label.push_back(static_cast<TokenId>((37 * j + 11 * k) % 383));
    labels.push_back(label);
  }
  return labels;
}

TEST(ClassifyTest, OnePassFor1And2And20LabelsOfLengths1To8InOneBatch) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie(kFixture);
  ASSERT_NE(engine, nullptr);
  const std::vector<int> counts = {1, 2, 20};
  std::vector<SequenceId> ids;
  for (int count : counts) {
    ids.push_back(AddOrDie(*engine, Classification(golden.prompts[2], ManyLabels(count))));
  }
  std::vector<PassStats> passes;
  std::map<SequenceId, SequenceResult> results = Drain(*engine, &passes);
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_EQ(passes[0].sequences, 3);
  int64_t label_tokens = 0;
  for (int count : counts) {
    for (const Label& label : ManyLabels(count)) label_tokens += static_cast<int64_t>(label.size());
  }
  const int64_t prompt = static_cast<int64_t>(golden.prompts[2].size());
  EXPECT_EQ(passes[0].fed_tokens, 3 * prompt + label_tokens);
  // One prompt and the 20 labels (the others are their first ones, and no
  // two begin alike) computed once: a shared prefix.
  int64_t twenty = 0;
  for (const Label& label : ManyLabels(20)) twenty += static_cast<int64_t>(label.size());
  EXPECT_EQ(passes[0].tokens, prompt + twenty);
  // Classifications end in their pass: they reserve no KV cache (each layer's
  // keys and values live only while the layer runs).
  EXPECT_EQ(passes[0].kv_bytes, 0u);
  for (size_t i = 0; i < counts.size(); ++i) {
    const SequenceResult& r = results[ids[i]];
    ExpectConsistent(r);
    ASSERT_EQ(r.labels.size(), static_cast<size_t>(counts[i]));
  }
  // The 20-label tree against teacher forcing, label by label.
  const SequenceResult& many = results[ids[2]];
  for (size_t j = 0; j < many.labels.size(); ++j) {
    SCOPED_TRACE("label " + std::to_string(j));
    ExpectMatchesTeacherForcing(*engine, golden.prompts[2], ManyLabels(20)[j], many.labels[j],
                                golden.atol);
  }
  // The same label set alone gives the same scores as inside the batch.
  ids.push_back(AddOrDie(*engine, Classification(golden.prompts[2], ManyLabels(2))));
  passes.clear();
  std::map<SequenceId, SequenceResult> alone = Drain(*engine, &passes);
  ASSERT_EQ(passes.size(), 1u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_NEAR(alone[ids[3]].labels[j].logprob, results[ids[1]].labels[j].logprob, golden.atol);
  }
}

TEST(ClassifyTest, ASingleTokenLabelIsTheLogSoftmaxOfTheLastPromptLogits) {
  Golden golden = LoadGolden(kFixture);
  std::unique_ptr<Engine> engine = OpenOrDie(kFixture);
  ASSERT_NE(engine, nullptr);
  const TokenId token = golden.greedy[1][0];
  SequenceRequest r =
      Classification(golden.prompts[1], {{token}, {static_cast<TokenId>(token + 1)}});
  r.return_last_logits = true;
  AddOrDie(*engine, r);
  std::vector<PassStats> passes;
  std::map<SequenceId, SequenceResult> results = Drain(*engine, &passes);
  const SequenceResult& result = results[0];
  EXPECT_LE(testing::MaxAbsDiff(result.last_logits, golden.last_logits[1]), golden.atol);
  const std::vector<float>& logits = golden.last_logits[1];
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v));
  ASSERT_EQ(result.labels.size(), 2u);
  EXPECT_NEAR(result.labels[0].logprob, logits[static_cast<size_t>(token)] - std::log(sum),
              2 * golden.atol);
  EXPECT_EQ(result.best_label, 0);  // the greedy token is the most likely one
  EXPECT_GT(result.labels[0].probability, 0.5);
  EXPECT_EQ(passes[0].logit_rows, 1);  // both labels are predicted by the last prompt row
}

TEST(ClassifyTest, MixedWithGenerationEachGetsWhatItGetsAlone) {
  Golden golden = LoadGolden(kFixture);
  const std::vector<Label> labels = SomeLabels();
  SequenceRequest generate;
  generate.prompt = golden.prompts[2];
  generate.max_new_tokens = static_cast<int64_t>(golden.greedy[2].size());
  generate.ignore_eos = true;

  auto classify_alone = [&](const std::vector<TokenId>& prompt) {
    std::unique_ptr<Engine> engine = OpenOrDie(kFixture);
    AddOrDie(*engine, Classification(prompt, labels));
    std::vector<PassStats> passes;
    return Drain(*engine, &passes).begin()->second;
  };
  const SequenceResult alone_a = classify_alone(golden.prompts[1]);
  const SequenceResult alone_b = classify_alone(golden.prompts[0]);

  // A generation starts with a classification in its first pass; another
  // classification joins at its third pass and leaves after that one.
  std::unique_ptr<Engine> engine = OpenOrDie(kFixture);
  ASSERT_NE(engine, nullptr);
  const SequenceId gen = AddOrDie(*engine, generate);
  const SequenceId a = AddOrDie(*engine, Classification(golden.prompts[1], labels));
  std::vector<PassStats> passes;
  std::map<SequenceId, SequenceResult> results;
  for (int i = 0; i < 2; ++i) {
    StatusOr<PassStats> stats = engine->Step();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    passes.push_back(*stats);
    for (SequenceResult& r : engine->TakeFinished()) results[r.id] = std::move(r);
  }
  EXPECT_EQ(passes[0].sequences, 2);
  EXPECT_EQ(passes[1].sequences, 1);  // the classification left after its one pass
  ASSERT_TRUE(results.count(a));
  const SequenceId b = AddOrDie(*engine, Classification(golden.prompts[0], labels));
  for (auto& [id, r] : Drain(*engine, &passes)) results[id] = std::move(r);
  EXPECT_EQ(passes[2].sequences, 2);
  EXPECT_EQ(passes[3].sequences, 1);
  EXPECT_EQ(passes.size(), golden.greedy[2].size());  // classification added no pass

  EXPECT_EQ(results[gen].generated, golden.greedy[2]);
  EXPECT_TRUE(results[gen].labels.empty());
  EXPECT_EQ(results[gen].best_label, -1);
  for (auto [id, alone] : {std::pair{a, &alone_a}, std::pair{b, &alone_b}}) {
    const SequenceResult& mixed = results[id];
    ASSERT_EQ(mixed.labels.size(), labels.size());
    EXPECT_EQ(mixed.best_label, alone->best_label);
    for (size_t j = 0; j < labels.size(); ++j) {
      for (size_t k = 0; k < labels[j].size(); ++k) {
        EXPECT_NEAR(mixed.labels[j].token_logprobs[k], alone->labels[j].token_logprobs[k],
                    2 * golden.atol)
            << "label " << j << " token " << k;
      }
    }
  }
}

TEST(ClassifyTest, BadLabelsAreRefusedAndNothingIsQueued) {
  std::unique_ptr<Engine> engine = OpenOrDie(kFixture, 8);
  ASSERT_NE(engine, nullptr);
  auto refusal = [&](std::vector<TokenId> prompt, std::vector<Label> labels) {
    StatusOr<SequenceId> id = engine->Add(Classification(prompt, std::move(labels)));
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    return id.status().message();
  };
  EXPECT_THAT(refusal({1, 2}, {{5}, {}}), HasSubstr("label 1 is empty"));
  EXPECT_THAT(refusal({1, 2}, {{5, 384}}),
              HasSubstr("label 0: token id 384 is outside the vocabulary [0, 384)"));
  EXPECT_THAT(refusal({1, 2}, {{-3}}), HasSubstr("token id -3"));
  EXPECT_THAT(refusal({}, {{5}}), HasSubstr("empty prompt"));
  EXPECT_THAT(refusal({1, 2, 3, 4, 5}, {{5}, {6, 7, 8, 9}}),
              HasSubstr("prompt of 5 tokens + label 1 of 4 tokens is longer than the context of "
                        "8 tokens"));
  EXPECT_EQ(engine->active(), 0);

  // Each label is positioned right after the prompt, so the context bounds
  // prompt + the longest label, not prompt + all labels together.
  AddOrDie(*engine, Classification({1, 2, 3, 4}, {{5, 6, 7, 8}, {9, 10, 11, 12}, {13}}));
  std::vector<PassStats> passes;
  std::map<SequenceId, SequenceResult> results = Drain(*engine, &passes);
  ASSERT_EQ(results.size(), 1u);
  ExpectConsistent(results.begin()->second);
  EXPECT_EQ(passes.size(), 1u);
}

}  // namespace
}  // namespace nightshift::engine
