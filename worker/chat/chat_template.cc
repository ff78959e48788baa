#include "worker/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "worker/chat/ast.h"
#include "worker/chat/interpreter.h"
#include "worker/chat/lexer.h"
#include "worker/chat/parser.h"
#include "worker/chat/pystr.h"

namespace nightshift::chat {

StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view source) {
  NS_RETURN_IF_ERROR(ValidateUtf8(source).Prefixed("chat template"));
  NS_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  NS_ASSIGN_OR_RETURN(std::unique_ptr<ast::Program> program, Parse(std::move(tokens)));
  return ChatTemplate(std::shared_ptr<const ast::Program>(std::move(program)),
                      std::make_shared<const std::string>(source));
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    return InvalidArgument("chat template variables must be a JSON object");
  Dict context;
  for (const auto& [name, value] : variables.items()) {
    context.Set(Value::String(name), Value::FromJson(value));
  }
  return chat::Render(*program_, context);
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                           bool add_generation_prompt,
                                           const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) return InvalidArgument("messages must be a JSON array");
  if (!extra.is_null() && !extra.is_object()) {
    return InvalidArgument("extra chat template variables must be a JSON object");
  }
  nlohmann::ordered_json variables = extra.is_null() ? nlohmann::ordered_json::object() : extra;
  variables["messages"] = messages;
  variables["add_generation_prompt"] = add_generation_prompt;
  return Render(variables);
}

namespace {

namespace fs = std::filesystem;

constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                              "pad_token", "cls_token", "mask_token"};

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return DataLoss(path.string() + ": read failed");
  return text.str();
}

// The JSON object in `path`, or nullopt when the file does not exist.
StatusOr<std::optional<nlohmann::ordered_json>> ReadJsonIfPresent(const fs::path& path) {
  if (!fs::exists(path)) return std::optional<nlohmann::ordered_json>();
  NS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgument(path.string() + ": not a JSON object");
  }
  return std::optional<nlohmann::ordered_json>(std::move(json));
}

// A special token's text: a string, or an AddedToken object's "content".
StatusOr<std::optional<std::string>> TokenText(const nlohmann::ordered_json& token,
                                               const std::string& where) {
  if (token.is_null()) return std::optional<std::string>();
  if (token.is_string()) return std::optional<std::string>(token.get<std::string>());
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return std::optional<std::string>(token["content"].get<std::string>());
  }
  return InvalidArgument(where +
                         ": a special token must be a string or an object with \"content\"");
}

Status AddSpecialTokens(const nlohmann::ordered_json& config, const std::string& file,
                        nlohmann::ordered_json* tokens) {
  for (const char* name : kSpecialTokenNames) {
    if (!config.contains(name)) continue;
    NS_ASSIGN_OR_RETURN(std::optional<std::string> text,
                        TokenText(config[name], file + " " + name));
    if (text) {
      (*tokens)[name] = *text;
    } else {
      tokens->erase(name);
    }
  }
  if (config.contains("additional_special_tokens")) {
    const auto& list = config["additional_special_tokens"];
    if (!list.is_array())
      return InvalidArgument(file + ": additional_special_tokens must be a list");
    nlohmann::ordered_json texts = nlohmann::ordered_json::array();
    for (const auto& token : list) {
      NS_ASSIGN_OR_RETURN(std::optional<std::string> text,
                          TokenText(token, file + " additional_special_tokens"));
      if (text) texts.push_back(*text);
    }
    (*tokens)["additional_special_tokens"] = std::move(texts);
  }
  return Status::Ok();
}

struct TemplateSource {
  std::string text;
  std::string origin;
};

// `chat_template` of tokenizer_config.json: a string, or a list of named
// templates.
StatusOr<std::optional<TemplateSource>> FromTokenizerConfig(const nlohmann::ordered_json& config,
                                                            const std::string& name) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) {
    return std::optional<TemplateSource>();
  }
  const auto& field = config["chat_template"];
  if (field.is_string()) {
    if (!name.empty() && name != "default") return std::optional<TemplateSource>();
    return std::optional<TemplateSource>(
        TemplateSource{field.get<std::string>(), "tokenizer_config.json chat_template"});
  }
  if (!field.is_array()) {
    return InvalidArgument(
        "tokenizer_config.json: chat_template must be a string or a list of named templates");
  }
  std::string wanted = name.empty() ? "default" : name;
  std::string names;
  for (const auto& entry : field) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return InvalidArgument(
          "tokenizer_config.json: each named chat_template needs string \"name\" and \"template\"");
    }
    std::string entry_name = entry["name"].get<std::string>();
    if (entry_name == wanted) {
      return std::optional<TemplateSource>(
          TemplateSource{entry["template"].get<std::string>(),
                         "tokenizer_config.json chat_template '" + entry_name + "'"});
    }
    names += (names.empty() ? "'" : ", '") + entry_name + "'";
  }
  return NotFound("tokenizer_config.json has no chat template named '" + wanted + "' (it has " +
                  names + ")");
}

StatusOr<TemplateSource> FindTemplate(const fs::path& dir,
                                      const std::optional<nlohmann::ordered_json>& config,
                                      const std::string& name) {
  bool default_wanted = name.empty() || name == "default";
  if (default_wanted && fs::exists(dir / "chat_template.jinja")) {
    NS_ASSIGN_OR_RETURN(std::string text, ReadFile(dir / "chat_template.jinja"));
    return TemplateSource{std::move(text), "chat_template.jinja"};
  }
  if (!default_wanted) {
    fs::path file = dir / "additional_chat_templates" / (name + ".jinja");
    if (fs::exists(file)) {
      NS_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
      return TemplateSource{std::move(text), "additional_chat_templates/" + name + ".jinja"};
    }
  }
  if (config) {
    NS_ASSIGN_OR_RETURN(std::optional<TemplateSource> found, FromTokenizerConfig(*config, name));
    if (found) return std::move(*found);
  }
  if (default_wanted) {
    NS_ASSIGN_OR_RETURN(std::optional<nlohmann::ordered_json> processor,
                        ReadJsonIfPresent(dir / "chat_template.json"));
    if (processor && processor->contains("chat_template") &&
        (*processor)["chat_template"].is_string()) {
      return TemplateSource{(*processor)["chat_template"].get<std::string>(), "chat_template.json"};
    }
    return NotFound(
        dir.string() +
        ": no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json)");
  }
  return NotFound(dir.string() + ": no chat template named '" + name + "'");
}

}  // namespace

StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model_dir,
                                                  const std::string& name) {
  fs::path dir(model_dir);
  if (!fs::is_directory(dir)) return NotFound(model_dir + ": not a directory");
  NS_ASSIGN_OR_RETURN(std::optional<nlohmann::ordered_json> config,
                      ReadJsonIfPresent(dir / "tokenizer_config.json"));
  NS_ASSIGN_OR_RETURN(TemplateSource source, FindTemplate(dir, config, name));
  StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(source.text);
  if (!compiled.ok()) return compiled.status().Prefixed(source.origin);

  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  if (config) NS_RETURN_IF_ERROR(AddSpecialTokens(*config, "tokenizer_config.json", &tokens));
  NS_ASSIGN_OR_RETURN(std::optional<nlohmann::ordered_json> special_map,
                      ReadJsonIfPresent(dir / "special_tokens_map.json"));
  if (special_map)
    NS_RETURN_IF_ERROR(AddSpecialTokens(*special_map, "special_tokens_map.json", &tokens));
  return ModelChatTemplate{std::move(compiled).value(), std::move(source.origin),
                           std::move(tokens)};
}

}  // namespace nightshift::chat
