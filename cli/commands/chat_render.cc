// `nightshift chat-render`: render a conversation into a prompt with a
// checkpoint's own chat template, as transformers'
// `tokenizer.apply_chat_template(messages, tokenize=False)` does.
//
//   nightshift chat-render --model-dir DIR [--no-generation-prompt] [--json] [--ids]
//                          [--template NAME] < messages.json
//
// Standard input holds a JSON list of {"role", "content"} messages, or an
// object {"messages": [...], <more template variables>} (tools, documents,
// enable_thinking, ...). Plain output is the prompt byte for byte, without a
// newline added; --ids prints the prompt's token ids comma-separated instead
// (encoded without adding special tokens, as apply_chat_template(tokenize=True)
// does); --json prints {"prompt": "..."} plus "ids" with --ids. A template
// error (e.g. its own raise_exception) exits 1 with the template's message.
#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/command_line.h"
#include "worker/chat/chat_template.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift::cli {
namespace {

using Json = nlohmann::ordered_json;

struct ChatRenderFlags {
  std::string model_dir;
  std::string template_name;
  bool generation_prompt = true;
  bool json = false;
  bool ids = false;
};

// The conversation on standard input: messages and any other variables.
struct Conversation {
  Json messages;
  Json variables = Json::object();
};

StatusOr<Conversation> ReadConversation(std::istream& in) {
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json input = Json::parse(text, nullptr, false);
  if (input.is_discarded()) return InvalidArgument("standard input is not valid JSON");
  Conversation conversation;
  if (input.is_array()) {
    conversation.messages = std::move(input);
    return conversation;
  }
  if (!input.is_object() || !input.contains("messages") || !input["messages"].is_array()) {
    return InvalidArgument(
        "standard input must be a JSON list of messages or an object with a \"messages\" list");
  }
  conversation.messages = input["messages"];
  input.erase("messages");
  input.erase("add_generation_prompt");  // the flag decides
  conversation.variables = std::move(input);
  return conversation;
}

// Work failures exit 1 whatever their code (a model's broken template is not
// a usage error).
int FailWork(const Status& status) {
  std::cerr << "nightshift chat-render: " << status.message() << "\n";
  return kExitFailure;
}

int RunChatRender(int argc, char** argv) {
  ChatRenderFlags f;
  CommandLine flags(
      "nightshift chat-render --model-dir DIR [--no-generation-prompt] [--json] [--ids] "
      "[--template NAME] < messages.json",
      "Renders the conversation on standard input (a JSON list of {\"role\", \"content\"}\n"
      "messages, or {\"messages\": [...], \"tools\": [...], ...} with more template variables)\n"
      "with the model's chat template, exactly as transformers' apply_chat_template does.\n"
      "Prints the prompt as is (no newline added), or with --ids its token ids.");
  flags.String("model-dir", &f.model_dir,
               "checkpoint directory (chat_template.jinja or tokenizer_config.json)", "DIR");
  flags.Bool("generation-prompt", &f.generation_prompt,
             "end with the assistant's turn header (add_generation_prompt; on by default, "
             "--no-generation-prompt turns it off)");
  flags.Bool("json", &f.json, "print {\"prompt\": \"...\"} (and \"ids\" with --ids)");
  flags.Bool("ids", &f.ids,
             "encode the prompt with the model's tokenizer (no special tokens added)");
  flags.String("template", &f.template_name,
               "a named template of tokenizer_config.json (default: \"default\")", "NAME");
  int parsed = ParseOrExit(flags, argc, argv);
  if (parsed >= 0) return parsed;
  if (!flags.Seen("model-dir"))
    return Fail("chat-render", InvalidArgument("--model-dir is required"));
  if (!flags.positional().empty()) {
    return Fail("chat-render", InvalidArgument("unexpected argument '" + flags.positional()[0] +
                                               "' (the messages come on standard input)"));
  }

  StatusOr<Conversation> conversation = ReadConversation(std::cin);
  if (!conversation.ok()) return Fail("chat-render", conversation.status());
  StatusOr<chat::ModelChatTemplate> model =
      chat::LoadModelChatTemplate(f.model_dir, f.template_name);
  if (!model.ok()) return FailWork(model.status());
  Json variables = model->special_tokens;
  for (const auto& [key, value] : conversation->variables.items()) variables[key] = value;
  StatusOr<std::string> prompt =
      model->chat_template.Render(conversation->messages, f.generation_prompt, variables);
  if (!prompt.ok()) return FailWork(prompt.status());

  std::vector<int32_t> ids;
  if (f.ids) {
    StatusOr<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::FromModelDir(f.model_dir);
    if (!tok.ok()) return FailWork(tok.status());
    StatusOr<std::vector<int32_t>> encoded = tok->Encode(*prompt, false);
    if (!encoded.ok()) return FailWork(encoded.status());
    ids = std::move(encoded).value();
  }

  if (f.json) {
    Json out = {{"prompt", *prompt}};
    if (f.ids) out["ids"] = ids;
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  } else if (f.ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i > 0 ? "," : "") << ids[i];
    std::cout << "\n";
  } else {
    std::cout << *prompt;
  }
  std::cout.flush();
  return std::cout ? kExitOk : FailWork(DataLoss("writing standard output failed"));
}

}  // namespace

NS_REGISTER_COMMAND("chat-render",
                    "render chat messages into a prompt with a model's chat template",
                    RunChatRender);

}  // namespace nightshift::cli
