// `nightshift chat-render` end to end: runs the built binary
// ($NIGHTSHIFT_BIN_DIR/nightshift) on model directories and checks its
// output, exit codes and messages.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/chat/chat_template.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Quote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

class ChatRenderCli : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = testutil::BinPath("nightshift");
    ASSERT_TRUE(fs::exists(binary_)) << binary_;
    scratch_ = fs::temp_directory_path() / ("chat_render_cli_test_" + std::to_string(getpid()));
    fs::remove_all(scratch_);
    fs::create_directories(scratch_ / "model");
  }
  void TearDown() override { fs::remove_all(scratch_); }

  // Runs `nightshift chat-render ARGS < stdin_text`.
  CliResult Run(const std::string& args, const std::string& stdin_text) {
    std::ofstream(scratch_ / "stdin", std::ios::binary) << stdin_text;
    std::string command = Quote(binary_) + " chat-render " + args + " < " +
                          Quote((scratch_ / "stdin").string()) + " > " +
                          Quote((scratch_ / "stdout").string()) + " 2> " +
                          Quote((scratch_ / "stderr").string());
    int status = std::system(command.c_str());
    CliResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = ReadFile(scratch_ / "stdout");
    result.err = ReadFile(scratch_ / "stderr");
    return result;
  }

  std::string WriteModel(const Json& tokenizer_config) {
    std::ofstream(scratch_ / "model" / "tokenizer_config.json") << tokenizer_config.dump();
    return Quote((scratch_ / "model").string());
  }

  static std::string TestData() { return testutil::DataPath(""); }

  std::string binary_;
  fs::path scratch_;
};

const char kTemplate[] =
    "{{ bos_token }}{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' ~ m.role) }}{% endif %}[{{ m.role }}] {{ m.content }}\n{% "
    "endfor %}"
    "{% if tools is defined %}tools: {{ tools|map(attribute='name')|join(', ') }}\n{% endif %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}";

const char kMessages[] =
    R"([{"role": "user", "content": "Hi \"there\" 日本"}, {"role": "assistant", "content": "Hello"}])";

TEST_F(ChatRenderCli, PrintsThePromptExactly) {
  std::string model = WriteModel({{"chat_template", kTemplate}, {"bos_token", "<s>"}});
  CliResult r = Run("--model-dir " + model, kMessages);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>[user] Hi \"there\" 日本\n[assistant] Hello\n[assistant]");
  EXPECT_EQ(r.err, "");

  r = Run("--model-dir " + model + " --no-generation-prompt", kMessages);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>[user] Hi \"there\" 日本\n[assistant] Hello\n");
}

TEST_F(ChatRenderCli, JsonOutputAndExtraVariables) {
  std::string model = WriteModel({{"chat_template", kTemplate}, {"bos_token", "<s>"}});
  Json input = {{"messages", Json::parse(kMessages)},
                {"tools", {{{"name", "search"}}, {{"name", "calc"}}}},
                {"bos_token", "<override>"}};
  CliResult r = Run("--model-dir " + model + " --json --no-generation-prompt", input.dump());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(
      Json::parse(r.out),
      Json({{"prompt",
             "<override>[user] Hi \"there\" 日本\n[assistant] Hello\ntools: search, calc\n"}}));
  EXPECT_EQ(r.out.back(), '\n');
}

TEST_F(ChatRenderCli, TemplateErrorsExitOneWithTheTemplatesMessage) {
  std::string model = WriteModel({{"chat_template", kTemplate}});
  CliResult r = Run("--model-dir " + model, R"([{"role": "narrator", "content": "x"}])");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "nightshift chat-render: Unknown role: narrator\n");
}

TEST_F(ChatRenderCli, UsageAndModelErrors) {
  std::string model = WriteModel({{"chat_template", kTemplate}});
  CliResult bad_json = Run("--model-dir " + model, "[{");
  EXPECT_EQ(bad_json.exit_code, 2);
  EXPECT_EQ(bad_json.err, "nightshift chat-render: standard input is not valid JSON\n");
  EXPECT_EQ(Run("--model-dir " + model, R"({"no_messages": 1})").exit_code, 2);
  EXPECT_EQ(Run("", kMessages).exit_code, 2);
  EXPECT_EQ(Run("--model-dir " + model + " --bogus", kMessages).exit_code, 2);

  CliResult no_template = Run("--model-dir " + Quote((scratch_ / "nowhere").string()), kMessages);
  EXPECT_EQ(no_template.exit_code, 1);
  EXPECT_NE(no_template.err.find("not a directory"), std::string::npos) << no_template.err;

  std::string broken = WriteModel({{"chat_template", "{% for %}"}});
  CliResult syntax = Run("--model-dir " + broken, kMessages);
  EXPECT_EQ(syntax.exit_code, 1);
  EXPECT_EQ(
      syntax.err.rfind("nightshift chat-render: tokenizer_config.json chat_template: line 1: ", 0),
      0u)
      << syntax.err;
}

TEST_F(ChatRenderCli, NamedTemplate) {
  std::string model = WriteModel(
      {{"chat_template",
        {{{"name", "default"}, {"template", "D"}}, {{"name", "tool_use"}, {"template", "T"}}}}});
  EXPECT_EQ(Run("--model-dir " + model, "[]").out, "D");
  EXPECT_EQ(Run("--model-dir " + model + " --template tool_use", "[]").out, "T");
}

TEST_F(ChatRenderCli, IdsEncodeThePromptWithTheModelsTokenizer) {
  // A real Qwen3 tokenizer directory: tokenizer.json and a tokenizer_config.json
  // holding the model's chat template.
  std::string dir = TestData() + "/tokenizers/qwen3";
  const std::string messages = R"([{"role": "user", "content": "What is 2+2?"}])";
  CliResult r = Run("--model-dir " + Quote(dir) + " --json --ids", messages);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json out = Json::parse(r.out);
  const std::string prompt = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(out["prompt"], prompt);

  StatusOr<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::FromModelDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  StatusOr<std::vector<int32_t>> expected = tok->Encode(prompt, false);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(out["ids"].get<std::vector<int32_t>>(), *expected);
  EXPECT_EQ(out["ids"][0], 151644);  // <|im_start|> is one special token

  CliResult plain = Run("--model-dir " + Quote(dir) + " --ids", messages);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::string joined;
  for (size_t i = 0; i < expected->size(); ++i)
    joined += (i ? "," : "") + std::to_string((*expected)[i]);
  EXPECT_EQ(plain.out, joined + "\n");
}

}  // namespace
}  // namespace nightshift
