// tests/data/chat-templates/jinja2/snippets.jsonl: one or a few Jinja
// constructs per case, rendered by Python Jinja2 configured like
// transformers. The interpreter must produce the same text, raise the same
// raise_exception message, and fail where Jinja2 failed, with Jinja2's
// message (without Python's exception type).
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/chat/chat_template.h"

namespace nightshift::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string Jinja2Dir() { return testutil::DataPath("chat-templates/jinja2"); }

// "line 3: message" -> "message".
std::string WithoutLine(const std::string& message) {
  if (message.rfind("line ", 0) != 0) return message;
  size_t colon = message.find(": ");
  return colon == std::string::npos ? message : message.substr(colon + 2);
}

TEST(Jinja2Snippets, AgreeWithPythonJinja2) {
  std::ifstream in(Jinja2Dir() + "/snippets.jsonl");
  ASSERT_TRUE(in) << "missing snippets.jsonl";
  std::ifstream manifest_in(Jinja2Dir() + "/manifest.json");
  Json manifest = Json::parse(manifest_in);
  std::string line;
  int count = 0, failures_expected = 0;
  while (std::getline(in, line)) {
    Json c = Json::parse(line);
    ++count;
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(c["template"].get<std::string>());
    Status status = compiled.status();
    std::string rendered;
    if (compiled.ok()) {
      StatusOr<std::string> result = compiled->Render(c["context"]);
      status = result.status();
      if (result.ok()) rendered = *result;
    }
    if (c.contains("rendered")) {
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(rendered, c["rendered"].get<std::string>());
      continue;
    }
    ++failures_expected;
    ASSERT_FALSE(status.ok()) << "rendered instead of failing: " << rendered;
    if (c.contains("error")) {
      EXPECT_EQ(status.message(), c["error"].get<std::string>());
      continue;
    }
    std::string python = c["python_error"].get<std::string>();
    python = python.substr(python.find(": ") + 2);  // drop "TypeError: "
    EXPECT_EQ(python.rfind(WithoutLine(status.message()), 0), 0u)
        << "python: " << python << "\nours:   " << status.message();
  }
  EXPECT_EQ(count, manifest["snippets"].get<int>());
  EXPECT_GT(failures_expected, 40);
}

}  // namespace
}  // namespace nightshift::chat
