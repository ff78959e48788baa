// Python `str` semantics on UTF-8 text, for the chat-template interpreter.
//
// Jinja templates index, slice, strip, split and case-map strings the way
// Python does: by code point, with Python's definition of whitespace
// (str.isspace) and Python's repr() quoting. These helpers reproduce that on
// std::string holding UTF-8. Case mapping uses utf8proc's one-to-one
// mappings plus Python's one-to-many ones for Latin text (ß -> SS, the ﬁ
// ligatures, İ -> i̇) and the final-sigma rule; the Greek and Armenian
// one-to-many mappings of SpecialCasing.txt are not reproduced.
//
// Every function takes valid UTF-8 (check once with ValidateUtf8 where text
// enters the module) and is pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/utf8.h"  // ValidateUtf8, NextUtf8, AppendUtf8

namespace nightshift::chat::pystr {

// Code points of valid UTF-8 text, and back.
std::u32string Decode(std::string_view text);
std::string Encode(std::u32string_view text);

// Number of code points (Python len()).
size_t Length(std::string_view text);

// Python str.isspace() for one code point: U+0009-000D, U+001C-001F, space,
// U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool IsSpace(char32_t cp);
// Python identifier characters (str.isidentifier()): letters and `_`, and
// for later characters also digits and combining marks.
bool IsIdentifierChar(char32_t cp, bool first);
// Python str.isprintable() for one code point (false for categories Cc, Cf,
// Cs, Co, Cn, Zl, Zp and Zs other than the ASCII space).
bool IsPrintable(char32_t cp);

// str.strip/lstrip/rstrip. `chars` = nullopt strips whitespace.
enum class StripSide { kBoth, kLeft, kRight };
std::string Strip(std::string_view text, const std::optional<std::string>& chars, StripSide side);

// str.split(sep, maxsplit) and str.rsplit(sep, maxsplit); sep = nullopt
// splits on runs of whitespace. An empty `sep` is InvalidArgument
// ("empty separator"), as in Python.
StatusOr<std::vector<std::string>> Split(std::string_view text,
                                         const std::optional<std::string>& sep, int64_t maxsplit);
StatusOr<std::vector<std::string>> RSplit(std::string_view text,
                                          const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(keepends).
std::vector<std::string> SplitLines(std::string_view text, bool keepends);

// str.replace(old, new, count); count < 0 replaces all.
std::string Replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                    int64_t count);

// str.find / str.rfind / str.count over the whole string: code-point index
// of the first/last occurrence or -1; number of non-overlapping occurrences.
int64_t Find(std::string_view text, std::string_view sub);
int64_t RFind(std::string_view text, std::string_view sub);
int64_t Count(std::string_view text, std::string_view sub);

// Case mapping: str.upper(), str.lower(), str.capitalize(), str.title().
std::string Upper(std::string_view text);
std::string Lower(std::string_view text);
std::string Capitalize(std::string_view text);
std::string Title(std::string_view text);

// Character-class predicates over the whole string (false for "").
bool IsAlpha(std::string_view text);
bool IsDigit(std::string_view text);
bool IsAlnum(std::string_view text);
bool IsSpaceString(std::string_view text);
// Python islower()/isupper(): at least one cased character and no cased
// character of the other case.
bool IsLower(std::string_view text);
bool IsUpper(std::string_view text);

// Python repr() of a str: single quotes unless the text contains a single
// quote and no double quote; backslash escapes for the quote, backslash,
// \t \n \r, other control characters and non-printable code points.
std::string Repr(std::string_view text);

}  // namespace nightshift::chat::pystr
