// Shared prefixes (EngineOptions::share_prefixes, pass_trie.h): on every
// fixture, sequences whose prompts share prefixes of 0, 1, 37 and several
// hundred tokens, nested (A+B+x, A+y, A+B+z), classified, generating
// greedily and sampling with a seed, all in one pass, each get what they
// get alone: bitwise on the batch-invariant CPU path, within the fixture's
// tolerance (greedy tokens equal) on the CPU's fastest kernels and on the
// accelerator path; and
// the first pass computes each distinct prefix once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using checkpoint::testing::FixtureNames;

constexpr int64_t kNewTokens = 3;

std::vector<TokenId> RandomTokens(size_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<TokenId> ids(n);
  for (TokenId& t : ids) t = static_cast<TokenId>(token(rng));
  return ids;
}

std::vector<TokenId> Join(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A greedy request (EOS ignored) for `new_tokens` tokens after `instruction`
// and an item of `n` random tokens beginning with `first`.
SequenceRequest ItemAfter(const std::vector<TokenId>& instruction, TokenId first, size_t n,
                          int64_t new_tokens, int64_t vocab, std::mt19937& rng) {
  std::vector<TokenId> own = RandomTokens(n, vocab, rng);
  own[0] = first;
  SequenceRequest r = testing::GreedyRequest(Join(instruction, own), new_tokens);
  r.ignore_eos = true;
  return r;
}

// The prompts: A + B + x, A + y, A + B + z with A `long_prefix` tokens;
// three sharing 37 tokens; two sharing their first token only; one alone
// (a first token no other has).
std::vector<std::vector<TokenId>> SharingPrompts(int64_t vocab, size_t long_prefix,
                                                 std::mt19937& rng) {
  auto random = [&](size_t n) { return RandomTokens(n, vocab, rng); };
  const std::vector<TokenId> a = random(long_prefix), b = random(11), p37 = random(37);
  std::vector<std::vector<TokenId>> prompts = {Join(Join(a, b), random(5)), Join(a, random(3)),
                                               Join(Join(a, b), random(7)), Join(p37, random(4)),
                                               Join(p37, random(1)),        Join(p37, random(9))};
  std::vector<TokenId> one = random(6), other = random(8);
  other[0] = one[0];
  prompts.push_back(one);
  prompts.push_back(other);
  std::set<TokenId> firsts;
  for (const auto& p : prompts) firsts.insert(p.front());
  std::vector<TokenId> alone = random(10);
  while (firsts.count(alone[0]) > 0) alone[0] = (alone[0] + 1) % static_cast<TokenId>(vocab);
  prompts.push_back(alone);
  return prompts;
}

// Each prompt as one or more requests: greedy, seeded sampling, or
// classified over three labels (two of them beginning alike).
std::vector<SequenceRequest> Requests(const std::vector<std::vector<TokenId>>& prompts) {
  std::vector<SequenceRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t kind = i % 3; kind < 3; kind += 2) {  // prompts 0, 3, 6: two requests each
      SequenceRequest r = testing::GreedyRequest(prompts[i], kNewTokens);
      if (kind == 1) {
        r.sampling.temperature = 0.9;
        r.sampling.top_k = 30;
        r.sampling.seed = 77 + i;
      } else if (kind == 2) {
        r.max_new_tokens = 0;
        r.return_last_logits = false;
        r.labels = {{3}, {5, 7}, {5, 9, 2}};
      }
      requests.push_back(r);
    }
  }
  return requests;
}

// The distinct prefixes of the requests' first-pass feeds (prompts, then
// each label after its prompt), each with the requests that hold it.
std::map<std::vector<TokenId>, std::set<size_t>> Prefixes(
    const std::vector<SequenceRequest>& requests) {
  std::map<std::vector<TokenId>, std::set<size_t>> prefixes;
  for (size_t k = 0; k < requests.size(); ++k) {
    const SequenceRequest& r = requests[k];
    std::vector<TokenId> path;
    for (TokenId t : r.prompt) prefixes[path = Join(path, {t})].insert(k);
    for (const std::vector<TokenId>& label : r.labels) {
      std::vector<TokenId> branch = r.prompt;
      for (TokenId t : label) prefixes[branch = Join(branch, {t})].insert(k);
    }
  }
  return prefixes;
}

// The rows a pass sharing them computes.
int64_t DistinctPrefixes(const std::vector<SequenceRequest>& requests) {
  return static_cast<int64_t>(Prefixes(requests).size());
}

// Of request k's prompt, the tokens two or more requests hold.
int64_t SharedPromptTokens(const std::vector<SequenceRequest>& requests, size_t k) {
  const auto prefixes = Prefixes(requests);
  std::vector<TokenId> path;
  int64_t shared = 0;
  for (TokenId t : requests[k].prompt) {
    path.push_back(t);
    shared += prefixes.at(path).size() > 1 ? 1 : 0;
  }
  return shared;
}

// Those held by two or more requests.
int64_t SharedPrefixes(const std::vector<SequenceRequest>& requests) {
  int64_t shared = 0;
  for (const auto& [prefix, holders] : Prefixes(requests)) shared += holders.size() > 1 ? 1 : 0;
  return shared;
}

// KV bytes of one cached position.
uint64_t KvBytesPerPosition(const Engine& engine) {
  return engine.KvBytesFor(testing::GreedyRequest({1, 2}, 2)) -
         engine.KvBytesFor(testing::GreedyRequest({1}, 2));
}

// What the requests that go on past their first pass (generating) reserve
// after it, sharing their prompts in one pass: their whole caches, less
// each prompt position two or more of them hold counted once.
uint64_t GoingOnKvBytes(const Engine& engine, const std::vector<SequenceRequest>& requests) {
  std::vector<SequenceRequest> going_on;
  uint64_t bytes = 0;
  int64_t prompts = 0;
  for (const SequenceRequest& r : requests) {
    if (engine.KvBytesFor(r) == 0) continue;
    bytes += engine.KvBytesFor(r);
    prompts += static_cast<int64_t>(r.prompt.size());
    SequenceRequest prompt_only;
    prompt_only.prompt = r.prompt;
    going_on.push_back(prompt_only);
  }
  return bytes -
         static_cast<uint64_t>(prompts - DistinctPrefixes(going_on)) * KvBytesPerPosition(engine);
}

std::vector<SequenceResult> RunTogether(Engine& engine,
                                        const std::vector<SequenceRequest>& requests,
                                        std::vector<PassStats>* passes) {
  for (const SequenceRequest& r : requests) {
    StatusOr<SequenceId> id = engine.Add(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
  }
  return testing::Drain(engine, passes);
}

// Each request run alone on `engine`, in order.
std::vector<SequenceResult> EachAlone(Engine& engine,
                                      const std::vector<SequenceRequest>& requests) {
  std::vector<SequenceResult> alone;
  for (const SequenceRequest& r : requests) {
    std::vector<SequenceResult> one = RunTogether(engine, {r}, nullptr);
    EXPECT_EQ(one.size(), 1u);
    if (!one.empty()) alone.push_back(std::move(one[0]));
  }
  return alone;
}

// `together` (in any order; ids in the order added) is bitwise `alone`.
void ExpectBitwiseAlone(std::vector<SequenceResult> together,
                        const std::vector<SequenceResult>& alone) {
  ASSERT_EQ(together.size(), alone.size());
  std::sort(together.begin(), together.end(),
            [](const SequenceResult& a, const SequenceResult& b) { return a.id < b.id; });
  for (size_t k = 0; k < alone.size(); ++k) {
    SCOPED_TRACE("request " + std::to_string(k));
    EXPECT_EQ(together[k].generated, alone[k].generated);
    EXPECT_EQ(together[k].last_logits, alone[k].last_logits);
  }
}

class SharedPrefixTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedPrefixTest, EachSequenceGetsWhatItGetsAloneAndEveryPrefixIsComputedOnce) {
  const std::string fixture = GetParam();
  const testing::Golden golden = testing::LoadGolden(fixture);
  struct Mode {
    const char* name;
    bool batch_invariant;
    bool accelerator_path;
  };
  for (const Mode& mode : {Mode{"batch-invariant", true, false}, Mode{"fastest", false, false},
                           Mode{"accelerator path", true, true}}) {
    EngineOptions options;
    options.batch_invariant = mode.batch_invariant;
    options.accelerator_path_on_cpu = mode.accelerator_path;
    std::unique_ptr<Engine> alone_engine = testing::OpenEngine(FixtureDir(fixture), options);
    ASSERT_NE(alone_engine, nullptr);
    const int64_t context = alone_engine->max_context();
    std::mt19937 rng(5);
    const std::vector<SequenceRequest> requests =
        Requests(SharingPrompts(alone_engine->config().vocab_size,
                                static_cast<size_t>(std::min<int64_t>(600, context - 40)), rng));
    const std::vector<SequenceResult> alone = EachAlone(*alone_engine, requests);
    ASSERT_EQ(alone.size(), requests.size());
    const bool bitwise = mode.batch_invariant && !mode.accelerator_path;
    // Within the fixture's tolerance, whichever way it computes.
    const double atol = mode.accelerator_path ? testing::Bf16ProjectionAtol(golden) : golden.atol;
    for (Residency residency : {Residency::kStream, Residency::kResident}) {
      SCOPED_TRACE(std::string(mode.name) + ", " + ResidencyName(residency));
      EngineOptions together_options = options;
      together_options.residency = residency;
      std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), together_options);
      ASSERT_NE(engine, nullptr);
      std::vector<PassStats> passes;
      const std::vector<SequenceResult> together = RunTogether(*engine, requests, &passes);
      ASSERT_EQ(together.size(), requests.size());
      ASSERT_FALSE(passes.empty());
      EXPECT_EQ(passes[0].tokens, DistinctPrefixes(requests));
      int64_t fed = 0;
      for (const SequenceRequest& r : requests) fed += Engine::FirstPassTokens(r);
      EXPECT_EQ(passes[0].fed_tokens, fed);
      EXPECT_EQ(passes[0].shared_tokens, SharedPrefixes(requests));
      EXPECT_GT(passes[0].shared_tokens, std::min<int64_t>(600, context - 40));
      // The generating sequences hold each prompt position two or more of
      // them share once.
      EXPECT_EQ(passes[0].kv_bytes, GoingOnKvBytes(*engine, requests));
      for (size_t k = 0; k < requests.size(); ++k) {
        SCOPED_TRACE("request " + std::to_string(k));
        const SequenceResult& a = alone[k];
        const SequenceResult& t = together[k];
        EXPECT_EQ(t.shared_prompt_tokens, SharedPromptTokens(requests, k));
        EXPECT_EQ(a.shared_prompt_tokens, 0);
        ASSERT_EQ(t.labels.size(), a.labels.size());
        for (size_t j = 0; j < a.labels.size(); ++j) {
          ASSERT_EQ(t.labels[j].token_logprobs.size(), a.labels[j].token_logprobs.size());
          for (size_t i = 0; i < a.labels[j].token_logprobs.size(); ++i) {
            if (bitwise) {
              EXPECT_EQ(t.labels[j].token_logprobs[i], a.labels[j].token_logprobs[i]);
            } else {
              EXPECT_NEAR(t.labels[j].token_logprobs[i], a.labels[j].token_logprobs[i], atol);
            }
          }
        }
        if (bitwise) {
          EXPECT_EQ(t.last_logits, a.last_logits);
          EXPECT_EQ(t.generated, a.generated);
        } else {
          EXPECT_LE(testing::MaxAbsDiff(t.last_logits, a.last_logits), atol);
          // Greedy tokens equal; a seeded draw from logits within tolerance
          // of each other may land either side of a boundary, so sampled
          // tokens are compared only where the arithmetic is bitwise.
          if (requests[k].sampling.temperature == 0) {
            EXPECT_EQ(t.generated, a.generated);
          }
        }
      }
    }
  }
}

// A prefix that every sequence of a pass shared is kept for the next pass:
// sequences joining then with the same instruction start after the part of
// it they agree with, with the results they get alone; a pass that does not
// use it drops it, and a KV budget without room for it never keeps it.
TEST_P(SharedPrefixTest, APrefixKeptAcrossPassesIsNotComputedAgain) {
  const std::string fixture = GetParam();
  const testing::Golden golden = testing::LoadGolden(fixture);
  for (bool accelerator_path : {false, true}) {
    SCOPED_TRACE(accelerator_path ? "accelerator path" : "CPU");
    EngineOptions options;
    options.accelerator_path_on_cpu = accelerator_path;
    std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), options);
    ASSERT_NE(engine, nullptr);
    std::mt19937 rng(21);
    const int64_t vocab = engine->config().vocab_size;
    const std::vector<TokenId> instruction = RandomTokens(100, vocab, rng);
    auto item = [&](size_t n) {
      std::vector<TokenId> own = RandomTokens(n, vocab, rng);
      if (own[0] == 7) own[0] = 8;
      return Join(instruction, own);
    };
    // The first pass's items all begin with token 7, so the prefix kept is
    // the instruction and that token; two of them, both going on, share the
    // 1 after it too (held in the same cache, after the kept positions). The
    // later items agree with its first 100 positions only, and use those.
    const std::vector<SequenceRequest> first = Requests(
        {Join(instruction, {7, 1, 2}), Join(instruction, {7, 1, 4, 5}), Join(instruction, {7})});
    std::vector<SequenceRequest> later = Requests({item(4), item(1), item(6)});
    for (const SequenceRequest& r : first) ASSERT_TRUE(engine->Add(r).ok());
    StatusOr<PassStats> pass = engine->Step();
    ASSERT_TRUE(pass.ok()) << pass.status().ToString();
    EXPECT_EQ(pass->kept_prefix_tokens, 0);
    EXPECT_EQ(pass->tokens, DistinctPrefixes(first));
    // The next pass computes the joining sequences' items only.
    for (const SequenceRequest& r : later) ASSERT_TRUE(engine->Add(r).ok());
    int64_t decoding = 0;
    for (const SequenceRequest& r : first) decoding += r.labels.empty() ? 1 : 0;
    std::vector<SequenceRequest> items = later;
    for (SequenceRequest& r : items) r.prompt.erase(r.prompt.begin(), r.prompt.begin() + 100);
    EXPECT_EQ(engine->next_pass_tokens(), decoding + DistinctPrefixes(items));
    // What the engine says it keeps: the instruction and the 7.
    EXPECT_EQ(engine->kept_prefixes(), (std::vector<std::vector<TokenId>>{Join(instruction, {7})}));
    pass = engine->Step();
    ASSERT_TRUE(pass.ok()) << pass.status().ToString();
    EXPECT_EQ(pass->kept_prefix_tokens, 100);
    EXPECT_EQ(pass->tokens, decoding + DistinctPrefixes(items));
    std::vector<SequenceResult> results = engine->TakeFinished();
    for (SequenceResult& r : testing::Drain(*engine)) results.push_back(std::move(r));
    std::sort(results.begin(), results.end(),
              [](const SequenceResult& a, const SequenceResult& b) { return a.id < b.id; });
    std::vector<SequenceRequest> all = first;
    all.insert(all.end(), later.begin(), later.end());
    ASSERT_EQ(results.size(), all.size());
    // Kept while decoding sequences held it, and for one pass more.
    EXPECT_EQ(engine->kept_prefixes(), (std::vector<std::vector<TokenId>>{Join(instruction, {7})}));
    // Two passes that neither used nor held it dropped it: a new sequence
    // computes the instruction again.
    SequenceRequest other = testing::GreedyRequest(RandomTokens(5, vocab, rng), 2);
    other.ignore_eos = true;
    RunTogether(*engine, {other}, nullptr);
    EXPECT_TRUE(engine->kept_prefixes().empty());
    const SequenceRequest again = Requests({item(2)})[0];
    ASSERT_TRUE(engine->Add(again).ok());
    EXPECT_EQ(engine->next_pass_tokens(), static_cast<int64_t>(again.prompt.size()));
    testing::Drain(*engine);
    std::unique_ptr<Engine> alone_engine = testing::OpenEngine(FixtureDir(fixture), options);
    ASSERT_NE(alone_engine, nullptr);
    const double atol = accelerator_path ? testing::Bf16ProjectionAtol(golden) : 0;
    for (size_t k = 0; k < all.size(); ++k) {
      SCOPED_TRACE("request " + std::to_string(k));
      std::vector<SequenceResult> alone = RunTogether(*alone_engine, {all[k]}, nullptr);
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_LE(testing::MaxAbsDiff(results[k].last_logits, alone[0].last_logits), atol);
      ASSERT_EQ(results[k].labels.size(), alone[0].labels.size());
      for (size_t j = 0; j < alone[0].labels.size(); ++j) {
        EXPECT_NEAR(results[k].labels[j].logprob, alone[0].labels[j].logprob, atol);
      }
      if (!accelerator_path || all[k].sampling.temperature == 0) {
        EXPECT_EQ(results[k].generated, alone[0].generated);
      }
    }
  }
  // Generating sequences that share the prefix hold it anyway, so keeping
  // it takes no more KV room: it is kept under a budget that holds just
  // their reservations.
  EngineOptions budgeted;
  std::unique_ptr<Engine> probe = testing::OpenEngine(FixtureDir(fixture), budgeted);
  ASSERT_NE(probe, nullptr);
  std::mt19937 rng(21);
  const int64_t vocab = probe->config().vocab_size;
  const std::vector<TokenId> instruction = RandomTokens(100, vocab, rng);
  const std::vector<SequenceRequest> two = {testing::GreedyRequest(Join(instruction, {1, 2}), 3),
                                            testing::GreedyRequest(Join(instruction, {3}), 3)};
  // The two hold the instruction once.
  const uint64_t reserved =
      probe->KvBytesFor(two[0]) + probe->KvBytesFor(two[1]) - 100 * KvBytesPerPosition(*probe);
  budgeted.kv_budget_bytes = reserved;
  {
    std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), budgeted);
    ASSERT_NE(engine, nullptr);
    for (const SequenceRequest& r : two) ASSERT_TRUE(engine->Add(r).ok());
    EXPECT_EQ(engine->kv_bytes_in_use(), reserved);
    ASSERT_TRUE(engine->Step().ok());
    EXPECT_EQ(engine->kv_bytes_in_use(), reserved);
    EXPECT_EQ(engine->kept_prefixes(), (std::vector<std::vector<TokenId>>{instruction}));
    // A classification joins (it reserves no KV) and starts after it.
    SequenceRequest scored;
    scored.prompt = Join(instruction, {4, 5});
    scored.labels = {{3}};
    ASSERT_TRUE(engine->Add(scored).ok());
    StatusOr<PassStats> pass = engine->Step();
    ASSERT_TRUE(pass.ok());
    EXPECT_EQ(pass->kept_prefix_tokens, 100);
  }
  // Classifications alone hold nothing after their pass: their prefix is
  // kept only where the budget has room for it beside the reservations.
  std::vector<TokenId> unrelated = RandomTokens(20, vocab, rng);
  if (unrelated[0] == instruction[0]) unrelated[0] = (unrelated[0] + 1) % vocab;
  const SequenceRequest generating = testing::GreedyRequest(unrelated, 3);
  std::vector<SequenceRequest> scored(2);
  scored[0].prompt = Join(instruction, {4, 5});
  scored[1].prompt = Join(instruction, {6});
  for (SequenceRequest& r : scored) r.labels = {{3}};
  // 101 positions' worth: room for the 100 of the instruction.
  const uint64_t room = probe->KvBytesFor(testing::GreedyRequest(instruction, 2));
  for (uint64_t budget : {probe->KvBytesFor(generating), probe->KvBytesFor(generating) + room}) {
    SCOPED_TRACE("KV budget " + std::to_string(budget));
    budgeted.kv_budget_bytes = budget;
    std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), budgeted);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->Add(generating).ok());
    for (const SequenceRequest& r : scored) ASSERT_TRUE(engine->Add(r).ok());
    ASSERT_TRUE(engine->Step().ok());
    EXPECT_EQ(engine->kept_prefixes().size(), budget > probe->KvBytesFor(generating) ? 1u : 0u);
  }
}

// Generating sequences whose prompts meet in one pass keep the prefix they
// share once, referenced by each (KVCache::Share): a KV budget that holds
// their caches only so admits them all, each decodes what it decodes alone
// (bitwise, the default batch-invariant path) after the others end, and the
// reservation falls as each ends, to nothing.
TEST(SharedKvTest, GoingOnSequencesHoldTheirSharedPrefixOnce) {
  const std::string fixture = "llama-gqa-sharded";
  std::mt19937 rng(31);
  const int64_t vocab = 384;  // the fixture's
  const std::vector<TokenId> instruction = RandomTokens(200, vocab, rng);
  const std::vector<TokenId> branch = RandomTokens(20, vocab, rng);
  // Nested: two share the instruction and a branch, one the instruction
  // only; they end after 2, 5 and 8 new tokens.
  std::vector<SequenceRequest> requests = {
      testing::GreedyRequest(Join(Join(instruction, branch), RandomTokens(3, vocab, rng)), 2),
      testing::GreedyRequest(Join(instruction, RandomTokens(4, vocab, rng)), 5),
      testing::GreedyRequest(Join(Join(instruction, branch), RandomTokens(6, vocab, rng)), 8)};
  for (SequenceRequest& r : requests) r.ignore_eos = true;
  // A float32 cache's shared keys are read in place; a BF16 one's copied
  // out as its own are: either way what the sequence gets alone.
  for (KvDType kv_dtype : {KvDType::kFloat32, KvDType::kBFloat16}) {
    SCOPED_TRACE(KvDTypeName(kv_dtype));
    EngineOptions probe_options;
    probe_options.kv_dtype = kv_dtype;
    std::unique_ptr<Engine> probe = testing::OpenEngine(FixtureDir(fixture), probe_options);
    ASSERT_NE(probe, nullptr);
    ASSERT_EQ(probe->config().vocab_size, vocab);
    uint64_t alone_bytes = 0;
    for (const SequenceRequest& r : requests) alone_bytes += probe->KvBytesFor(r);
    const uint64_t shared_bytes = GoingOnKvBytes(*probe, requests);
    // The instruction twice more and the branch once more are not held.
    ASSERT_EQ(alone_bytes - shared_bytes, (2 * 200 + 20) * KvBytesPerPosition(*probe));
    const std::vector<SequenceResult> alone = EachAlone(*probe, requests);
    for (Residency residency : {Residency::kStream, Residency::kResident}) {
      SCOPED_TRACE(ResidencyName(residency));
      EngineOptions options = probe_options;
      options.residency = residency;
      options.kv_budget_bytes = shared_bytes;  // short of alone_bytes
      std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), options);
      ASSERT_NE(engine, nullptr);
      for (const SequenceRequest& r : requests) {
        StatusOr<SequenceId> id = engine->Add(r);
        ASSERT_TRUE(id.ok()) << id.status().ToString();
      }
      EXPECT_EQ(engine->kv_bytes_in_use(), shared_bytes);
      // A fourth sharing nothing has no room.
      EXPECT_EQ(engine->Add(testing::GreedyRequest({3, 4, 5}, 2)).status().code(),
                StatusCode::kResourceExhausted);
      std::vector<SequenceResult> together;
      std::vector<uint64_t> reserved;
      while (together.size() < requests.size()) {
        StatusOr<PassStats> pass = engine->Step();
        ASSERT_TRUE(pass.ok()) << pass.status().ToString();
        for (SequenceResult& r : engine->TakeFinished()) together.push_back(std::move(r));
        reserved.push_back(engine->kv_bytes_in_use());
      }
      ExpectBitwiseAlone(together, alone);
      // Passes 1 and 2 end the first (2 tokens), 5 the second, 8 the third.
      ASSERT_EQ(reserved.size(), 8u);
      EXPECT_EQ(reserved[0], shared_bytes);
      // Without the first: the other two hold the instruction once, their
      // own positions after it.
      EXPECT_EQ(reserved[1], GoingOnKvBytes(*probe, {requests[1], requests[2]}));
      EXPECT_EQ(reserved[4], probe->KvBytesFor(requests[2]));
      EXPECT_EQ(reserved[7], 0u);
    }
  }
}

// Generating sequences that join after a prefix was kept hold its positions
// in the kept prefix's cache itself, which is the one the sequences of the
// pass that kept it share: a night of top-ups with one instruction holds it
// once in all, not once per job, and each decodes what it decodes alone.
TEST(SharedKvTest, SequencesJoiningAfterAKeptPrefixHoldItOnce) {
  const std::string fixture = "llama-gqa-sharded";
  std::unique_ptr<Engine> probe = testing::OpenEngine(FixtureDir(fixture), {});
  ASSERT_NE(probe, nullptr);
  std::mt19937 rng(41);
  const int64_t vocab = probe->config().vocab_size;
  const std::vector<TokenId> instruction = RandomTokens(100, vocab, rng);
  // Items whose first tokens differ, so the instruction is all they share.
  auto item = [&](TokenId first, size_t n, int64_t new_tokens) {
    return ItemAfter(instruction, first, n, new_tokens, vocab, rng);
  };
  // Two open the batch (and the instruction is kept), then one joins at
  // each of the next two passes.
  const std::vector<SequenceRequest> requests = {item(1, 3, 8), item(2, 4, 8), item(3, 5, 8),
                                                 item(4, 2, 8)};
  const std::vector<SequenceResult> alone = EachAlone(*probe, requests);
  const uint64_t position = KvBytesPerPosition(*probe);
  std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), {});
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Add(requests[0]).ok());
  ASSERT_TRUE(engine->Add(requests[1]).ok());
  ASSERT_TRUE(engine->Step().ok());
  ASSERT_EQ(engine->kept_prefixes(), (std::vector<std::vector<TokenId>>{instruction}));
  uint64_t caches = probe->KvBytesFor(requests[0]) + probe->KvBytesFor(requests[1]);
  // The first two hold the instruction once between them.
  EXPECT_EQ(engine->kv_bytes_in_use(), caches - 100 * position);
  for (size_t k = 2; k < requests.size(); ++k) {
    SCOPED_TRACE("request " + std::to_string(k));
    ASSERT_TRUE(engine->Add(requests[k]).ok());
    caches += probe->KvBytesFor(requests[k]);
    // Every joiner holds all but the instruction; the instruction is held
    // once for all of them, in the kept prefix's cache, which is the one
    // the first two share.
    const uint64_t own = caches - 100 * k * position;
    EXPECT_EQ(engine->kv_bytes_in_use(), own);
    StatusOr<PassStats> pass = engine->Step();
    ASSERT_TRUE(pass.ok()) << pass.status().ToString();
    EXPECT_EQ(pass->kept_prefix_tokens, 100);
    EXPECT_EQ(engine->kv_bytes_in_use(), own);
  }
  std::vector<SequenceResult> together = testing::Drain(*engine);
  for (SequenceResult& r : engine->TakeFinished()) together.push_back(std::move(r));
  ExpectBitwiseAlone(together, alone);
  // Kept while the sequences held it (their last pass), and so for the
  // next pass too; no sequence holds KV now.
  EXPECT_EQ(engine->kept_prefixes(), (std::vector<std::vector<TokenId>>{instruction}));
  EXPECT_EQ(engine->kv_bytes_in_use(), 0u);
}

// Two instructions behind one short header meet in a pass (they begin
// alike: one trie). Each set of sequences that agree on their first 32
// tokens keeps the prefix it shares, in the one cache the pass's going-on
// sequences share, so later sequences of either instruction start after
// theirs and get what they get alone. Classifications keep both where the
// KV budget has room for the positions of both once.
TEST(SharedKvTest, EachInstructionOfAPassIsKept) {
  const std::string fixture = "llama-gqa-sharded";
  std::unique_ptr<Engine> probe = testing::OpenEngine(FixtureDir(fixture), {});
  ASSERT_NE(probe, nullptr);
  std::mt19937 rng(57);
  const int64_t vocab = probe->config().vocab_size;
  const std::vector<TokenId> header = RandomTokens(10, vocab, rng);
  std::vector<TokenId> a = Join(header, RandomTokens(40, vocab, rng));
  std::vector<TokenId> b = Join(header, RandomTokens(50, vocab, rng));
  if (b[10] == a[10]) b[10] = (a[10] + 1) % static_cast<TokenId>(vocab);
  auto item = [&](const std::vector<TokenId>& instruction, TokenId first, size_t n) {
    return ItemAfter(instruction, first, n, 4, vocab, rng);
  };
  const std::vector<SequenceRequest> requests = {item(a, 1, 3), item(a, 2, 2), item(b, 1, 4),
                                                 item(b, 2, 1), item(a, 3, 2), item(b, 3, 3)};
  const std::vector<SequenceResult> alone = EachAlone(*probe, requests);
  std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), {});
  ASSERT_NE(engine, nullptr);
  for (size_t k = 0; k < 4; ++k) ASSERT_TRUE(engine->Add(requests[k]).ok());
  ASSERT_TRUE(engine->Step().ok());
  std::vector<std::vector<TokenId>> kept = engine->kept_prefixes();
  std::sort(kept.begin(), kept.end());
  std::vector<std::vector<TokenId>> both = {a, b};
  std::sort(both.begin(), both.end());
  ASSERT_EQ(kept, both);
  ASSERT_TRUE(engine->Add(requests[4]).ok());
  ASSERT_TRUE(engine->Add(requests[5]).ok());
  StatusOr<PassStats> pass = engine->Step();
  ASSERT_TRUE(pass.ok()) << pass.status().ToString();
  EXPECT_EQ(pass->kept_prefix_tokens, 50 + 60);
  std::vector<SequenceResult> together = testing::Drain(*engine);
  for (SequenceResult& r : engine->TakeFinished()) together.push_back(std::move(r));
  ExpectBitwiseAlone(together, alone);

  // Classifications beside an unrelated generation: the two prefixes are
  // 100 positions (the header once), and a budget with room for exactly
  // those keeps both; a classification of one instruction joining later
  // needs no room, so neither is dropped for it.
  std::vector<TokenId> unrelated = RandomTokens(20, vocab, rng);
  if (unrelated[0] == header[0]) unrelated[0] = (unrelated[0] + 1) % static_cast<TokenId>(vocab);
  const SequenceRequest generating = testing::GreedyRequest(unrelated, 3);
  auto scored = [&](const std::vector<TokenId>& instruction, TokenId first) {
    SequenceRequest r;
    r.prompt = Join(instruction, {first, 5});
    r.labels = {{3}};
    return r;
  };
  EngineOptions budgeted;
  budgeted.kv_budget_bytes = probe->KvBytesFor(generating) + 100 * KvBytesPerPosition(*probe);
  engine = testing::OpenEngine(FixtureDir(fixture), budgeted);
  ASSERT_NE(engine, nullptr);
  for (const SequenceRequest& r :
       {generating, scored(a, 1), scored(a, 2), scored(b, 1), scored(b, 2)}) {
    ASSERT_TRUE(engine->Add(r).ok());
  }
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(engine->kept_prefixes().size(), 2u);
  ASSERT_TRUE(engine->Add(scored(b, 3)).ok());
  EXPECT_EQ(engine->kept_prefixes().size(), 2u);
  pass = engine->Step();
  ASSERT_TRUE(pass.ok()) << pass.status().ToString();
  EXPECT_EQ(pass->kept_prefix_tokens, 60);
}

// Without sharing every sequence computes its whole feed (its labels still
// share their common start, as they always did within one sequence).
TEST(SharedPrefixOffTest, EverySequenceComputesItsWholeFeed) {
  const std::string fixture = "llama-gqa-sharded";
  EngineOptions options;
  options.share_prefixes = false;
  std::unique_ptr<Engine> engine = testing::OpenEngine(FixtureDir(fixture), options);
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(9);
  const std::vector<SequenceRequest> requests =
      Requests(SharingPrompts(engine->config().vocab_size, 100, rng));
  int64_t fed = 0, alone = 0;
  for (const SequenceRequest& r : requests) {
    fed += Engine::FirstPassTokens(r);
    alone += DistinctPrefixes({r});  // its own labels still share their start
  }
  std::vector<PassStats> passes;
  RunTogether(*engine, requests, &passes);
  ASSERT_FALSE(passes.empty());
  EXPECT_EQ(passes[0].tokens, alone);
  EXPECT_LT(passes[0].tokens, fed);
  EXPECT_EQ(passes[0].fed_tokens, fed);
  EXPECT_EQ(passes[0].shared_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SharedPrefixTest, ::testing::ValuesIn(FixtureNames()),
                         testing::FixtureTestName);

}  // namespace
}  // namespace nightshift::engine
