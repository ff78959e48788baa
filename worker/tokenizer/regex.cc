#include "worker/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

// Unicode White_Space as the body of a bracket class.
constexpr std::string_view kSpaceSet =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";
constexpr std::string_view kWordSet = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr std::string_view kHexSet = "0-9a-fA-F";

std::string PcreError(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// The set an escape letter stands for, or empty when it is not rewritten.
std::string_view EscapeSet(char letter) {
  switch (letter) {
    case 's':
    case 'S':
      return kSpaceSet;
    case 'w':
    case 'W':
      return kWordSet;
    case 'h':
    case 'H':
      return kHexSet;
    default:
      return {};
  }
}

// Copies an inline flag group "(?imx-imx:" or "(?imx)" with Ruby's `m`
// (dot-all) spelled as PCRE2's `s`. Returns the number of pattern bytes
// consumed, 0 when `rest` (starting at "(?") is not a flag group.
size_t TranslateFlagGroup(std::string_view rest, std::string* out) {
  size_t i = 2;
  while (i < rest.size() &&
         (rest[i] == 'i' || rest[i] == 'm' || rest[i] == 'x' || rest[i] == '-')) {
    ++i;
  }
  if (i == 2 || i >= rest.size() || (rest[i] != ':' && rest[i] != ')')) return 0;
  for (size_t k = 0; k <= i; ++k) out->push_back(rest[k] == 'm' ? 's' : rest[k]);
  return i + 1;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

StatusOr<std::string> TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size();) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char letter = pattern[i + 1];
      std::string_view set = EscapeSet(letter);
      bool negated = letter == 'S' || letter == 'W' || letter == 'H';
      if (set.empty()) {
        out.append(pattern.substr(i, 2));
      } else if (in_class && negated) {
        return Unimplemented("regex '" + std::string(pattern) + "': \\" + letter +
                             " inside a bracket class");
      } else if (in_class) {
        out.append(set);
      } else {
        out.append(negated ? "[^" : "[").append(set).append("]");
      }
      i += 2;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        size_t close = pattern.find(":]", i + 2);
        if (close == std::string_view::npos) {
          return InvalidArgument("regex '" + std::string(pattern) + "': unterminated [: class");
        }
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
      if (c == '[' || (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&')) {
        return Unimplemented("regex '" + std::string(pattern) +
                             "': nested bracket class or class intersection");
      }
      if (c == ']') in_class = false;
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < pattern.size() && pattern[i] == '^') out.push_back(pattern[i++]);
      if (i < pattern.size() && pattern[i] == ']') out.push_back(pattern[i++]);  // literal
      continue;
    }
    if (c == '(' && i + 1 < pattern.size() && pattern[i + 1] == '?') {
      size_t used = TranslateFlagGroup(pattern.substr(i), &out);
      if (used > 0) {
        i += used;
        continue;
      }
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  NS_ASSIGN_OR_RETURN(std::string translated, TranslateOnigurumaPattern(pattern));
  return CompileTranslated(translated, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE,
                           std::string(pattern));
}

StatusOr<Regex> Regex::Literal(std::string_view text) {
  return CompileTranslated(std::string(text), PCRE2_UTF | PCRE2_LITERAL, std::string(text));
}

StatusOr<Regex> Regex::CompileTranslated(const std::string& pcre_pattern, uint32_t options,
                                         std::string original) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern.data()), pcre_pattern.size(),
                             options, &error, &offset, nullptr);
  if (code->code == nullptr) {
    return InvalidArgument("regex '" + original + "': " + PcreError(error) + " at offset " +
                           std::to_string(offset));
  }
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(code), std::move(original));
}

Status Regex::FindAll(std::string_view text, std::vector<MatchRange>* out) const {
  if (text.empty()) return Status::Ok();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (match == nullptr) return ResourceExhausted("regex: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.empty() ? "" : text.data());
  size_t search_from = 0;
  bool have_previous = false;
  size_t previous_end = 0;
  while (search_from <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK,
                         match.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, text.size(), search_from,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return ResourceExhausted("regex '" + pattern_ + "': " + PcreError(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    size_t begin = ovector[0], end = ovector[1];
    if (begin == end && have_previous && previous_end == end) {
      size_t length = 1;
      if (search_from < text.size()) DecodeUtf8(text, search_from, &length);
      search_from += length;
      continue;
    }
    search_from = end;
    previous_end = end;
    have_previous = true;
    out->push_back({begin, end});
  }
  return Status::Ok();
}

}  // namespace nightshift::tokenizer
