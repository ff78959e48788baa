#include "worker/chat/lexer.h"

#include <gtest/gtest.h>

namespace nightshift::chat {
namespace {

std::vector<Token> Lex(const std::string& source) {
  StatusOr<std::vector<Token>> tokens = Tokenize(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status().ToString();
  return tokens.ok() ? *tokens : std::vector<Token>{};
}

// The text of all data tokens, concatenated: what whitespace control left.
std::string Data(const std::string& source) {
  std::string text;
  for (const Token& t : Lex(source)) {
    if (t.type == TokenType::kData) text += t.text;
  }
  return text;
}

// "type:text" of every token inside tags, space-separated.
std::string Inside(const std::string& source) {
  std::string out;
  for (const Token& t : Lex(source)) {
    const char* kind = nullptr;
    switch (t.type) {
      case TokenType::kName:
        kind = "name";
        break;
      case TokenType::kString:
        kind = "str";
        break;
      case TokenType::kInteger:
        kind = "int";
        break;
      case TokenType::kFloat:
        kind = "float";
        break;
      case TokenType::kOperator:
        kind = "op";
        break;
      default:
        continue;
    }
    out += (out.empty() ? "" : " ") + std::string(kind) + ":" + t.text;
  }
  return out;
}

TEST(Lexer, SplitsTextAndTags) {
  std::vector<Token> tokens = Lex("a{{ x }}b{% if y %}c{# note #}d");
  std::vector<TokenType> types;
  for (const Token& t : tokens) types.push_back(t.type);
  EXPECT_EQ(types, (std::vector<TokenType>{TokenType::kData, TokenType::kVariableBegin,
                                           TokenType::kName, TokenType::kVariableEnd,
                                           TokenType::kData, TokenType::kBlockBegin,
                                           TokenType::kName, TokenType::kName, TokenType::kBlockEnd,
                                           TokenType::kData, TokenType::kData, TokenType::kEnd}));
}

TEST(Lexer, TokensInsideTags) {
  EXPECT_EQ(Inside("{{ a.b[0] | f(1, x=2.5) ~ 'q' }}"),
            "name:a op:. name:b op:[ int:0 op:] op:| name:f op:( int:1 op:, name:x op:= float:2.5 "
            "op:) op:~ str:q");
  EXPECT_EQ(Inside("{{ a // b ** c != d <= e >= f == g }}"),
            "name:a op:// name:b op:** name:c op:!= name:d op:<= name:e op:>= name:f op:== name:g");
  EXPECT_EQ(Inside("{{ 1_000 0x1F 0o17 0b101 1e3 2.5E-2 }}"),
            "int:1000 int:0x1F int:0o17 int:0b101 float:1e3 float:2.5E-2");
  std::vector<Token> ints = Lex("{{ 0x1F 0o17 0b101 }}");
  EXPECT_EQ(ints[1].int_value, 31);
  EXPECT_EQ(ints[2].int_value, 15);
  EXPECT_EQ(ints[3].int_value, 5);
  EXPECT_EQ(Inside("{{ m.0 }}"), "name:m op:. int:0");  // not a float
  EXPECT_EQ(Inside("{{ naïve_名 }}"), "name:naïve_名");
}

TEST(Lexer, UnescapesStringsLikePython) {
  EXPECT_EQ(Inside(R"({{ 'a\nb\t\\\'"' }})"), "str:a\nb\t\\'\"");
  EXPECT_EQ(Inside(R"({{ "\x41\u00e9\U0001F600\101\d" }})"), "str:Aé😀A\\d");
  EXPECT_EQ(Inside("{{ 'multi\nline' }}"), "str:multi\nline");
  EXPECT_EQ(Inside(R"({{ '\é' }})"), "str:\\xe9");  // Python's backslashreplace round trip
  EXPECT_FALSE(Tokenize(R"({{ '\x4' }})").ok());
  EXPECT_FALSE(Tokenize(R"({{ '\ud800' }})").ok());
}

TEST(Lexer, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(Data("{% if x %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(Data("    {% if x %}\nA"), "A");
  EXPECT_EQ(Data("text  {% if x %}A"), "text  A");  // not alone on its line
  EXPECT_EQ(Data("\t {# c #}\nA"), "A");            // comments too
  EXPECT_EQ(Data("  {{ x }}\n"), "  ");             // not variables; trailing newline dropped
  EXPECT_EQ(Data("{{ x }}\nA"), "\nA");
  EXPECT_EQ(Data("{% if x %}\n\nA"), "\nA");  // only one newline
  EXPECT_EQ(Data("  {%+ if x %}A"), "  A");
  EXPECT_EQ(Data("{% if x +%}\nA"), "\nA");
}

TEST(Lexer, DashStripsAllWhitespace) {
  EXPECT_EQ(Data("a \n\t {%- if x -%} \n b"), "ab");
  EXPECT_EQ(Data("a \n {{- x -}} \n b"), "ab");
  EXPECT_EQ(Data("a \n {#- c -#} \n b"), "ab");
  EXPECT_EQ(Data("a\u00a0\u3000{%- if x %}"), "a");  // Python's whitespace, not just ASCII
}

TEST(Lexer, NewlinesAndRaw) {
  EXPECT_EQ(Data("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(Data("a\n\n"), "a\n");
  EXPECT_EQ(Data("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(Data("{%- raw -%}  x  {%- endraw -%}"), "x");
  EXPECT_EQ(Data("{% raw %}\nx\n  {% endraw %}\ny"), "\nx\ny");
}

TEST(Lexer, TracksLines) {
  std::vector<Token> tokens = Lex("a\nb\n{{ x\n }}\n{% if y %}");
  int x_line = 0, if_line = 0;
  for (const Token& t : tokens) {
    if (t.text == "x") x_line = t.line;
    if (t.text == "if") if_line = t.line;
  }
  EXPECT_EQ(x_line, 3);
  EXPECT_EQ(if_line, 5);
}

TEST(Lexer, BracesInsideTagsDoNotEndThem) {
  EXPECT_EQ(Inside("{{ {'a': {'b': 1}} }}"), "op:{ str:a op:: op:{ str:b op:: int:1 op:} op:}");
}

TEST(Lexer, ReportsErrors) {
  EXPECT_EQ(Tokenize("x\n{# open").status().message(), "line 2: Missing end of comment tag");
  EXPECT_EQ(Tokenize("{% raw %}x").status().message(), "line 1: Missing end of raw directive");
  EXPECT_EQ(Tokenize("{{ x").status().message(),
            "line 1: unexpected end of template, expected 'end of print statement'.");
  EXPECT_EQ(Tokenize("{{ a ! b }}").status().message(), "line 1: unexpected char '!'");
  EXPECT_EQ(Tokenize("{{ ) }}").status().message(), "line 1: unexpected ')'");
  EXPECT_EQ(Tokenize("{{ [1) }}").status().message(), "line 1: unexpected ')', expected ']'");
  EXPECT_EQ(Tokenize("{{ 99999999999999999999 }}").status().message(),
            "line 1: integer literal 99999999999999999999 is too large");
}

}  // namespace
}  // namespace nightshift::chat
