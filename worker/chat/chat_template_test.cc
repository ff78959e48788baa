// The public API: compiling, the two Render forms, and loading a model
// directory's template and special tokens the way transformers does.
#include "worker/chat/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include "tests/testing/paths.h"

namespace nightshift::chat {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const char kChatml[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const Json kHello = Json::parse(R"([{"role": "user", "content": "Hi"}])");

// A fresh directory under the temp dir, removed at the end of the test.
class ModelDir {
 public:
  ModelDir() {
    path_ = fs::temp_directory_path() /
            ("chat_template_test_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ModelDir() { fs::remove_all(path_); }
  void Write(const std::string& name, const std::string& text) const {
    fs::create_directories((path_ / name).parent_path());
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  void WriteJson(const std::string& name, const Json& json) const { Write(name, json.dump(2)); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(ChatTemplate, CompileRejectsInvalidUtf8AndSyntax) {
  StatusOr<ChatTemplate> bad_utf8 = ChatTemplate::Compile("ok\xff");
  ASSERT_FALSE(bad_utf8.ok());
  EXPECT_EQ(bad_utf8.status().message(), "chat template: invalid UTF-8 at byte 2");
  StatusOr<ChatTemplate> syntax = ChatTemplate::Compile("{% for %}");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(syntax.status().message().rfind("line 1: ", 0), 0u);
}

TEST(ChatTemplate, RenderWithVariables) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile("{{ a }}-{{ b is defined }}-{{ c }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(Json{{"a", 1}, {"c", nullptr}}), "1-False-None");
  EXPECT_EQ(t->source(), "{{ a }}-{{ b is defined }}-{{ c }}");
  EXPECT_EQ(t->Render(Json::array()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, RenderMessages) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(std::string(kChatml) + "{{ bos_token }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(kHello, true, Json{{"bos_token", "<s>"}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<s>");
  EXPECT_EQ(*t->Render(kHello, false, nullptr), "<|im_start|>user\nHi<|im_end|>\n");
  // messages and add_generation_prompt win over same-named extras.
  EXPECT_EQ(
      *t->Render(kHello, false, Json{{"messages", Json::array()}, {"add_generation_prompt", true}}),
      "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(t->Render(Json::object(), true, nullptr).status().message(),
            "messages must be a JSON array");
  EXPECT_EQ(t->Render(kHello, true, Json::array()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, CopiesShareTheCompiledTemplate) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(kChatml);
  ASSERT_TRUE(t.ok());
  ChatTemplate copy = *t;
  EXPECT_EQ(*copy.Render(kHello, true, nullptr), *t->Render(kHello, true, nullptr));
}

TEST(LoadModelChatTemplate, FromTokenizerConfigWithSpecialTokens) {
  ModelDir dir;
  dir.WriteJson("tokenizer_config.json",
                {{"chat_template", kChatml},
                 {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}}},
                 {"eos_token", "</s>"},
                 {"pad_token", nullptr},
                 {"unk_token", "<unk>"},
                 {"additional_special_tokens", {"<a>", {{"content", "<b>"}}}}});
  StatusOr<ModelChatTemplate> model = LoadModelChatTemplate(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->origin, "tokenizer_config.json chat_template");
  EXPECT_EQ(
      model->special_tokens.dump(),
      R"({"bos_token":"<s>","eos_token":"</s>","unk_token":"<unk>","additional_special_tokens":["<a>","<b>"]})");
  EXPECT_EQ(*model->chat_template.Render(kHello, false, model->special_tokens),
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(LoadModelChatTemplate, SpecialTokensMapOverridesConfig) {
  ModelDir dir;
  dir.WriteJson("tokenizer_config.json",
                {{"chat_template", "x"}, {"bos_token", "<old>"}, {"eos_token", "</s>"}});
  dir.WriteJson("special_tokens_map.json", {{"bos_token", {{"content", "<new>"}}}});
  StatusOr<ModelChatTemplate> model = LoadModelChatTemplate(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->special_tokens["bos_token"], "<new>");
  EXPECT_EQ(model->special_tokens["eos_token"], "</s>");
}

TEST(LoadModelChatTemplate, ChatTemplateJinjaTakesPriority) {
  ModelDir dir;
  dir.WriteJson("tokenizer_config.json", {{"chat_template", "from config"}});
  dir.Write("chat_template.jinja", "from file {{ 1 + 1 }}\n");
  StatusOr<ModelChatTemplate> model = LoadModelChatTemplate(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->origin, "chat_template.jinja");
  EXPECT_EQ(*model->chat_template.Render(Json::object()), "from file 2");
}

TEST(LoadModelChatTemplate, NamedTemplates) {
  ModelDir dir;
  dir.WriteJson(
      "tokenizer_config.json",
      {{"chat_template",
        {{{"name", "default"}, {"template", "D"}}, {{"name", "tool_use"}, {"template", "T"}}}}});
  dir.Write("additional_chat_templates/rag.jinja", "R");
  EXPECT_EQ(*LoadModelChatTemplate(dir.path())->chat_template.Render(Json::object()), "D");
  StatusOr<ModelChatTemplate> tool = LoadModelChatTemplate(dir.path(), "tool_use");
  ASSERT_TRUE(tool.ok());
  EXPECT_EQ(tool->origin, "tokenizer_config.json chat_template 'tool_use'");
  EXPECT_EQ(*tool->chat_template.Render(Json::object()), "T");
  EXPECT_EQ(*LoadModelChatTemplate(dir.path(), "rag")->chat_template.Render(Json::object()), "R");
  StatusOr<ModelChatTemplate> missing = LoadModelChatTemplate(dir.path(), "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(
      missing.status().message(),
      "tokenizer_config.json has no chat template named 'nope' (it has 'default', 'tool_use')");
}

TEST(LoadModelChatTemplate, ProcessorChatTemplateJsonIsTheLastResort) {
  ModelDir dir;
  dir.WriteJson("chat_template.json", {{"chat_template", "P"}});
  StatusOr<ModelChatTemplate> model = LoadModelChatTemplate(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->origin, "chat_template.json");
  EXPECT_TRUE(model->special_tokens.empty());
}

TEST(LoadModelChatTemplate, Errors) {
  ModelDir empty;
  StatusOr<ModelChatTemplate> none = LoadModelChatTemplate(empty.path());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadModelChatTemplate(empty.path() + "/missing").status().code(),
            StatusCode::kNotFound);

  ModelDir malformed;
  malformed.Write("tokenizer_config.json", "{not json");
  EXPECT_EQ(LoadModelChatTemplate(malformed.path()).status().code(), StatusCode::kInvalidArgument);

  ModelDir bad_template;
  bad_template.WriteJson("tokenizer_config.json", {{"chat_template", "{% include 'x' %}"}});
  StatusOr<ModelChatTemplate> unsupported = LoadModelChatTemplate(bad_template.path());
  EXPECT_EQ(unsupported.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(unsupported.status().message(),
            "tokenizer_config.json chat_template: line 1: unsupported tag 'include'");

  ModelDir bad_token;
  bad_token.WriteJson("tokenizer_config.json", {{"chat_template", "x"}, {"eos_token", 5}});
  EXPECT_EQ(LoadModelChatTemplate(bad_token.path()).status().code(), StatusCode::kInvalidArgument);
}

TEST(LoadModelChatTemplate, RealQwen3TokenizerConfig) {
  std::string dir = testutil::DataPath("tokenizers/qwen3");
  StatusOr<ModelChatTemplate> model = LoadModelChatTemplate(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_FALSE(model->special_tokens.contains("bos_token"));  // null in the config
  EXPECT_EQ(model->special_tokens["eos_token"], "<|im_end|>");
  EXPECT_EQ(*model->chat_template.Render(kHello, true, model->special_tokens),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace nightshift::chat
