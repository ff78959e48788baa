// Every case of tests/data/chat-templates (real chat templates, rendered by
// HuggingFace's own Jinja implementation): the output must match byte for
// byte, and a template's raise_exception must surface with its message.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/chat/chat_template.h"

namespace nightshift::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string FixtureDir() {
  const char* data = std::getenv("NIGHTSHIFT_TEST_DATA");
  return std::string(data ? data : "tests/data") + "/chat-templates";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class ChatTemplateFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixture, RendersEveryCaseLikeTheReference) {
  const std::string dir = FixtureDir() + "/" + GetParam();
  StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(ReadText(dir + "/template.jinja"));
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  Json special = Json::parse(ReadText(dir + "/special.json"));
  Json manifest = Json::parse(ReadText(FixtureDir() + "/manifest.json"));

  std::ifstream cases(dir + "/cases.jsonl");
  std::string line;
  int count = 0, renders = 0, errors = 0;
  while (std::getline(cases, line)) {
    if (line.empty()) continue;
    Json c = Json::parse(line);
    ++count;
    SCOPED_TRACE(GetParam() + " case " + c["id"].get<std::string>());
    Json context = special;
    for (const auto& [key, value] : c.items()) {
      if (key != "id" && key != "rendered" && key != "error") context[key] = value;
    }
    StatusOr<std::string> rendered = compiled->Render(context);
    if (c.contains("error")) {
      ++errors;
      ASSERT_FALSE(rendered.ok()) << "rendered instead of failing: " << *rendered;
      EXPECT_EQ(rendered.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(rendered.status().message(), c["error"].get<std::string>());
    } else {
      ++renders;
      ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
      EXPECT_EQ(*rendered, c["rendered"].get<std::string>());
    }
  }
  EXPECT_EQ(count, manifest["templates"][GetParam()]["cases"].get<int>())
      << "cases.jsonl incomplete";
  EXPECT_GT(renders, 0);
  RecordProperty("error_cases", errors);
}

INSTANTIATE_TEST_SUITE_P(All, ChatTemplateFixture,
                         ::testing::Values("chatml", "mistral7b_instruct", "mistral_nemo",
                                           "qwen3"));

TEST(ChatTemplateFixtures, ManifestListsExactlyTheTestedTemplates) {
  Json manifest = Json::parse(ReadText(FixtureDir() + "/manifest.json"));
  std::vector<std::string> names;
  for (const auto& [name, info] : manifest["templates"].items()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"qwen3", "mistral7b_instruct", "mistral_nemo", "chatml"}));
}

}  // namespace
}  // namespace nightshift::chat
