// Splits a chat template into tokens the way Jinja2's lexer does under the
// environment transformers renders chat templates with: trim_blocks and
// lstrip_blocks on, keep_trailing_newline off, default delimiters.
//
// Whitespace control is resolved here, so the parser sees final text:
//   - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/
//     `-#}` all whitespace after it;
//   - trim_blocks drops the first newline after `%}` and `#}` (not `}}`);
//   - lstrip_blocks drops spaces and tabs between the start of a line and a
//     `{%` or `{#` tag; `{%+` and `+%}` turn those two off for one tag;
//   - \r\n and \r become \n, and one trailing newline of the source is
//     dropped;
//   - comments vanish and `{% raw %}...{% endraw %}` becomes plain text.
// String literals are unescaped with Python's rules (\n, \t, \xhh, \uhhhh,
// octal, unknown escapes kept verbatim).
//
// Pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nightshift::chat {

enum class TokenType {
  kData,           // template text, already whitespace-controlled
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifier or keyword (`if`, `and`, `true`, ...)
  kString,         // string literal, unescaped
  kInteger,
  kFloat,
  kOperator,  // + - * / // % ** ~ == != < <= > >= = . : | , ; ( ) [ ] { }
  kEnd,       // end of the template
};

struct Token {
  TokenType type;
  std::string text;  // data, name, unescaped string, operator spelling, number spelling
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Tokenizes `source` (valid UTF-8). The last token is kEnd. Lexical errors
// (an unterminated comment, string or tag, an unexpected character,
// unbalanced brackets) are InvalidArgument starting with "line N: ".
StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace nightshift::chat
