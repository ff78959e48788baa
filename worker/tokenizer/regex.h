// Regexes of tokenizer.json, which the Rust crate runs with Oniguruma (Ruby
// syntax), run here with PCRE2 in UTF + UCP mode.
//
// The two agree on the syntax tokenizer files use (alternation is
// leftmost-first, `(?i:...)`, `(?!...)`, `\p{L}`, `\p{N}`, quantifiers,
// classes) except for a few escapes, which Compile() rewrites so they mean
// what they mean in Oniguruma:
//   \s, \S   Unicode White_Space (PCRE2 also counts U+180E)
//   \w, \W   letters, marks, numbers, connector punctuation (PCRE2 omits marks)
//   \b, \B   word boundaries by that \w
//   \h, \H   hex digit (PCRE2: horizontal space)
//   (?m)     dot matches newline (PCRE2: multi-line anchors)
//   \uHHHH   a code point (PCRE2 spells it \x{HHHH})
//   [a[bc]]  a class nested in a class is a union (PCRE2 has no nesting)
// `^` and `$` are line anchors as in Ruby. A negated escape (\S, \W, \H) or
// a negated class inside a bracket class and class intersection (`&&`) are
// refused with Unimplemented rather than guessed. Still different, and not
// used by tokenizer files seen so far: `(?i)` folds case one character at a
// time (Oniguruma also matches "ss" against "ß").
//
// A Regex is immutable and may be used from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nightshift::tokenizer {

struct MatchRange {
  size_t begin;
  size_t end;
};

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern. InvalidArgument (with PCRE2's
  // message and offset) for a malformed pattern, Unimplemented for the
  // constructs listed above.
  static StatusOr<Regex> Compile(std::string_view pattern);
  // A regex matching `text` literally.
  static StatusOr<Regex> Literal(std::string_view text);

  // Appends to *out every match in `text` (valid UTF-8), left to right and
  // non-overlapping, as the Rust crate's find_iter yields them: the search
  // resumes where the last match ended; an empty match right where the
  // previous match ended is skipped by advancing one character; empty text
  // has no matches (as the crate's Pattern impl for regexes). Fails
  // (ResourceExhausted) only if PCRE2 hits its backtracking limits.
  Status FindAll(std::string_view text, std::vector<MatchRange>* out) const;

 private:
  struct Code;
  Regex(std::shared_ptr<const Code> code, std::string pattern)
      : code_(std::move(code)), pattern_(std::move(pattern)) {}
  static StatusOr<Regex> CompileTranslated(const std::string& pcre_pattern, uint32_t options,
                                           std::string original);

  std::shared_ptr<const Code> code_;
  std::string pattern_;  // as given, for messages
};

// Rewrites an Oniguruma pattern into the equivalent PCRE2 pattern (see the
// file comment). Exposed for tests.
StatusOr<std::string> TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace nightshift::tokenizer
