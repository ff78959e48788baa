#include "worker/chat/strformat.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "worker/chat/error.h"
#include "worker/chat/pystr.h"

namespace nightshift::chat {
namespace {

struct Spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char conversion = 0;
};

// The arguments of `format % args`.
class PercentArgs {
 public:
  explicit PercentArgs(const Value& args) : args_(args) {
    if (args.kind() == Value::Kind::kTuple) {
      positional_ = args.items();
    } else {
      positional_ = {args};
    }
  }

  Value Next() {
    if (next_ >= positional_.size()) ThrowError("not enough arguments for format string");
    return positional_[next_++];
  }

  Value Lookup(const std::string& key) const {
    if (args_.kind() != Value::Kind::kDict) ThrowError("format requires a mapping");
    const Value* found = args_.dict().Find(key);
    if (found == nullptr) ThrowError(pystr::Repr(key));  // Python's KeyError
    return *found;
  }

  // Python's check that every positional argument was used (mappings are
  // exempt).
  void CheckAllUsed() const {
    if (args_.kind() != Value::Kind::kDict && next_ < positional_.size()) {
      ThrowError("not all arguments converted during string formatting");
    }
  }

 private:
  Value args_;
  ValueList positional_;
  size_t next_ = 0;
};

int64_t IntArgument(const Value& value, char conversion) {
  if (value.kind() == Value::Kind::kInt || value.kind() == Value::Kind::kBool)
    return value.AsInteger();
  if (value.kind() == Value::Kind::kFloat &&
      (conversion == 'd' || conversion == 'i' || conversion == 'u')) {
    double f = value.float_value();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18)
      ThrowError("cannot convert float infinity or NaN to integer");
    return static_cast<int64_t>(f);
  }
  if (conversion == 'd' || conversion == 'i' || conversion == 'u') {
    ThrowError(std::string("%") + conversion + " format: a real number is required, not " +
               TypeName(value));
  }
  ThrowError(std::string("%") + conversion + " format: an integer is required, not " +
             TypeName(value));
}

std::string Digits(uint64_t magnitude, int base, bool upper) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), digits[magnitude % base]);
    magnitude /= base;
  } while (magnitude != 0);
  return out;
}

std::string SignOf(bool negative, const Spec& spec) {
  if (negative) return "-";
  if (spec.plus) return "+";
  if (spec.space) return " ";
  return "";
}

// sign + prefix + body, padded to the spec's width.
std::string Pad(const std::string& sign, const std::string& prefix, const std::string& body,
                const Spec& spec, bool numeric) {
  int64_t length = static_cast<int64_t>(pystr::Length(sign + prefix + body));
  if (spec.width <= length) return sign + prefix + body;
  std::string fill(static_cast<size_t>(spec.width - length),
                   spec.zero && numeric && !spec.left ? '0' : ' ');
  if (spec.left) return sign + prefix + body + std::string(fill.size(), ' ');
  if (fill[0] == '0') return sign + prefix + fill + body;
  return fill + sign + prefix + body;
}

std::string FormatInteger(const Value& value, const Spec& spec) {
  int64_t v = IntArgument(value, spec.conversion);
  uint64_t magnitude = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int base = spec.conversion == 'o'                               ? 8
             : (spec.conversion == 'x' || spec.conversion == 'X') ? 16
                                                                  : 10;
  std::string digits = Digits(magnitude, base, spec.conversion == 'X');
  if (spec.precision > static_cast<int64_t>(digits.size())) {
    digits.insert(0, static_cast<size_t>(spec.precision) - digits.size(), '0');
  }
  std::string prefix;
  if (spec.alt && base != 10)
    prefix = spec.conversion == 'o' ? "0o" : spec.conversion == 'x' ? "0x" : "0X";
  return Pad(SignOf(v < 0, spec), prefix, digits, spec, true);
}

std::string FormatFloatSpec(const Value& value, const Spec& spec) {
  if (!value.is_number()) ThrowError("must be real number, not " + TypeName(value));
  double f = value.AsDouble();
  std::string c_format = std::string("%") + (spec.alt ? "#" : "") + "." +
                         std::to_string(spec.precision < 0 ? 6 : spec.precision) + spec.conversion;
  char buf[512];
  std::snprintf(buf, sizeof(buf), c_format.c_str(), std::fabs(f));
  bool negative = std::signbit(f) && !std::isnan(f);
  return Pad(SignOf(negative, spec), "", buf, spec, true);
}

std::string FormatChar(const Value& value, const Spec& spec) {
  std::string body;
  if (value.is_string() && pystr::Length(value.string_value()) == 1) {
    body = value.string_value();
  } else if (value.kind() == Value::Kind::kInt || value.kind() == Value::Kind::kBool) {
    int64_t cp = value.AsInteger();
    if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      ThrowError("%c arg not in range(0x110000)");
    AppendUtf8(static_cast<char32_t>(cp), &body);
  } else {
    ThrowError("%c requires int or char");
  }
  return Pad("", "", body, spec, false);
}

std::string FormatText(std::string text, const Spec& spec) {
  if (spec.precision >= 0) {
    std::u32string cps = pystr::Decode(text);
    if (static_cast<int64_t>(cps.size()) > spec.precision) {
      text = pystr::Encode(std::u32string_view(cps).substr(0, static_cast<size_t>(spec.precision)));
    }
  }
  return Pad("", "", text, spec, false);
}

std::string Convert(const Value& value, const Spec& spec) {
  switch (spec.conversion) {
    case 's':
      return FormatText(ToStr(value), spec);
    case 'r':
      return FormatText(ToRepr(value), spec);
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
      return FormatInteger(value, spec);
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      return FormatFloatSpec(value, spec);
    case 'c':
      return FormatChar(value, spec);
    case 'a':
      ThrowUnsupported("'%a' (ascii()) string formatting");
    default:
      ThrowError(std::string("unsupported format character '") + spec.conversion + "'");
  }
}

// Reads a number or `*` (taken from the arguments) at format[*at].
int64_t ReadCount(const std::string& format, size_t* at, PercentArgs* args) {
  if (*at < format.size() && format[*at] == '*') {
    ++*at;
    Value v = args->Next();
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) ThrowError("* wants int");
    return v.AsInteger();
  }
  int64_t n = 0;
  while (*at < format.size() && format[*at] >= '0' && format[*at] <= '9') {
    n = n * 10 + (format[(*at)++] - '0');
    if (n > 1000000) ThrowError("width too big");
  }
  return n;
}

}  // namespace

std::string PercentFormat(const std::string& format, const Value& args) {
  PercentArgs source(args);
  std::string out;
  size_t at = 0;
  while (at < format.size()) {
    if (format[at] != '%') {
      out.push_back(format[at++]);
      continue;
    }
    ++at;
    if (at >= format.size()) ThrowError("incomplete format");
    if (format[at] == '%') {
      out.push_back('%');
      ++at;
      continue;
    }
    std::optional<Value> keyed;
    if (format[at] == '(') {
      size_t close = format.find(')', at);
      if (close == std::string::npos) ThrowError("incomplete format key");
      keyed = source.Lookup(format.substr(at + 1, close - at - 1));
      at = close + 1;
    }
    Spec spec;
    for (;
         at < format.size() && std::string_view("-+ #0").find(format[at]) != std::string_view::npos;
         ++at) {
      char flag = format[at];
      spec.left |= flag == '-';
      spec.plus |= flag == '+';
      spec.space |= flag == ' ';
      spec.alt |= flag == '#';
      spec.zero |= flag == '0';
    }
    if (at < format.size() && (format[at] == '*' || (format[at] >= '0' && format[at] <= '9'))) {
      spec.width = ReadCount(format, &at, &source);
      if (spec.width < 0) {
        spec.left = true;
        spec.width = -spec.width;
      }
    }
    if (at < format.size() && format[at] == '.') {
      ++at;
      spec.precision = std::max<int64_t>(ReadCount(format, &at, &source), 0);
    }
    while (at < format.size() && (format[at] == 'h' || format[at] == 'l' || format[at] == 'L'))
      ++at;
    if (at >= format.size()) ThrowError("incomplete format");
    spec.conversion = format[at++];
    out += Convert(keyed ? *keyed : source.Next(), spec);
  }
  source.CheckAllUsed();
  return out;
}

std::string StrFormat(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t next_auto = 0;
  bool automatic = false, manual = false;
  size_t at = 0;
  while (at < format.size()) {
    char c = format[at];
    if (c == '}') {
      if (at + 1 < format.size() && format[at + 1] == '}') {
        out.push_back('}');
        at += 2;
        continue;
      }
      ThrowError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++at;
      continue;
    }
    if (at + 1 < format.size() && format[at + 1] == '{') {
      out.push_back('{');
      at += 2;
      continue;
    }
    size_t close = format.find('}', at);
    if (close == std::string::npos) ThrowError("Single '{' encountered in format string");
    std::string field = format.substr(at + 1, close - at - 1);
    at = close + 1;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      if (colon + 1 < field.size())
        ThrowUnsupported("format spec in str.format ('{" + field + "}')");
      field.resize(colon);
    }
    char conversion = 's';
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      if (bang + 2 != field.size()) ThrowError("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(".[") != std::string::npos) {
      ThrowUnsupported("field path in str.format ('{" + field + "}')");
    }
    Value value;
    if (field.empty()) {
      if (manual)
        ThrowError("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      if (next_auto >= args.positional.size()) {
        ThrowError("Replacement index " + std::to_string(next_auto) +
                   " out of range for positional args tuple");
      }
      value = args.positional[next_auto++];
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      if (automatic)
        ThrowError("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      // Indices past the argument count fail below; long digit strings
      // cannot name an argument, so only their length matters.
      size_t index =
          field.size() > 9 ? args.positional.size() : std::strtoul(field.c_str(), nullptr, 10);
      if (index >= args.positional.size()) {
        ThrowError("Replacement index " + field + " out of range for positional args tuple");
      }
      value = args.positional[index];
    } else {
      bool found = false;
      for (const auto& [name, v] : args.keyword) {
        if (name == field) {
          value = v;
          found = true;
        }
      }
      if (!found) ThrowError(pystr::Repr(field));  // Python's KeyError
    }
    if (conversion == 's') {
      out += ToStr(value);
    } else if (conversion == 'r') {
      out += ToRepr(value);
    } else if (conversion == 'a') {
      ThrowUnsupported("'!a' conversion in str.format");
    } else {
      ThrowError(std::string("Unknown conversion specifier ") + conversion);
    }
  }
  return out;
}

}  // namespace nightshift::chat
