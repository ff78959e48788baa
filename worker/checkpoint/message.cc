#include "worker/checkpoint/message.h"

#include <cstdio>

namespace nightshift::checkpoint {

std::string Quoted(std::string_view text) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxShown) out += "...";
  out += "'";
  return out;
}

}  // namespace nightshift::checkpoint
