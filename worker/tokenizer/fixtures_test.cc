// Every case of every tests/data/tokenizers/*/cases.jsonl: ids without and
// with special tokens, and the decoded text, exactly as HuggingFace's
// implementation produced them.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/tokenizer/test_util.h"

namespace nightshift::tokenizer {
namespace {

using nlohmann::json;

struct Case {
  int line;
  json spec;
};

std::vector<Case> ReadCases(const std::string& path) {
  std::vector<Case> cases;
  std::ifstream in(path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    cases.push_back({number, json::parse(line)});
  }
  return cases;
}

std::vector<std::string> FixtureNames() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(testing::FixtureRoot(), error)) {
    if (std::filesystem::exists(entry.path() / "cases.jsonl")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class FixtureCases : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureCases, MatchReference) {
  const std::string name = GetParam();
  const Tokenizer* tokenizer = testing::Fixture(name);
  ASSERT_NE(tokenizer, nullptr);
  std::vector<Case> cases = ReadCases(testing::FixtureRoot() + "/" + name + "/cases.jsonl");
  ASSERT_GE(cases.size(), 60u) << "fewer cases than the fixture README promises";
  for (const Case& c : cases) {
    const std::string text = c.spec.at("text").get<std::string>();
    SCOPED_TRACE(name + " cases.jsonl line " + std::to_string(c.line) + " (" +
                 c.spec.value("category", "") + "): " + c.spec.at("text").dump());
    StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.spec.at("ids").get<std::vector<int32_t>>());
    StatusOr<std::vector<int32_t>> with_special = tokenizer->Encode(text, true);
    ASSERT_TRUE(with_special.ok()) << with_special.status().ToString();
    EXPECT_EQ(*with_special, c.spec.at("ids_with_special").get<std::vector<int32_t>>());
    StatusOr<std::string> decoded =
        tokenizer->Decode(c.spec.at("ids").get<std::vector<int32_t>>(), false);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, c.spec.at("decoded").get<std::string>());
    if (c.spec.contains("tokens")) {
      std::vector<std::string> tokens;
      for (int32_t id : c.spec.at("ids").get<std::vector<int32_t>>()) {
        tokens.push_back(tokenizer->IdToToken(id).value_or("<missing>"));
      }
      EXPECT_EQ(tokens, c.spec.at("tokens").get<std::vector<std::string>>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, FixtureCases, ::testing::ValuesIn(FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(FixtureCases, AllThreeFixturesArePresent) {
  EXPECT_EQ(FixtureNames(), (std::vector<std::string>{"gpt2", "mistral7b", "qwen3"}));
}

}  // namespace
}  // namespace nightshift::tokenizer
