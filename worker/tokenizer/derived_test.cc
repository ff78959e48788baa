// Variants of the fixture tokenizers, made here by editing their
// tokenizer.json, against reference outputs in tests/data/tokenizers/derived
// (see its README): Llama 3's split pattern with ignore_merges on GPT-2's
// vocab, and Metaspace with prepend_scheme "first" on Mistral's.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/tokenizer/test_util.h"

namespace nightshift::tokenizer {
namespace {

using nlohmann::json;

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

void ExpectCases(const Tokenizer& tokenizer, const std::string& cases_file) {
  std::ifstream in(testing::FixtureRoot() + "/derived/" + cases_file);
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json c = json::parse(line);
    const std::string text = c.at("text").get<std::string>();
    SCOPED_TRACE(cases_file + ": " + c.at("text").dump());
    StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.at("ids").get<std::vector<int32_t>>());
    StatusOr<std::vector<int32_t>> with_special = tokenizer.Encode(text, true);
    ASSERT_TRUE(with_special.ok());
    EXPECT_EQ(*with_special, c.at("ids_with_special").get<std::vector<int32_t>>());
    StatusOr<std::string> decoded = tokenizer.Decode(*ids, false);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c.at("decoded").get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 248);
}

TEST(DerivedTokenizers, Gpt2VocabWithLlama3SplitAndIgnoreMerges) {
  json spec = ReadJson(testing::FixtureRoot() + "/gpt2/tokenizer.json");
  spec["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", json::array({{{"type", "Split"},
                                                           {"pattern", {{"Regex", kLlama3Pattern}}},
                                                           {"behavior", "Isolated"},
                                                           {"invert", false}},
                                                          {{"type", "ByteLevel"},
                                                           {"add_prefix_space", false},
                                                           {"trim_offsets", true},
                                                           {"use_regex", false}}})}};
  spec["model"]["ignore_merges"] = true;
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromJson(spec.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  ExpectCases(*tokenizer, "gpt2_llama3_split.jsonl");
}

TEST(DerivedTokenizers, MistralVocabWithMetaspacePrependFirst) {
  json spec = ReadJson(testing::FixtureRoot() + "/mistral7b/tokenizer.json");
  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "\u2581"},
                           {"prepend_scheme", "first"},
                           {"split", false}};
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromJson(spec.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  ExpectCases(*tokenizer, "mistral_metaspace_first.jsonl");
}

}  // namespace
}  // namespace nightshift::tokenizer
