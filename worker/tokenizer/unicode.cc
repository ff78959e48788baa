#include "worker/tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace nightshift::tokenizer {
namespace {

// Length of the well-formed prefix of the sequence starting at bytes[pos]
// (Unicode Table 3-7), and whether it is a complete character. A lone
// invalid byte has length 1 and is not complete.
utf8proc_category_t Category(char32_t cp) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}

bool IsCased(char32_t cp) {
  auto c = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_islower(c) || utf8proc_isupper(c) || Category(cp) == UTF8PROC_CATEGORY_LT;
}

// Unicode Case_Ignorable: Mn, Me, Cf, Lm, Sk and the Word_Break
// MidLetter / MidNumLet / Single_Quote characters.
bool IsCaseIgnorable(char32_t cp) {
  switch (Category(cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      break;
  }
  switch (cp) {
    case 0x27:
    case 0x2E:
    case 0x3A:
    case 0xB7:
    case 0x387:
    case 0x55F:
    case 0x5F4:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xFE13:
    case 0xFE52:
    case 0xFE55:
    case 0xFF07:
    case 0xFF0E:
    case 0xFF1A:
      return true;
    default:
      return false;
  }
}

// Rust's final-sigma rule: a capital sigma preceded by a cased letter (case
// ignorables skipped) and not followed by one lowercases to U+03C2.
bool IsFinalSigma(std::string_view text, size_t pos) {
  bool cased_before = false;
  for (size_t i = pos; i > 0;) {
    size_t start = i - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t len;
    char32_t cp = DecodeUtf8(text, start, &len);
    i = start;
    if (IsCaseIgnorable(cp)) continue;
    cased_before = IsCased(cp);
    break;
  }
  if (!cased_before) return false;
  size_t len;
  DecodeUtf8(text, pos, &len);
  for (size_t i = pos + len; i < text.size(); i += len) {
    char32_t cp = DecodeUtf8(text, i, &len);
    if (IsCaseIgnorable(cp)) continue;
    return !IsCased(cp);
  }
  return true;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    Utf8Sequence scan = ScanUtf8Sequence(bytes, pos);
    if (scan.complete) {
      out.append(bytes.substr(pos, scan.length));
    } else {
      AppendUtf8(kReplacementChar, &out);
    }
    pos += scan.length;
  }
  return out;
}

bool EndsWithReplacementChar(std::string_view text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  return text.size() >= kReplacement.size() &&
         text.substr(text.size() - kReplacement.size()) == kReplacement;
}

bool IsWhiteSpace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool IsNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  switch (Category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool IsPunctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  switch (Category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool IsMark(char32_t cp) {
  utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

StatusOr<std::string> ToNormalForm(std::string_view text, NormalForm form) {
  if (IsAscii(text)) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  utf8proc_ssize_t length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                         static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                         static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
  if (length < 0) {
    return Internal(std::string("unicode normalization failed: ") + utf8proc_errmsg(length));
  }
  return std::string(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
}

std::string ToLowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t len;
  for (size_t pos = 0; pos < text.size(); pos += len) {
    char32_t cp = DecodeUtf8(text, pos, &len);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (cp == 0x130) {  // the one unconditional multi-character lowercase
      out += "i\xCC\x87";
    } else if (cp == 0x3A3) {
      AppendUtf8(IsFinalSigma(text, pos) ? 0x3C2 : 0x3C3, &out);
    } else {
      AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
    }
  }
  return out;
}

const std::array<std::string, 256>& ByteToUnicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      AppendUtf8(printable ? static_cast<char32_t>(b) : next++, &t[b]);
    }
    return t;
  }();
  return table;
}

int UnicodeToByte(char32_t cp) {
  static const std::array<int, 324> table = [] {
    std::array<int, 324> t;
    t.fill(-1);
    const auto& forward = ByteToUnicode();
    for (int b = 0; b < 256; ++b) {
      size_t len;
      t[DecodeUtf8(forward[b], 0, &len)] = b;
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace nightshift::tokenizer
