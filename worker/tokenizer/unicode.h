// UTF-8 and Unicode helpers for the tokenizer, with the semantics of the Rust
// standard library that the HuggingFace crate relies on (char::is_whitespace,
// char::is_numeric, String::from_utf8_lossy, str::to_lowercase) and the
// Unicode normal forms through utf8proc.
//
// All functions are pure and thread-safe. Functions taking text that is
// documented as valid UTF-8 do not check it again: validate input once with
// ValidateUtf8 at the boundary.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/utf8.h"

namespace nightshift::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// ValidateUtf8, DecodeUtf8 and AppendUtf8 come from common/utf8.h.

// Arbitrary bytes to valid UTF-8: each maximal ill-formed subsequence becomes
// one U+FFFD, exactly like Rust's String::from_utf8_lossy (and the WHATWG
// decoder).
std::string Utf8Lossy(std::string_view bytes);

// Whether `text` (valid UTF-8) ends with U+FFFD.
bool EndsWithReplacementChar(std::string_view text);

// Unicode White_Space (Rust char::is_whitespace, Oniguruma and regex `\s`):
// U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029,
// U+202F, U+205F, U+3000.
bool IsWhiteSpace(char32_t cp);
// General category Nd, Nl or No (Rust char::is_numeric).
bool IsNumeric(char32_t cp);
// Regex `\w`: letters, marks, decimal digits, connector punctuation, joiners.
bool IsWordChar(char32_t cp);
// ASCII punctuation or general category P* (the crate's `is_punc`).
bool IsPunctuation(char32_t cp);
// General category M* (Mn, Mc, Me): what StripAccents removes.
bool IsMark(char32_t cp);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// Applies a Unicode normal form to valid UTF-8 text. ASCII text is returned
// unchanged without calling utf8proc. Fails only if utf8proc does (Internal).
StatusOr<std::string> ToNormalForm(std::string_view text, NormalForm form);

// Full Unicode lowercase of valid UTF-8 text like Rust str::to_lowercase:
// simple mappings, U+0130 -> "i\u0307", and the final-sigma rule (with
// Cased / Case_Ignorable derived from general categories and the Word_Break
// list, which matches the Unicode properties for all but rare characters).
std::string ToLowercase(std::string_view text);

// GPT-2's byte-level alphabet: bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map
// to the same code point, the other 68 bytes to U+0100 onwards in byte order.
// ByteToUnicode()[b] is the UTF-8 spelling of byte b's character.
const std::array<std::string, 256>& ByteToUnicode();
// The byte a byte-level character stands for, or -1 if it is not one.
int UnicodeToByte(char32_t cp);

}  // namespace nightshift::tokenizer
