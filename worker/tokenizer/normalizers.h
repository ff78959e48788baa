// Normalizers of tokenizer.json (`normalizer`), applied to each segment of
// text between added tokens before pre-tokenization. Supported types, with
// the Rust crate's semantics: NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// StripAccents, Replace, Prepend, ByteLevel and Sequence. Any other type is
// refused with Unimplemented naming it.
//
// Normalizers are immutable after parsing and safe to share between threads.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/tokenizer/json_fields.h"

namespace nightshift::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8) in place; it stays valid UTF-8.
  virtual Status Normalize(std::string* text) const = 0;
};

// Builds the normalizer described by `spec`; nullptr for a JSON null (no
// normalizer). `where` names the spec in error messages ("normalizer").
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& spec, const std::string& where);

// Replaces every match of `pattern` in `text` with `content`, as the crate's
// NormalizedString::replace (shared with the Replace decoder).
StatusOr<std::string> ReplaceAll(const Regex& pattern, const std::string& content,
                                 std::string_view text);

}  // namespace nightshift::tokenizer
