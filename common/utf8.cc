#include "common/utf8.h"

namespace nightshift {

Utf8Sequence ScanUtf8Sequence(std::string_view bytes, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  unsigned char lead = byte(pos);
  if (lead < 0x80) return {1, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return {1, false};
  }
  size_t length = 1;
  for (size_t k = 0; k < need; ++k) {
    size_t i = pos + length;
    if (i >= bytes.size()) return {length, false};
    unsigned char b = byte(i);
    unsigned char min = k == 0 ? lo : 0x80;
    unsigned char max = k == 0 ? hi : 0xBF;
    if (b < min || b > max) return {length, false};
    ++length;
  }
  return {length, true};
}

Status ValidateUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    Utf8Sequence scan = ScanUtf8Sequence(text, pos);
    if (!scan.complete) return InvalidArgument("invalid UTF-8 at byte " + std::to_string(pos));
    pos += scan.length;
  }
  return Status::Ok();
}

char32_t DecodeUtf8(std::string_view text, size_t pos, size_t* length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  unsigned char lead = byte(0);
  if (lead < 0x80) {
    *length = 1;
    return lead;
  }
  if (lead < 0xE0) {
    *length = 2;
    return (char32_t{lead & 0x1Fu} << 6) | (byte(1) & 0x3Fu);
  }
  if (lead < 0xF0) {
    *length = 3;
    return (char32_t{lead & 0x0Fu} << 12) | (char32_t{byte(1) & 0x3Fu} << 6) | (byte(2) & 0x3Fu);
  }
  *length = 4;
  return (char32_t{lead & 0x07u} << 18) | (char32_t{byte(1) & 0x3Fu} << 12) |
         (char32_t{byte(2) & 0x3Fu} << 6) | (byte(3) & 0x3Fu);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace nightshift
