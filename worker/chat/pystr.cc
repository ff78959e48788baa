#include "worker/chat/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>

namespace nightshift::chat::pystr {
namespace {

utf8proc_category_t Category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool IsCased(char32_t cp) {
  utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

char32_t ToUpper(char32_t cp) { return utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)); }
char32_t ToLower(char32_t cp) { return utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)); }
char32_t ToTitle(char32_t cp) { return utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)); }

bool IsAlphaCp(char32_t cp) {
  utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}
bool IsDigitCp(char32_t cp) { return Category(cp) == UTF8PROC_CATEGORY_ND; }
bool IsNumericCp(char32_t cp) {
  utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

template <typename Pred>
bool AllOf(std::string_view text, Pred pred) {
  if (text.empty()) return false;
  for (size_t pos = 0; pos < text.size();) {
    if (!pred(NextUtf8(text, &pos))) return false;
  }
  return true;
}

bool IsLineBreak(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

// Byte offsets where each code point of `text` starts, plus text.size().
std::vector<size_t> Boundaries(std::string_view text) {
  std::vector<size_t> at;
  at.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    at.push_back(pos);
    NextUtf8(text, &pos);
  }
  at.push_back(text.size());
  return at;
}

int64_t CodePointIndex(std::string_view text, size_t byte_offset) {
  return static_cast<int64_t>(Length(text.substr(0, byte_offset)));
}

std::vector<std::string> SplitOnWhitespace(std::string_view text, int64_t maxsplit) {
  std::vector<std::string> parts;
  std::u32string cps = Decode(text);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && IsSpace(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(Encode(cps.substr(i)));
      break;
    }
    size_t start = i;
    while (i < n && !IsSpace(cps[i])) ++i;
    parts.push_back(Encode(cps.substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> RSplitOnWhitespace(std::string_view text, int64_t maxsplit) {
  std::vector<std::string> parts;
  std::u32string cps = Decode(text);
  size_t end = cps.size();
  while (true) {
    while (end > 0 && IsSpace(cps[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(Encode(cps.substr(0, end)));
      break;
    }
    size_t start = end;
    while (start > 0 && !IsSpace(cps[start - 1])) --start;
    parts.push_back(Encode(cps.substr(start, end - start)));
    end = start;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

std::u32string Decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(NextUtf8(text, &pos));
  return out;
}

std::string Encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) AppendUtf8(cp, &out);
  return out;
}

size_t Length(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool IsSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool IsIdentifierChar(char32_t cp, bool first) {
  if (cp == '_' || IsAlphaCp(cp) || Category(cp) == UTF8PROC_CATEGORY_NL) return true;
  if (first) return false;
  utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
         c == UTF8PROC_CATEGORY_PC;
}

bool IsPrintable(char32_t cp) {
  if (cp == ' ') return true;
  switch (Category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string Strip(std::string_view text, const std::optional<std::string>& chars, StripSide side) {
  std::u32string cps = Decode(text);
  std::u32string set = chars ? Decode(*chars) : std::u32string();
  auto strip = [&](char32_t cp) {
    return chars ? set.find(cp) != std::u32string::npos : IsSpace(cp);
  };
  size_t begin = 0, end = cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return Encode(std::u32string_view(cps).substr(begin, end - begin));
}

StatusOr<std::vector<std::string>> Split(std::string_view text,
                                         const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return SplitOnWhitespace(text, maxsplit);
  if (sep->empty()) return InvalidArgument("empty separator");
  std::vector<std::string> parts;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t at = text.find(*sep, start);
    if (at == std::string_view::npos) break;
    parts.emplace_back(text.substr(start, at - start));
    start = at + sep->size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

StatusOr<std::vector<std::string>> RSplit(std::string_view text,
                                          const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return RSplitOnWhitespace(text, maxsplit);
  if (sep->empty()) return InvalidArgument("empty separator");
  std::vector<std::string> parts;
  size_t end = text.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t at = text.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    parts.emplace_back(text.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  parts.emplace_back(text.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> SplitLines(std::string_view text, bool keepends) {
  std::vector<std::string> lines;
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    size_t before = pos;
    char32_t cp = NextUtf8(text, &pos);
    if (!IsLineBreak(cp)) continue;
    if (cp == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
    lines.emplace_back(text.substr(start, (keepends ? pos : before) - start));
    start = pos;
  }
  if (start < text.size()) lines.emplace_back(text.substr(start));
  return lines;
}

std::string Replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                    int64_t count) {
  std::string out;
  if (old_text.empty()) {
    std::vector<size_t> at = Boundaries(text);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < at.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      out.append(text.substr(at[i], at[i + 1] - at[i]));
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    size_t at = text.find(old_text, start);
    if (at == std::string_view::npos) break;
    out.append(text.substr(start, at - start));
    out.append(new_text);
    start = at + old_text.size();
  }
  out.append(text.substr(start));
  return out;
}

int64_t Find(std::string_view text, std::string_view sub) {
  size_t at = text.find(sub);
  return at == std::string_view::npos ? -1 : CodePointIndex(text, at);
}

int64_t RFind(std::string_view text, std::string_view sub) {
  size_t at = text.rfind(sub);
  return at == std::string_view::npos ? -1 : CodePointIndex(text, at);
}

int64_t Count(std::string_view text, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Length(text)) + 1;
  int64_t n = 0;
  for (size_t at = text.find(sub); at != std::string_view::npos;
       at = text.find(sub, at + sub.size())) {
    ++n;
  }
  return n;
}

namespace {

// Python's full (one-to-many) case mappings for the characters of
// SpecialCasing.txt that occur in Latin text; the rest map one to one.
struct SpecialCase {
  char32_t cp;
  const char* upper;
  const char* title;
};
constexpr SpecialCase kSpecialCases[] = {
    {0x00DF, "SS", "Ss"},            // ß
    {0x0149, "\u02BCN", "\u02BCN"},  // ŉ
    {0x01F0, "J\u030C", "J\u030C"},  // ǰ
    {0xFB00, "FF", "Ff"},           {0xFB01, "FI", "Fi"},   {0xFB02, "FL", "Fl"},
    {0xFB03, "FFI", "Ffi"},         {0xFB04, "FFL", "Ffl"}, {0xFB05, "ST", "St"},
    {0xFB06, "ST", "St"},
};

const SpecialCase* FindSpecialCase(char32_t cp) {
  for (const SpecialCase& special : kSpecialCases) {
    if (special.cp == cp) return &special;
  }
  return nullptr;
}

void AppendUpper(char32_t cp, std::string* out) {
  const SpecialCase* special = FindSpecialCase(cp);
  if (special) {
    out->append(special->upper);
  } else {
    AppendUtf8(ToUpper(cp), out);
  }
}

void AppendTitle(char32_t cp, std::string* out) {
  const SpecialCase* special = FindSpecialCase(cp);
  if (special) {
    out->append(special->title);
  } else {
    AppendUtf8(ToTitle(cp), out);
  }
}

// Unicode's Case_Ignorable, approximately: marks, format characters,
// modifiers and the word-internal punctuation of Word_Break.
bool IsCaseIgnorable(char32_t cp) {
  switch (Category(cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return cp == '\'' || cp == '.' || cp == ':' || cp == 0x00B7 || cp == 0x2018 || cp == 0x2019 ||
             cp == 0x2024 || cp == 0x2027;
  }
}

// Whether the capital sigma at cps[i] ends a word (Final_Sigma): a cased
// letter before it and none after it, skipping case-ignorable characters.
bool IsFinalSigma(const std::u32string& cps, size_t i) {
  size_t before = i;
  while (before > 0 && IsCaseIgnorable(cps[before - 1])) --before;
  if (before == 0 || !IsCased(cps[before - 1])) return false;
  size_t after = i + 1;
  while (after < cps.size() && IsCaseIgnorable(cps[after])) ++after;
  return after == cps.size() || !IsCased(cps[after]);
}

}  // namespace

std::string Upper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) AppendUpper(NextUtf8(text, &pos), &out);
  return out;
}

std::string Lower(std::string_view text) {
  std::u32string cps = Decode(text);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] == 0x0130) {
      out.append("i\u0307");  // İ
    } else if (cps[i] == 0x03A3 && IsFinalSigma(cps, i)) {
      out.append("\u03C2");  // ς
    } else {
      AppendUtf8(ToLower(cps[i]), &out);
    }
  }
  return out;
}

std::string Capitalize(std::string_view text) {
  std::string out;
  size_t pos = 0;
  if (pos < text.size()) AppendTitle(NextUtf8(text, &pos), &out);
  return out + Lower(text.substr(pos));
}

std::string Title(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = NextUtf8(text, &pos);
    if (previous_cased) {
      AppendUtf8(ToLower(cp), &out);
    } else {
      AppendTitle(cp, &out);
    }
    previous_cased = IsCased(cp);
  }
  return out;
}

bool IsAlpha(std::string_view text) { return AllOf(text, IsAlphaCp); }
bool IsDigit(std::string_view text) { return AllOf(text, IsDigitCp); }
bool IsAlnum(std::string_view text) {
  return AllOf(text, [](char32_t cp) { return IsAlphaCp(cp) || IsNumericCp(cp); });
}
bool IsSpaceString(std::string_view text) { return AllOf(text, IsSpace); }

bool IsLower(std::string_view text) {
  bool cased = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = NextUtf8(text, &pos);
    utf8proc_category_t c = Category(cp);
    if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || c == UTF8PROC_CATEGORY_LL;
  }
  return cased;
}

bool IsUpper(std::string_view text) {
  bool cased = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = NextUtf8(text, &pos);
    utf8proc_category_t c = Category(cp);
    if (c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || c == UTF8PROC_CATEGORY_LU;
  }
  return cased;
}

std::string Repr(std::string_view text) {
  bool has_single = text.find('\'') != std::string_view::npos;
  bool has_double = text.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = NextUtf8(text, &pos);
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && !IsPrintable(cp))) {
      const char* format = cp <= 0xFF ? "\\x%02x" : cp <= 0xFFFF ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof(buf), format, static_cast<unsigned>(cp));
      out.append(buf);
    } else {
      AppendUtf8(cp, &out);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace nightshift::chat::pystr
