// The public Tokenizer API: loading and its errors, lookups, the model
// directory files, added-token passes, streaming decode, speed on
// pathological input and concurrent use.
#include "worker/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "tests/testing/temp_dir.h"
#include "worker/tokenizer/stop_strings.h"
#include "worker/tokenizer/test_util.h"
#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

using nlohmann::json;
using testing::Fixture;

// A character-level BPE over a few letters, with optional parts replaced.
json TinySpec() {
  json vocab = json::object();
  int id = 0;
  for (const char* token : {"<s>", "</s>", "a", "b", "h", "i", "l", "o", "e", "w", "r", "d",
                            "\u2581", "\u2581h", "hi", "\u2581hi", "X"}) {
    vocab[token] = id++;
  }
  return json{
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"\u2581 h", "\u2581h i", "h i"})}}},
      {"added_tokens",
       json::array({{{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                    {{"id", 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", nullptr}};
}

Tokenizer Load(const json& spec) {
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromJson(spec.dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return std::move(tokenizer).value();
}

std::vector<int32_t> Encode(const Tokenizer& tokenizer, const std::string& text,
                            bool add_special = false) {
  StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{-1};
}

std::string Decode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                   bool skip_special = false) {
  StatusOr<std::string> text = tokenizer.Decode(ids, skip_special);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "<error>";
}

using testutil::TempDir;

TEST(TokenizerLoad, ErrorsSayWhatIsWrong) {
  EXPECT_EQ(Tokenizer::FromFile("/nonexistent/tokenizer.json").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::FromModelDir("/nonexistent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::FromJson("{").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("[]").status().code(), StatusCode::kInvalidArgument);

  for (const char* model : {"Unigram", "WordPiece", "WordLevel"}) {
    json spec = TinySpec();
    spec["model"]["type"] = model;
    Status status = Tokenizer::FromJson(spec.dump()).status();
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
    EXPECT_EQ(status.message(), std::string("model: type '") + model + "' is not supported");
  }
  json spec = TinySpec();
  spec["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "WordPiece"}}})}};
  Status status = Tokenizer::FromJson(spec.dump()).status();
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("decoder.decoders[0]: type 'WordPiece'"), std::string::npos)
      << status.message();

  spec = TinySpec();
  spec["added_tokens"][0]["id"] = "zero";
  EXPECT_EQ(Tokenizer::FromJson(spec.dump()).status().code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerLoad, FromFilePrefixesErrorsWithThePath) {
  TempDir dir;
  json spec = TinySpec();
  spec["normalizer"] = {{"type", "Precompiled"}};
  testutil::WriteFile(dir.file("tokenizer.json"), spec.dump());
  Status status = Tokenizer::FromFile(dir.path() + "/tokenizer.json").status();
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(
      status.message().rfind(dir.path() + "/tokenizer.json: normalizer: type 'Precompiled'", 0), 0u)
      << status.message();
}

TEST(TokenizerEncode, InvalidUtf8IsAClearError) {
  const Tokenizer* qwen = Fixture("qwen3");
  ASSERT_NE(qwen, nullptr);
  StatusOr<std::vector<int32_t>> ids = qwen->Encode("abc\xFF", false);
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("UTF-8"), std::string::npos);
  EXPECT_NE(ids.status().message().find("byte 3"), std::string::npos);
}

TEST(TokenizerDecode, UnknownIdIsOutOfRange) {
  const Tokenizer* gpt2 = Fixture("gpt2");
  ASSERT_NE(gpt2, nullptr);
  StatusOr<std::string> text = gpt2->Decode({15496, 50257}, false);
  EXPECT_EQ(text.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(text.status().message().find("50257"), std::string::npos);
  EXPECT_EQ(gpt2->Decode({-1}, false).status().code(), StatusCode::kOutOfRange);
}

TEST(TokenizerDecode, SkipSpecialTokensKeepsNonSpecialAddedTokens) {
  const Tokenizer* qwen = Fixture("qwen3");
  ASSERT_NE(qwen, nullptr);
  std::vector<int32_t> chat = Encode(*qwen, "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(Decode(*qwen, chat, true), "user\nHi");
  EXPECT_EQ(Decode(*qwen, chat, false), "<|im_start|>user\nHi<|im_end|>");
  std::vector<int32_t> think = Encode(*qwen, "<think>\n</think>");
  EXPECT_EQ(Decode(*qwen, think, true), "<think>\n</think>");
}

TEST(TokenizerLookups, TokensIdsAndSpecialness) {
  const Tokenizer* qwen = Fixture("qwen3");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->TokenToId("<|im_end|>"), 151645);
  EXPECT_EQ(qwen->TokenToId("\u0120world"), 1879);
  EXPECT_FALSE(qwen->TokenToId("not a token at all").has_value());
  EXPECT_EQ(qwen->IdToToken(9707), "Hello");
  EXPECT_EQ(qwen->IdToToken(151668), "</think>");
  EXPECT_FALSE(qwen->IdToToken(-5).has_value());
  EXPECT_FALSE(qwen->IdToToken(151669).has_value());
  EXPECT_TRUE(qwen->IsSpecial(151645));
  EXPECT_FALSE(qwen->IsSpecial(*qwen->TokenToId("<think>")));
  EXPECT_FALSE(qwen->IsSpecial(9707));
}

TEST(TokenizerLookups, VocabSizes) {
  for (auto [name, size] : std::vector<std::pair<std::string, int32_t>>{
           {"qwen3", 151669}, {"mistral7b", 32000}, {"gpt2", 50257}}) {
    const Tokenizer* tokenizer = Fixture(name);
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_EQ(tokenizer->vocab_size(), size) << name;
  }
}

TEST(TokenizerModelDir, SpecialTokensAndEosFromTheFixtureConfigs) {
  const Tokenizer* qwen = Fixture("qwen3");
  const Tokenizer* mistral = Fixture("mistral7b");
  const Tokenizer* gpt2 = Fixture("gpt2");
  ASSERT_TRUE(qwen && mistral && gpt2);
  EXPECT_EQ(qwen->eos_ids(), std::vector<int32_t>{151645});
  EXPECT_EQ(qwen->eos_token(), "<|im_end|>");
  EXPECT_FALSE(qwen->bos_token().has_value());
  EXPECT_EQ(qwen->pad_token(), "<|endoftext|>");
  EXPECT_EQ(mistral->eos_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(mistral->bos_token(), "<s>");
  EXPECT_EQ(mistral->eos_token(), "</s>");
  EXPECT_EQ(mistral->unk_token(), "<unk>");
  EXPECT_FALSE(mistral->pad_token().has_value());
  EXPECT_EQ(gpt2->eos_ids(), std::vector<int32_t>{50256});
  EXPECT_EQ(gpt2->bos_token(), "<|endoftext|>");

  StatusOr<Tokenizer> bare = Tokenizer::FromFile(testing::FixtureRoot() + "/gpt2/tokenizer.json");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->eos_ids().empty());
  EXPECT_FALSE(bare->eos_token().has_value());
}

TEST(TokenizerModelDir, EosIdsComeFromGenerationConfigThenConfigThenTokenizerConfig) {
  TempDir dir;
  testutil::WriteFile(dir.file("tokenizer.json"), TinySpec().dump());
  auto eos = [&] {
    StatusOr<Tokenizer> tokenizer = Tokenizer::FromModelDir(dir.path());
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    return tokenizer.ok() ? tokenizer->eos_ids() : std::vector<int32_t>{-1};
  };
  EXPECT_TRUE(eos().empty());
  testutil::WriteFile(
      dir.file("tokenizer_config.json"),
      R"({"eos_token": {"__type": "AddedToken", "content": "</s>"}, "bos_token": "<s>"})");
  EXPECT_EQ(eos(), std::vector<int32_t>{1});
  testutil::WriteFile(dir.file("config.json"), R"({"eos_token_id": 7})");
  EXPECT_EQ(eos(), std::vector<int32_t>{7});
  testutil::WriteFile(dir.file("generation_config.json"), R"({"eos_token_id": [3, 4]})");
  EXPECT_EQ(eos(), (std::vector<int32_t>{3, 4}));
  testutil::WriteFile(dir.file("generation_config.json"), R"({"do_sample": true})");
  EXPECT_EQ(eos(), std::vector<int32_t>{7});

  testutil::WriteFile(dir.file("config.json"), R"({"eos_token_id": "seven"})");
  EXPECT_EQ(Tokenizer::FromModelDir(dir.path()).status().code(), StatusCode::kInvalidArgument);
  testutil::WriteFile(dir.file("config.json"), "{not json");
  EXPECT_EQ(Tokenizer::FromModelDir(dir.path()).status().code(), StatusCode::kInvalidArgument);
  testutil::WriteFile(dir.file("config.json"), "{}");
  testutil::WriteFile(dir.file("tokenizer_config.json"), R"({"eos_token": "<missing>"})");
  EXPECT_EQ(Tokenizer::FromModelDir(dir.path()).status().code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterTheNormalizer) {
  json spec = TinySpec();
  spec["normalizer"] = {{"type", "Lowercase"}};
  spec["added_tokens"].push_back(
      {{"id", 16}, {"content", "X"}, {"special", false}, {"normalized", true}});
  spec["model"]["vocab"]["x"] = 17;
  Tokenizer tokenizer = Load(spec);
  // "X" normalizes to "x": the token's pattern is "x", found in "ax" after
  // lowercasing "AX". Raw tokens (<s>) match before normalization only.
  EXPECT_EQ(Encode(tokenizer, "AX<s>"), (std::vector<int32_t>{2, 16, 0}));
  EXPECT_EQ(Encode(tokenizer, "<S>"), (std::vector<int32_t>{}));  // "<", ">" are unknown
}

TEST(TokenizerAddedTokens, PrependAndMetaspaceFirstSeeSegments) {
  // Prepend applies to every segment between added tokens.
  json spec = TinySpec();
  spec["normalizer"] = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  Tokenizer prepend = Load(spec);
  EXPECT_EQ(Encode(prepend, "hi<s>hi"), (std::vector<int32_t>{15, 0, 15}));
  // Metaspace "first" prepends only to the segment at the start of the text.
  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "\u2581"},
                           {"prepend_scheme", "first"},
                           {"split", false}};
  Tokenizer first = Load(spec);
  EXPECT_EQ(Encode(first, "hi<s>hi"), (std::vector<int32_t>{15, 0, 14}));
  EXPECT_EQ(Encode(first, "<s>hi"), (std::vector<int32_t>{0, 14}));
}

TEST(TokenizerEncode, WithoutDecoderTokensJoinWithSpaces) {
  Tokenizer tokenizer = Load(TinySpec());
  EXPECT_EQ(Decode(tokenizer, {14, 2, 3}), "hi a b");
}

// Feeds every fixture case through an IncrementalDecoder one id at a time.
void CheckStreaming(const Tokenizer& tokenizer, const std::string& text, bool skip_special,
                    bool* saw_held_back) {
  std::vector<int32_t> ids = Encode(tokenizer, text);
  IncrementalDecoder stream(tokenizer, skip_special);
  std::string joined;
  for (int32_t id : ids) {
    StatusOr<std::string> piece = stream.Add(id);
    ASSERT_TRUE(piece.ok()) << piece.status().ToString();
    EXPECT_TRUE(ValidateUtf8(*piece).ok());
    EXPECT_FALSE(EndsWithReplacementChar(*piece)) << "emitted half a character";
    if (piece->empty()) *saw_held_back = true;
    joined += *piece;
  }
  StatusOr<std::string> rest = stream.Finish();
  ASSERT_TRUE(rest.ok());
  joined += *rest;
  EXPECT_EQ(joined, Decode(tokenizer, ids, skip_special)) << text;
}

TEST(IncrementalDecoder, ConcatenationEqualsDecodeForEveryFixtureCase) {
  for (const std::string name : {"qwen3", "mistral7b", "gpt2"}) {
    const Tokenizer* tokenizer = Fixture(name);
    ASSERT_NE(tokenizer, nullptr);
    std::ifstream cases(testing::FixtureRoot() + "/" + name + "/cases.jsonl");
    std::string line;
    bool saw_held_back = false;
    while (std::getline(cases, line)) {
      std::string text = json::parse(line).at("text").get<std::string>();
      SCOPED_TRACE(name + ": " + json(text).dump());
      CheckStreaming(*tokenizer, text, false, &saw_held_back);
      CheckStreaming(*tokenizer, text, true, &saw_held_back);
    }
    // Emoji and CJK cases split characters over byte tokens somewhere.
    EXPECT_TRUE(saw_held_back) << name;
  }
}

TEST(IncrementalDecoder, HoldsBackAnIncompleteCharacter) {
  const Tokenizer* gpt2 = Fixture("gpt2");
  ASSERT_NE(gpt2, nullptr);
  // U+1F355 is four bytes; GPT-2 spells " 🍕" with several byte tokens.
  std::vector<int32_t> ids = Encode(*gpt2, "a \U0001F355");
  ASSERT_GT(ids.size(), 2u);
  IncrementalDecoder stream(*gpt2, false);
  EXPECT_EQ(*stream.Add(ids[0]), "a");
  for (size_t i = 1; i + 1 < ids.size(); ++i) EXPECT_EQ(*stream.Add(ids[i]), "") << i;
  EXPECT_EQ(*stream.Add(ids.back()), " \U0001F355");
  EXPECT_EQ(*stream.Finish(), "");
  // A stream cut inside the character ends with U+FFFD only at Finish.
  EXPECT_EQ(*stream.Add(ids[1]), "");
  EXPECT_EQ(*stream.Finish(), " \uFFFD");
  EXPECT_EQ(stream.Add(50257).status().code(), StatusCode::kOutOfRange);
}

TEST(IncrementalDecoder, WithStopStringsStopsBeforeTheStop) {
  const Tokenizer* mistral = Fixture("mistral7b");
  ASSERT_NE(mistral, nullptr);
  IncrementalDecoder stream(*mistral, true);
  StopStringMatcher stops({"brown f", "never"});
  std::string out;
  bool stopped = false;
  for (int32_t id : Encode(*mistral, "The quick brown fox jumps", true)) {
    StopStringMatcher::Result result = stops.Feed(*stream.Add(id));
    out += result.text;
    if (result.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "The quick ");
}

// Encodes `text` and checks it round-trips, returning the CPU seconds the
// encoding took.
double TimedRoundTrip(const Tokenizer& tokenizer, const std::string& text) {
  double start = testing::ThreadCpuSeconds();
  std::vector<int32_t> ids = Encode(tokenizer, text);
  double seconds = testing::ThreadCpuSeconds() - start;
  EXPECT_EQ(Decode(tokenizer, ids), text);
  return seconds;
}

TEST(TokenizerEncode, NoQuadraticBehaviourOn100kBOfOneCharacter) {
  std::vector<std::string> texts = {std::string(100000, 'a'), std::string(100000, ' '),
                                    std::string(100000, '7'), std::string(100000, '\n')};
  std::string accents, pizzas;
  for (int i = 0; i < 50000; ++i) accents += "\u00E9";
  for (int i = 0; i < 25000; ++i) pizzas += "\U0001F355";
  texts.push_back(accents);
  texts.push_back(pizzas);
  for (const std::string name : {"qwen3", "mistral7b", "gpt2"}) {
    const Tokenizer* tokenizer = Fixture(name);
    ASSERT_NE(tokenizer, nullptr);
    for (const std::string& text : texts) {
      double seconds = TimedRoundTrip(*tokenizer, text);
      EXPECT_LT(seconds, 2.0 * testing::kTimeBoundFactor)
          << name << " on 100 kB of " << json(text.substr(0, 4)).dump();
    }
  }
}

TEST(TokenizerEncode, ConcurrentEncodesMatchSequentialOnes) {
  const Tokenizer* qwen = Fixture("qwen3");
  ASSERT_NE(qwen, nullptr);
  std::vector<std::string> texts;
  std::ifstream cases(testing::FixtureRoot() + "/qwen3/cases.jsonl");
  for (std::string line; std::getline(cases, line);) {
    texts.push_back(json::parse(line).at("text").get<std::string>());
  }
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : texts) expected.push_back(Encode(*qwen, text));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          StatusOr<std::vector<int32_t>> ids = qwen->Encode(texts[(i + t) % texts.size()], false);
          if (!ids.ok() || *ids != expected[(i + t) % texts.size()]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace nightshift::tokenizer
