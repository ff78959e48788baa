#include "common/size.h"

#include <cctype>
#include <cmath>
#include <string>

namespace nightshift {

StatusOr<uint64_t> ParseSize(std::string_view text) {
  const Status bad = InvalidArgument("'" + std::string(text) +
                                     "' is not a size (e.g. 8G, 512M, 1.5GiB or a byte count)");
  size_t end = 0;
  bool digits = false, point = false;
  for (; end < text.size(); ++end) {
    const char c = text[end];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (!digits) return bad;
  std::string suffix;
  for (char c : text.substr(end)) {
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (suffix.size() >= 2 && suffix.compare(suffix.size() - 2, 2, "ib") == 0) {
    suffix.erase(suffix.size() - 2);
    if (suffix.empty()) return bad;  // "iB" alone is no unit
  } else if (!suffix.empty() && (suffix.back() == 'b' || suffix.back() == 'i')) {
    const bool byte = suffix == "b";
    suffix.pop_back();
    if (!byte && suffix.empty()) return bad;  // "i" alone
  }
  double scale = 1;
  if (suffix == "k") {
    scale = 1024.0;
  } else if (suffix == "m") {
    scale = 1024.0 * 1024;
  } else if (suffix == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (suffix == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (!suffix.empty()) {
    return bad;
  }
  const double number = std::stod(std::string(text.substr(0, end)));
  const double bytes = std::floor(number * scale);
  if (!std::isfinite(bytes) || !(bytes >= 1) || bytes >= 1.8e19) return bad;
  return static_cast<uint64_t>(bytes);
}

}  // namespace nightshift
