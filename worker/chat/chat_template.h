// HuggingFace chat templates in C++: renders a conversation into a prompt
// with the model's own Jinja `chat_template`, exactly as transformers'
// `tokenizer.apply_chat_template(messages, tokenize=False, ...)` does.
//
// The template runs in a small Jinja interpreter (lexer.h, parser.h,
// interpreter.h) configured like transformers' environment: trim_blocks,
// lstrip_blocks, the loopcontrols extension (`break`/`continue`), the
// `generation` tag, `raise_exception(msg)`, `strftime_now(fmt)`, and a
// `tojson` that is Python's json.dumps(ensure_ascii=False) (", " and ": "
// separators, key order kept, non-ASCII kept). Values behave like the Python
// objects Jinja sees (see value.h): JSON objects keep their key order,
// missing keys are Jinja's Undefined.
//
// Supported: the Jinja subset real chat templates use — `if/elif/else`,
// `for` (with `loop.*`, `else`, tuple unpacking, an `if` filter,
// `recursive`), `set` (incl. `namespace()` attributes and block set),
// `macro`/`call`, `filter` and `with` blocks, whitespace control, the full
// expression grammar (arithmetic, comparisons, `in`, `~`, conditional
// expressions, subscripts, slices, attribute access), Python's str/dict/list
// methods templates call, and Jinja's filters and tests. Anything outside
// (an `include`, a filter such as `wordwrap`, `str.format`, printf-style
// `%`) is an error naming it, never a guessed rendering.
//
// Thread-safety: a ChatTemplate is immutable; Render may be called from any
// number of threads at once. Copies share the compiled template.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nightshift::chat {

namespace ast {
struct Program;
}

class ChatTemplate {
 public:
  // Compiles a template. Errors (messages start with "line N: "):
  // InvalidArgument for invalid UTF-8 and syntax errors (an unknown tag,
  // filter or test, as Jinja reports them); Unimplemented naming a construct
  // this interpreter does not support.
  static StatusOr<ChatTemplate> Compile(std::string_view source);

  // Renders with the members of `variables` (a JSON object) as the
  // template's top-level variables; a name it does not hold is Undefined,
  // not none. Errors: InvalidArgument when `variables` is not an object;
  // InvalidArgument with exactly the message when the template calls
  // raise_exception(message); InvalidArgument "line N: ..." for other
  // failures at render time (using an undefined value, a Python type
  // error); Unimplemented "line N: unsupported ..." for a Python method or
  // Jinja global this interpreter does not implement.
  StatusOr<std::string> Render(const nlohmann::ordered_json& variables) const;

  // apply_chat_template: `messages` (a JSON array of message objects) and
  // `add_generation_prompt` as the variables of those names, plus the members
  // of `extra` (null or an object: bos_token, eos_token, tools, documents,
  // enable_thinking, ...). `messages` not being an array, or `extra` being
  // neither null nor an object, is InvalidArgument; otherwise as Render above.
  StatusOr<std::string> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& extra) const;

  // The template text it was compiled from.
  const std::string& source() const { return *source_; }

 private:
  ChatTemplate(std::shared_ptr<const ast::Program> program,
               std::shared_ptr<const std::string> source)
      : program_(std::move(program)), source_(std::move(source)) {}

  std::shared_ptr<const ast::Program> program_;
  std::shared_ptr<const std::string> source_;
};

// What a model directory says about rendering chats.
struct ModelChatTemplate {
  ChatTemplate chat_template;
  // Where the template came from, e.g. "chat_template.jinja" or
  // "tokenizer_config.json chat_template 'tool_use'".
  std::string origin;
  // The special-token variables transformers passes to every render
  // (bos_token, eos_token, unk_token, pad_token, sep_token, cls_token,
  // mask_token as strings; additional_special_tokens as a list); tokens that
  // are null or absent are left out (Undefined in the template).
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// Loads the chat template of a HuggingFace model directory, as transformers
// does: `chat_template.jinja` when present, else `tokenizer_config.json`'s
// `chat_template` (a string, or a list of {"name", "template"} of which
// `name` is chosen, "default" when `name` is empty), else
// `chat_template.json` (processors). A non-default `name` may also be
// `additional_chat_templates/<name>.jinja`. Special tokens come from
// `tokenizer_config.json`, overridden by `special_tokens_map.json`; a
// token given as an object uses its "content".
// Errors: NotFound when the directory has no template (or no template
// `name`, listing the names there are); InvalidArgument for malformed JSON
// or fields; Compile's errors prefixed with the origin.
StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model_dir,
                                                  const std::string& name = "");

}  // namespace nightshift::chat
