#include "worker/chat/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "worker/chat/pystr.h"

namespace nightshift::chat {
namespace {

// \r\n and \r become \n; one trailing newline is dropped
// (keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int CountNewlines(std::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Appends the Python "backslashreplace" spelling of `cp` without its
// backslash (xe9, u2192, U0001f600): what Jinja's unescaping turns a
// backslash followed by a non-ASCII character into.
void AppendBackslashReplaced(char32_t cp, std::string* out) {
  char buf[16];
  const char* format = cp <= 0xFF ? "x%02x" : cp <= 0xFFFF ? "u%04x" : "U%08x";
  std::snprintf(buf, sizeof(buf), format, static_cast<unsigned>(cp));
  out->append(buf);
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeNewlines(source)) {}

  StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t tag = FindTagStart(pos_);
      if (tag == std::string::npos) {
        EmitData(src_.substr(pos_));
        break;
      }
      NS_RETURN_IF_ERROR(LexTag(tag));
    }
    tokens_.push_back(Token{TokenType::kEnd, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t at = src_.find('{', from); at != std::string::npos; at = src_.find('{', at + 1)) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#')) {
        return at;
      }
    }
    return std::string::npos;
  }

  Status Error(const std::string& message) const {
    return InvalidArgument("line " + std::to_string(line_) + ": " + message);
  }

  size_t SkipWhitespace(size_t at) const {
    while (at < src_.size()) {
      size_t next = at;
      if (!pystr::IsSpace(NextUtf8(src_, &next))) break;
      at = next;
    }
    return at;
  }

  bool At(size_t at, std::string_view text) const {
    return src_.compare(at, text.size(), text) == 0;
  }

  // Applies a tag's whitespace control to the text before it: `sign` '-'
  // strips all trailing whitespace; otherwise, with `lstrip` (block and
  // comment tags), spaces and tabs between the line start and the tag go
  // unless `sign` is '+'.
  void StripBeforeTag(std::string* text, char sign, bool lstrip) const {
    if (sign == '-') {
      *text = pystr::Strip(*text, std::nullopt, pystr::StripSide::kRight);
    } else if (sign != '+' && lstrip) {
      size_t line_start = text->rfind('\n');
      line_start = line_start == std::string::npos ? 0 : line_start + 1;
      bool only_blanks = text->find_first_not_of(" \t", line_start) == std::string::npos;
      if ((line_start > 0 || line_starting_) && only_blanks) text->resize(line_start);
    }
  }

  // Emits the text before a tag (see StripBeforeTag); lines count the
  // stripped newlines too.
  void EmitTextBeforeTag(std::string text, char sign, bool lstrip) {
    int newlines = CountNewlines(text);
    StripBeforeTag(&text, sign, lstrip);
    if (!text.empty()) tokens_.push_back(Token{TokenType::kData, std::move(text), 0, 0, line_});
    line_ += newlines;
  }

  void EmitData(std::string text) { EmitTextBeforeTag(std::move(text), '+', false); }

  // Moves past a tag's end at `end` (where the end delimiter's match ends),
  // counting lines and remembering whether it ended a line.
  void FinishTag(size_t from, size_t end) {
    line_ += CountNewlines(std::string_view(src_).substr(from, end - from));
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  // After `%}`-like delimiters of length `length` at `at`: `-` strips the
  // following whitespace, no sign drops one newline (trim_blocks), `+` keeps
  // everything.
  size_t EndOfBlockDelimiter(size_t at, size_t length, char sign) const {
    size_t end = at + length;
    if (sign == '-') return SkipWhitespace(end);
    if (sign == 0 && end < src_.size() && src_[end] == '\n') return end + 1;
    return end;
  }

  Status LexTag(size_t tag) {
    char kind = src_[tag + 1];
    size_t p = tag + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    std::string text = src_.substr(pos_, tag - pos_);
    std::optional<size_t> raw_body = kind == '%' ? MatchRawBegin(p) : std::nullopt;
    EmitTextBeforeTag(std::move(text), sign, kind != '{');
    line_starting_ = false;
    if (kind == '#') return LexComment(p);
    if (raw_body) return LexRaw(p, *raw_body);
    return LexExpressionTag(kind, p);
  }

  Status LexComment(size_t p) {
    size_t close = src_.find("#}", p);
    if (close == std::string::npos) return Error("Missing end of comment tag");
    char sign =
        close > p && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    FinishTag(p, EndOfBlockDelimiter(close, 2, sign));
    return Status::Ok();
  }

  // Matches `\s*raw\s*(-%}\s*|%})` at `p` (just after `{%` and its sign);
  // returns where the raw text starts.
  std::optional<size_t> MatchRawBegin(size_t p) const {
    size_t at = SkipWhitespace(p);
    if (!At(at, "raw")) return std::nullopt;
    at = SkipWhitespace(at + 3);
    if (At(at, "-%}")) return SkipWhitespace(at + 3);
    if (At(at, "%}")) return at + 2;
    return std::nullopt;
  }

  // Matches `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)` at `at`: the sign and
  // where the match ends.
  std::optional<std::pair<char, size_t>> MatchRawEnd(size_t at) const {
    if (!At(at, "{%")) return std::nullopt;
    at += 2;
    char sign = 0;
    if (at < src_.size() && (src_[at] == '-' || src_[at] == '+')) sign = src_[at++];
    at = SkipWhitespace(at);
    if (!At(at, "endraw")) return std::nullopt;
    at = SkipWhitespace(at + 6);
    if (At(at, "+%}")) return std::make_pair(sign, at + 3);
    if (At(at, "-%}")) return std::make_pair(sign, SkipWhitespace(at + 3));
    if (At(at, "%}")) return std::make_pair(sign, EndOfBlockDelimiter(at, 2, 0));
    return std::nullopt;
  }

  Status LexRaw(size_t tag_body, size_t raw_body) {
    FinishTag(tag_body, raw_body);
    for (size_t at = src_.find("{%", raw_body); at != std::string::npos;
         at = src_.find("{%", at + 1)) {
      auto end = MatchRawEnd(at);
      if (!end) continue;
      EmitTextBeforeTag(src_.substr(raw_body, at - raw_body), end->first, true);
      FinishTag(at, end->second);
      return Status::Ok();
    }
    return Error("Missing end of raw directive");
  }

  // The end delimiter of a `{%` (kind '%') or `{{` (kind '{') tag at `p`:
  // where the match ends, or nullopt.
  std::optional<size_t> MatchTagEnd(char kind, size_t p) const {
    if (kind == '%') {
      if (At(p, "+%}")) return EndOfBlockDelimiter(p + 1, 2, '+');
      if (At(p, "-%}")) return EndOfBlockDelimiter(p + 1, 2, '-');
      if (At(p, "%}")) return EndOfBlockDelimiter(p, 2, 0);
      return std::nullopt;
    }
    if (At(p, "-}}")) return SkipWhitespace(p + 3);
    if (At(p, "}}")) return p + 2;
    return std::nullopt;
  }

  Status LexExpressionTag(char kind, size_t p) {
    bool block = kind == '%';
    tokens_.push_back(Token{block ? TokenType::kBlockBegin : TokenType::kVariableBegin,
                            block ? "{%" : "{{", 0, 0, line_});
    balance_.clear();
    while (true) {
      if (p >= src_.size()) {
        return Error(std::string("unexpected end of template, expected '") +
                     (block ? "end of statement block" : "end of print statement") + "'.");
      }
      if (balance_.empty()) {
        if (auto end = MatchTagEnd(kind, p)) {
          tokens_.push_back(Token{block ? TokenType::kBlockEnd : TokenType::kVariableEnd,
                                  block ? "%}" : "}}", 0, 0, line_});
          FinishTag(p, *end);
          return Status::Ok();
        }
      }
      size_t next = p;
      if (pystr::IsSpace(NextUtf8(src_, &next))) {
        size_t end = SkipWhitespace(p);
        line_ += CountNewlines(std::string_view(src_).substr(p, end - p));
        p = end;
        continue;
      }
      NS_ASSIGN_OR_RETURN(p, LexToken(p));
    }
  }

  // One token inside a tag at `p` (not whitespace); returns where it ends.
  StatusOr<size_t> LexToken(size_t p) {
    if (size_t end = MatchFloat(p); end != 0) {
      std::string spelling = WithoutUnderscores(p, end);
      tokens_.push_back(
          Token{TokenType::kFloat, spelling, 0, std::strtod(spelling.c_str(), nullptr), line_});
      return end;
    }
    if (size_t end = MatchInteger(p); end != 0) return EmitInteger(p, end);
    if (size_t end = MatchName(p); end != 0) {
      tokens_.push_back(Token{TokenType::kName, src_.substr(p, end - p), 0, 0, line_});
      return end;
    }
    if (src_[p] == '\'' || src_[p] == '"') {
      if (size_t end = MatchString(p); end != 0) return EmitString(p, end);
    }
    return LexOperator(p);
  }

  // `(\d+_)*\d+` at `p`: end, or `p` when there is no digit.
  size_t MatchDigits(size_t p) const {
    size_t at = p;
    while (at < src_.size() && IsDigit(src_[at])) {
      while (at < src_.size() && IsDigit(src_[at])) ++at;
      if (at + 1 < src_.size() && src_[at] == '_' && IsDigit(src_[at + 1])) ++at;
    }
    return at;
  }

  // Jinja's float: digits, then a fraction and/or an exponent; not right
  // after a '.'. Returns the end, or 0.
  size_t MatchFloat(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return 0;
    size_t digits = MatchDigits(p);
    if (digits == p) return 0;
    size_t fraction = 0;
    if (digits < src_.size() && src_[digits] == '.') {
      size_t end = MatchDigits(digits + 1);
      if (end > digits + 1) fraction = end;
    }
    size_t at = fraction ? fraction : digits;
    if (at < src_.size() && (src_[at] == 'e' || src_[at] == 'E')) {
      size_t exp = at + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
      size_t end = MatchDigits(exp);
      if (end > exp) return end;
    }
    return fraction;
  }

  // Jinja's integer: 0b/0o/0x prefixed, [1-9](_?\d)*, or 0(_?0)*.
  size_t MatchInteger(size_t p) const {
    if (!IsDigit(src_[p])) return 0;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char base = static_cast<char>(src_[p + 1] | 0x20);
      auto in_base = [base](char c) {
        if (base == 'b') return c == '0' || c == '1';
        if (base == 'o') return c >= '0' && c <= '7';
        return IsHexDigit(c);
      };
      if (base == 'b' || base == 'o' || base == 'x') {
        size_t at = p + 2;
        while (at < src_.size()) {
          size_t next = at + (src_[at] == '_' ? 1 : 0);
          if (next >= src_.size() || !in_base(src_[next])) break;
          at = next + 1;
        }
        if (at > p + 2) return at;
      }
    }
    char first = src_[p];
    size_t at = p + 1;
    while (at < src_.size()) {
      size_t next = at + (src_[at] == '_' ? 1 : 0);
      if (next >= src_.size() || !(first == '0' ? src_[next] == '0' : IsDigit(src_[next]))) break;
      at = next + 1;
    }
    return at;
  }

  std::string WithoutUnderscores(size_t p, size_t end) const {
    std::string spelling = src_.substr(p, end - p);
    spelling.erase(std::remove(spelling.begin(), spelling.end(), '_'), spelling.end());
    return spelling;
  }

  StatusOr<size_t> EmitInteger(size_t p, size_t end) {
    std::string spelling = WithoutUnderscores(p, end);
    int base = 10;
    std::string digits = spelling;
    if (spelling.size() > 1 && spelling[0] == '0' && !IsDigit(spelling[1])) {
      char prefix = static_cast<char>(spelling[1] | 0x20);
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
      digits = spelling.substr(2);
    }
    errno = 0;
    char* stop = nullptr;
    long long value = std::strtoll(digits.c_str(), &stop, base);
    if (errno == ERANGE) return Error("integer literal " + spelling + " is too large");
    tokens_.push_back(Token{TokenType::kInteger, spelling, value, 0, line_});
    return end;
  }

  size_t MatchName(size_t p) const {
    size_t at = p;
    bool first = true;
    while (at < src_.size()) {
      size_t next = at;
      if (!pystr::IsIdentifierChar(NextUtf8(src_, &next), first)) break;
      at = next;
      first = false;
    }
    return at == p ? 0 : at;
  }

  // A quoted string at `p` (a backslash escapes any character): its end, or
  // 0 when it is not terminated.
  size_t MatchString(size_t p) const {
    char quote = src_[p];
    for (size_t at = p + 1; at < src_.size(); ++at) {
      if (src_[at] == '\\') {
        ++at;
      } else if (src_[at] == quote) {
        return at + 1;
      }
    }
    return 0;
  }

  StatusOr<size_t> EmitString(size_t p, size_t end) {
    NS_ASSIGN_OR_RETURN(std::string value,
                        Unescape(std::string_view(src_).substr(p + 1, end - p - 2)));
    tokens_.push_back(Token{TokenType::kString, std::move(value), 0, 0, line_});
    line_ += CountNewlines(std::string_view(src_).substr(p, end - p));
    return end;
  }

  // Reads exactly `n` hex digits at body[*at] into *cp.
  static bool ReadHex(std::string_view body, size_t* at, int n, char32_t* cp) {
    if (*at + n > body.size()) return false;
    *cp = 0;
    for (int i = 0; i < n; ++i) {
      char c = body[*at + i];
      if (!IsHexDigit(c)) return false;
      *cp = *cp * 16 + static_cast<char32_t>(IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    *at += n;
    return true;
  }

  // Python's "unicode-escape" decoding of a string literal's body.
  StatusOr<std::string> Unescape(std::string_view body) const {
    std::string out;
    out.reserve(body.size());
    size_t at = 0;
    while (at < body.size()) {
      if (body[at] != '\\' || at + 1 >= body.size()) {
        out.push_back(body[at++]);
        continue;
      }
      char c = body[at + 1];
      at += 2;
      switch (c) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          char32_t cp = 0;
          int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          if (!ReadHex(body, &at, n, &cp)) {
            return Error(std::string("truncated \\") + c + std::string(n, 'X') + " escape");
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return Error("string literal escape names an invalid code point");
          }
          AppendUtf8(cp, &out);
          break;
        }
        case 'N':
          return Error("unsupported \\N{...} escape in a string literal");
        default:
          if (c >= '0' && c <= '7') {
            char32_t cp = static_cast<char32_t>(c - '0');
            for (int i = 0; i < 2 && at < body.size() && body[at] >= '0' && body[at] <= '7'; ++i) {
              cp = cp * 8 + static_cast<char32_t>(body[at++] - '0');
            }
            AppendUtf8(cp, &out);
          } else if (static_cast<unsigned char>(c) >= 0x80) {
            size_t cp_at = at - 1;
            char32_t cp = NextUtf8(body, &cp_at);
            at = cp_at;
            out.push_back('\\');
            AppendBackslashReplaced(cp, &out);
          } else {
            out.push_back('\\');
            out.push_back(c);
          }
      }
    }
    return out;
  }

  StatusOr<size_t> LexOperator(size_t p) {
    static const char* const kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoChar) {
      if (At(p, op)) {
        tokens_.push_back(Token{TokenType::kOperator, op, 0, 0, line_});
        return p + 2;
      }
    }
    char c = src_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t end = p;
      NextUtf8(src_, &end);
      return Error("unexpected char '" + src_.substr(p, end - p) + "'");
    }
    NS_RETURN_IF_ERROR(Balance(c));
    tokens_.push_back(Token{TokenType::kOperator, std::string(1, c), 0, 0, line_});
    return p + 1;
  }

  Status Balance(char c) {
    if (c == '(' || c == '[' || c == '{') {
      balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance_.empty()) return Error(std::string("unexpected '") + c + "'");
      char expected = balance_.back();
      balance_.pop_back();
      if (expected != c) {
        return Error(std::string("unexpected '") + c + "', expected '" + expected + "'");
      }
    }
    return Status::Ok();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the previous match ended with a newline
  std::vector<char> balance_;  // closers expected inside the current tag
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

}  // namespace nightshift::chat
