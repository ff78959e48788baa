// UTF-8 primitives shared by the tokenizer, the chat-template interpreter and
// anything else that handles text: validation (well-formed UTF-8 per Unicode
// Table 3-7: no overlongs, surrogates or code points past U+10FFFF), decoding
// and encoding one code point. Pure and thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nightshift {

// The byte sequence starting at bytes[pos]: its length and whether it is a
// complete, well-formed character. An ill-formed sequence reports the length
// of its maximal ill-formed prefix (at least 1), which is what Rust's
// from_utf8_lossy and the WHATWG decoder replace with one U+FFFD.
struct Utf8Sequence {
  size_t length;
  bool complete;
};
Utf8Sequence ScanUtf8Sequence(std::string_view bytes, size_t pos);

// OK when `text` is well-formed UTF-8; otherwise InvalidArgument
// "invalid UTF-8 at byte N" naming the first bad sequence.
Status ValidateUtf8(std::string_view text);

// Decodes the character starting at text[pos] of VALID UTF-8 text and stores
// its byte length in *length.
char32_t DecodeUtf8(std::string_view text, size_t pos, size_t* length);

// Decodes the character at text[*pos] of valid UTF-8 and advances *pos past it.
inline char32_t NextUtf8(std::string_view text, size_t* pos) {
  size_t length = 0;
  char32_t cp = DecodeUtf8(text, *pos, &length);
  *pos += length;
  return cp;
}

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value).
void AppendUtf8(char32_t cp, std::string* out);

}  // namespace nightshift
