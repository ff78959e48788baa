#include "worker/tokenizer/bpe.h"

#include <thread>

#include <gtest/gtest.h>

#include "worker/tokenizer/test_util.h"

namespace nightshift::tokenizer {
namespace {

std::unique_ptr<BpeModel> Model(const std::string& json_text) {
  StatusOr<std::unique_ptr<BpeModel>> model = BpeModel::FromJson(Json::parse(json_text), "model");
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

std::vector<int32_t> Ids(const BpeModel& model, const std::string& word) {
  std::vector<int32_t> ids;
  Status status = model.Tokenize(word, &ids);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return ids;
}

constexpr const char* kAbcVocab = R"({"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5,"aa":6,"aaaa":7})";

TEST(BpeModel, LowestRankMergesFirst) {
  // "b c" outranks "a b", so abc = a + bc, then "a bc".
  auto model = Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab +
                     R"(,"merges":["b c","a b","a bc"]})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(Ids(*model, "abc"), (std::vector<int32_t>{5}));
  EXPECT_EQ(Ids(*model, "cab"), (std::vector<int32_t>{2, 3}));
  // Without "a bc", the word stops at a + bc even though "ab" exists.
  auto partial =
      Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab + R"(,"merges":["b c","a b"]})");
  EXPECT_EQ(Ids(*partial, "abc"), (std::vector<int32_t>{0, 4}));
}

TEST(BpeModel, EqualRanksGoLeftToRight) {
  auto model =
      Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab + R"(,"merges":["a a"]})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(Ids(*model, "aaa"), (std::vector<int32_t>{6, 0}));
  EXPECT_EQ(Ids(*model, "aaaaa"), (std::vector<int32_t>{6, 6, 0}));
}

TEST(BpeModel, PairMergesEqualStringMerges) {
  auto strings = Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab +
                       R"(,"merges":["a a","aa aa","b c"]})");
  auto pairs = Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab +
                     R"(,"merges":[["a","a"],["aa","aa"],["b","c"]]})");
  ASSERT_NE(strings, nullptr);
  ASSERT_NE(pairs, nullptr);
  for (const char* word : {"aaaa", "aaaaaaabc", "cba"}) {
    EXPECT_EQ(Ids(*strings, word), Ids(*pairs, word)) << word;
  }
  EXPECT_EQ(Ids(*pairs, "aaaaaaabc"), (std::vector<int32_t>{7, 6, 0, 4}));
}

TEST(BpeModel, StringMergeWithSpacesInsideTokensUsesTheVocab) {
  // "a b c" can only mean "a b" + "c": "b c" is not a token.
  auto model = Model(R"({"type":"BPE",
      "vocab":{"a":0," ":1,"b":2,"c":3,"a ":4,"a b":5,"a bc":6},
      "merges":["a  ","a  b","a b c"]})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(Ids(*model, "a bc"), (std::vector<int32_t>{6}));
  EXPECT_EQ(Ids(*model, "a b"), (std::vector<int32_t>{5}));
}

TEST(BpeModel, IgnoreMergesEmitsAWordThatIsInTheVocab) {
  // Merges alone turn "abc" into a + bc; with ignore_merges the vocab entry wins.
  const std::string merges = R"(,"merges":["b c","a b"])";
  auto merging = Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab + merges + "}");
  auto ignoring = Model(std::string(R"({"type":"BPE","ignore_merges":true,"vocab":)") + kAbcVocab +
                        merges + "}");
  ASSERT_NE(merging, nullptr);
  ASSERT_NE(ignoring, nullptr);
  EXPECT_EQ(Ids(*merging, "abc"), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(Ids(*ignoring, "abc"), (std::vector<int32_t>{5}));
  // A word outside the vocab still merges.
  EXPECT_EQ(Ids(*ignoring, "cabc"), (std::vector<int32_t>{2, 0, 4}));
}

TEST(BpeModel, ByteFallbackSpellsUnknownCharactersAsBytes) {
  auto model = Model(R"({"type":"BPE","byte_fallback":true,"unk_token":"<unk>",
                        "vocab":{"<unk>":0,"<0xC3>":1,"<0xA9>":2,"a":3},"merges":[]})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(Ids(*model, "a\u00E9a"), (std::vector<int32_t>{3, 1, 2, 3}));
  // No byte tokens for U+4F60: unk instead.
  EXPECT_EQ(Ids(*model, "\u4F60a"), (std::vector<int32_t>{0, 3}));
}

TEST(BpeModel, UnknownCharactersFuseOnlyWithFuseUnk) {
  const std::string vocab = R"("vocab":{"<unk>":0,"a":1},"merges":[])";
  auto fused = Model(R"({"type":"BPE","unk_token":"<unk>","fuse_unk":true,)" + vocab + "}");
  auto separate = Model(R"({"type":"BPE","unk_token":"<unk>","fuse_unk":false,)" + vocab + "}");
  auto none = Model(R"({"type":"BPE",)" + vocab + "}");
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(separate, nullptr);
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(Ids(*fused, "xyaz"), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(Ids(*separate, "xyaz"), (std::vector<int32_t>{0, 0, 1, 0}));
  EXPECT_EQ(Ids(*none, "xyaz"), (std::vector<int32_t>{1}));  // dropped, as in the crate
}

TEST(BpeModel, UnkTokenMissingFromVocabFailsWhenNeeded) {
  auto model = Model(R"({"type":"BPE","unk_token":"<unk>","vocab":{"a":0},"merges":[]})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(Ids(*model, "a"), (std::vector<int32_t>{0}));
  std::vector<int32_t> ids;
  EXPECT_EQ(model->Tokenize("b", &ids).code(), StatusCode::kInvalidArgument);
}

TEST(BpeModel, SubwordPrefixAndWordSuffix) {
  auto prefixed = Model(R"({"type":"BPE","continuing_subword_prefix":"##",
      "vocab":{"a":0,"##b":1,"##c":2,"##bc":3,"abc":4},"merges":["##b ##c","a ##bc"]})");
  ASSERT_NE(prefixed, nullptr);
  EXPECT_EQ(Ids(*prefixed, "abc"), (std::vector<int32_t>{4}));
  EXPECT_EQ(Ids(*prefixed, "acb"), (std::vector<int32_t>{0, 2, 1}));
  auto suffixed = Model(R"({"type":"BPE","end_of_word_suffix":"</w>",
      "vocab":{"a":0,"b</w>":1,"ab</w>":2,"b":3},"merges":["a b</w>"]})");
  ASSERT_NE(suffixed, nullptr);
  EXPECT_EQ(Ids(*suffixed, "ab"), (std::vector<int32_t>{2}));
  EXPECT_EQ(Ids(*suffixed, "ba"), (std::vector<int32_t>{3}));  // "a</w>" is unknown: dropped
}

TEST(BpeModel, RefusesBadModels) {
  auto error = [](const std::string& json_text) {
    return BpeModel::FromJson(Json::parse(json_text), "model").status();
  };
  EXPECT_EQ(error(R"({"type":"BPE","vocab":{"a":0},"merges":["a b"]})").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(error(R"({"type":"BPE","vocab":{"a":0},"merges":["ab"]})").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(error(R"({"type":"BPE","vocab":{"a":-1},"merges":[]})").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(error(R"({"type":"BPE","vocab":{"a":0}})").code(), StatusCode::kInvalidArgument);
  Status dropout = error(R"({"type":"BPE","dropout":0.1,"vocab":{"a":0},"merges":[]})");
  EXPECT_EQ(dropout.code(), StatusCode::kUnimplemented);
  EXPECT_NE(dropout.message().find("dropout"), std::string::npos);
  EXPECT_TRUE(error(R"({"type":"BPE","dropout":null,"vocab":{"a":0},"merges":[]})").ok());
}

TEST(BpeModel, IdsAndTokens) {
  auto model = Model(R"({"type":"BPE","vocab":{"a":0,"b":2},"merges":[]})");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->max_id(), 2);
  EXPECT_EQ(*model->IdToToken(2), "b");
  EXPECT_EQ(model->IdToToken(1), nullptr);  // a hole in the ids
  EXPECT_EQ(model->IdToToken(3), nullptr);
  EXPECT_EQ(model->IdToToken(-1), nullptr);
  EXPECT_EQ(*model->TokenToId("a"), 0);
  EXPECT_FALSE(model->TokenToId("c").has_value());
}

TEST(BpeModel, LongWordIsNotQuadratic) {
  auto model =
      Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab + R"(,"merges":["a a","aa aa"]})");
  ASSERT_NE(model, nullptr);
  const std::string word(200000, 'a');
  double start = testing::ThreadCpuSeconds();
  std::vector<int32_t> ids = Ids(*model, word);
  double seconds = testing::ThreadCpuSeconds() - start;
  EXPECT_EQ(ids.size(), 50000u);
  EXPECT_EQ(ids.front(), 7);
  EXPECT_LT(seconds, 2.0 * testing::kTimeBoundFactor);
}

TEST(BpeModel, CachedAndConcurrentResultsAgree) {
  auto model = Model(std::string(R"({"type":"BPE","vocab":)") + kAbcVocab +
                     R"(,"merges":["b c","a b","a bc","a a"]})");
  ASSERT_NE(model, nullptr);
  const std::vector<std::string> words = {"abc", "aabc", "cab", "aaaa", "bca"};
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& word : words) expected.push_back(Ids(*model, word));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2000; ++round) {
        for (size_t w = 0; w < words.size(); ++w) {
          std::vector<int32_t> ids;
          if (!model->Tokenize(words[w], &ids).ok() || ids != expected[w]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace nightshift::tokenizer
