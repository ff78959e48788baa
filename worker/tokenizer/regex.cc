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

namespace {

// Walks an Oniguruma pattern once, copying it to PCRE2 syntax.
class PatternTranslator {
 public:
  explicit PatternTranslator(std::string_view pattern) : pattern_(pattern) {
    out_.reserve(pattern.size() + 16);
  }

  StatusOr<std::string> Run() {
    while (i_ < pattern_.size()) {
      char c = pattern_[i_];
      if (c == '\\' && i_ + 1 < pattern_.size()) {
        NS_RETURN_IF_ERROR(Escape());
      } else if (depth_ > 0) {
        NS_RETURN_IF_ERROR(ClassChar());
      } else if (c == '[') {
        OpenClass(/*nested=*/false);
      } else if (c == '(' && At(i_ + 1) == '?' && FlagGroup()) {
        // copied with Ruby's flags spelled for PCRE2
      } else {
        out_.push_back(c);
        ++i_;
      }
    }
    return out_;
  }

 private:
  char At(size_t i) const { return i < pattern_.size() ? pattern_[i] : '\0'; }
  // Copies an inline flag group at i_, if there is one.
  bool FlagGroup() {
    size_t used = TranslateFlagGroup(pattern_.substr(i_), &out_);
    i_ += used;
    return used > 0;
  }
  Status Refuse(const std::string& what) const {
    return Unimplemented("regex '" + std::string(pattern_) + "': " + what);
  }

  // An escape: the class shorthands and word boundaries get Oniguruma's
  // meaning, \uHHHH becomes \x{HHHH}, everything else is copied.
  Status Escape() {
    char letter = pattern_[i_ + 1];
    if (letter == 'u' && i_ + 6 <= pattern_.size()) {
      out_.append("\\x{").append(pattern_.substr(i_ + 2, 4)).append("}");
      i_ += 6;
      return Status::Ok();
    }
    if ((letter == 'b' || letter == 'B') && depth_ == 0) {
      WordBoundary(letter == 'B');
      i_ += 2;
      return Status::Ok();
    }
    std::string_view set = EscapeSet(letter);
    bool negated = letter == 'S' || letter == 'W' || letter == 'H';
    if (set.empty()) {
      out_.append(pattern_.substr(i_, 2));
    } else if (depth_ > 0 && negated) {
      return Refuse(std::string("\\") + letter + " inside a bracket class");
    } else if (depth_ > 0) {
      out_.append(set);
    } else {
      out_.append(negated ? "[^" : "[").append(set).append("]");
    }
    i_ += 2;
    return Status::Ok();
  }

  // \b (\B): a word character on exactly one side (on both or neither),
  // with Oniguruma's word characters.
  void WordBoundary(bool negated) {
    const std::string word = "[" + std::string(kWordSet) + "]";
    const std::string before = "(?<=" + word + ")", not_before = "(?<!" + word + ")";
    const std::string after = "(?=" + word + ")", not_after = "(?!" + word + ")";
    if (negated) {
      out_.append("(?:" + before + after + "|" + not_before + not_after + ")");
    } else {
      out_.append("(?:" + before + not_after + "|" + not_before + after + ")");
    }
  }

  // "[", "[^", and a "]" right after them, which is literal. A class nested
  // in a class is a union in Oniguruma: its brackets are dropped.
  void OpenClass(bool nested) {
    ++depth_;
    if (!nested) out_.push_back('[');
    ++i_;
    if (!nested && At(i_) == '^') out_.push_back(pattern_[i_++]);
    if (At(i_) == ']') out_.push_back(pattern_[i_++]);
  }

  Status ClassChar() {
    char c = pattern_[i_];
    if (c == '[' && At(i_ + 1) == ':') {  // POSIX [:alpha:]
      size_t close = pattern_.find(":]", i_ + 2);
      if (close == std::string_view::npos) {
        return InvalidArgument("regex '" + std::string(pattern_) + "': unterminated [: class");
      }
      out_.append(pattern_.substr(i_, close + 2 - i_));
      i_ = close + 2;
      return Status::Ok();
    }
    if (c == '[') {
      if (At(i_ + 1) == '^') return Refuse("negated bracket class inside a bracket class");
      OpenClass(/*nested=*/true);
      return Status::Ok();
    }
    if (c == '&' && At(i_ + 1) == '&') return Refuse("bracket class intersection (&&)");
    ++i_;
    if (c == ']' && --depth_ > 0) return Status::Ok();  // end of a nested class
    out_.push_back(c);
    return Status::Ok();
  }

  std::string_view pattern_;
  std::string out_;
  size_t i_ = 0;
  int depth_ = 0;  // bracket class nesting
};

}  // namespace

StatusOr<std::string> TranslateOnigurumaPattern(std::string_view pattern) {
  return PatternTranslator(pattern).Run();
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
