// Every case of the chat-template fixtures under tests/data/chat-templates:
//   - the shared set (real templates rendered by HuggingFace's own Jinja
//     implementation, @huggingface/jinja), and
//   - jinja2/ (more real-model templates and Jinja constructs, rendered by
//     Python Jinja2 set up exactly like transformers; see its README).
// Output must match byte for byte; a template's raise_exception must surface
// with its message; where the reference itself failed (a Python error such
// as an undefined attribute or runaway recursion) rendering must fail too.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/chat/chat_template.h"

namespace nightshift::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string FixtureRoot() { return testutil::DataPath("chat-templates"); }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct FixtureTemplate {
  std::string set;   // "" (shared) or "jinja2"
  std::string name;  // directory
  int cases;         // as listed in the set's manifest.json
};

std::string SetDir(const std::string& set) {
  return FixtureRoot() + (set.empty() ? "" : "/" + set);
}

std::vector<FixtureTemplate> ListTemplates() {
  std::vector<FixtureTemplate> all;
  for (const std::string set : {"", "jinja2"}) {
    std::ifstream in(SetDir(set) + "/manifest.json");
    if (!in) continue;  // reported by ManifestsArePresent
    Json manifest = Json::parse(in);
    for (const auto& [name, info] : manifest["templates"].items()) {
      all.push_back({set, name, info["cases"].get<int>()});
    }
  }
  return all;
}

std::string TestName(const ::testing::TestParamInfo<FixtureTemplate>& info) {
  return (info.param.set.empty() ? "shared_" : info.param.set + "_") + info.param.name;
}

class ChatTemplateFixture : public ::testing::TestWithParam<FixtureTemplate> {};

TEST_P(ChatTemplateFixture, RendersEveryCaseLikeTheReference) {
  const FixtureTemplate& fixture = GetParam();
  const std::string dir = SetDir(fixture.set) + "/" + fixture.name;
  StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(ReadText(dir + "/template.jinja"));
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  Json special = Json::parse(ReadText(dir + "/special.json"));

  std::ifstream cases(dir + "/cases.jsonl");
  std::string line;
  int count = 0;
  while (std::getline(cases, line)) {
    if (line.empty()) continue;
    Json c = Json::parse(line);
    ++count;
    SCOPED_TRACE(fixture.name + " case " + c["id"].get<std::string>());
    Json context = special;
    for (const auto& [key, value] : c.items()) {
      if (key != "id" && key != "rendered" && key != "error" && key != "python_error") {
        context[key] = value;
      }
    }
    StatusOr<std::string> rendered = compiled->Render(context);
    if (c.contains("rendered")) {
      ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
      EXPECT_EQ(*rendered, c["rendered"].get<std::string>());
    } else {
      ASSERT_FALSE(rendered.ok()) << "rendered instead of failing: " << *rendered;
      if (c.contains("error")) {
        EXPECT_EQ(rendered.status().code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(rendered.status().message(), c["error"].get<std::string>());
      }
    }
  }
  EXPECT_EQ(count, fixture.cases) << "cases.jsonl and manifest.json disagree";
}

INSTANTIATE_TEST_SUITE_P(All, ChatTemplateFixture, ::testing::ValuesIn(ListTemplates()), TestName);

TEST(ChatTemplateFixtures, ManifestsArePresent) {
  std::vector<FixtureTemplate> all = ListTemplates();
  int shared = 0, jinja2 = 0;
  for (const FixtureTemplate& t : all) (t.set.empty() ? shared : jinja2)++;
  EXPECT_EQ(shared, 4);  // qwen3, mistral7b_instruct, mistral_nemo, chatml
  EXPECT_GE(jinja2, 10);
}

}  // namespace
}  // namespace nightshift::chat
