// Malformed templates must fail with a status, never crash or hang: every
// fixture template is mutated many times (characters that matter to Jinja
// inserted, deleted or replaced, seeded) and compiled and rendered. The
// sanitizer build runs this too.
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/chat/chat_template.h"

namespace nightshift::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Mutate(std::string text, std::mt19937& rng) {
  static const char kAlphabet[] = "{}%#-+|.,:()[]'\"~=!<>*/ \n\\abxyz019_";
  std::uniform_int_distribution<int> edits(1, 4);
  for (int n = edits(rng); n > 0; --n) {
    size_t at = text.empty() ? 0 : std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
    char c = kAlphabet[std::uniform_int_distribution<size_t>(0, sizeof(kAlphabet) - 2)(rng)];
    switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
      case 0:
        text.insert(at, 1, c);
        break;
      case 1:
        if (!text.empty()) text.erase(at, 1);
        break;
      default:
        if (!text.empty()) text[at] = c;
    }
  }
  return text;
}

TEST(Robustness, MutatedTemplatesFailCleanly) {
  const std::string root = testutil::DataPath("chat-templates");
  const char* templates[] = {"qwen3",
                             "mistral_nemo",
                             "jinja2/llama3_1",
                             "jinja2/hermes_tool_use",
                             "jinja2/command_r_tools",
                             "jinja2/gemma3",
                             "jinja2/misc_models"};
  Json context = Json::parse(R"({
    "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "<think>x</think>Yo", "tool_calls": [
                   {"id": "abcdefghi", "function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "tool_call_id": "abcdefghi", "content": "r"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "a"}},
                              "required": ["a"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  std::mt19937 rng(20240607);
  int compiled = 0, rendered = 0, total = 0;
  for (const char* name : templates) {
    const std::string source = ReadText(root + "/" + name + "/template.jinja");
    ASSERT_FALSE(source.empty()) << name;
    for (int i = 0; i < 150; ++i) {
      std::string mutated = Mutate(source, rng);
      ++total;
      StatusOr<ChatTemplate> t = ChatTemplate::Compile(mutated);
      if (!t.ok()) {
        EXPECT_FALSE(t.status().message().empty());
        continue;
      }
      ++compiled;
      StatusOr<std::string> out = t->Render(context);
      if (out.ok()) {
        ++rendered;
      } else {
        EXPECT_FALSE(out.status().message().empty());
      }
    }
  }
  // Both paths are exercised: some mutants still compile and render.
  EXPECT_GT(compiled, total / 10);
  EXPECT_GT(rendered, 0);
  EXPECT_LT(compiled, total);
}

}  // namespace
}  // namespace nightshift::chat
