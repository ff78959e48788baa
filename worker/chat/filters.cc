// Jinja2's filters and tests (filters.py, tests.py), with transformers'
// `tojson`. Access, methods, operators and globals are in builtins.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "worker/chat/builtins.h"
#include "worker/chat/error.h"
#include "worker/chat/pystr.h"
#include "worker/chat/strformat.h"

namespace nightshift::chat {
namespace {

// ---- helpers ----------------------------------------------------------------

Value Generator(ValueList items) { return Value::Iterator("generator", std::move(items)); }

ValueList Items(const Value& value) { return ValueOrThrow(Iterate(value)); }

std::optional<std::string> OptionalStr(const Value& value) {
  if (value.is_none()) return std::nullopt;
  return ToStr(value);
}

int64_t IntArg(const Value& value, const char* what) {
  if (value.kind() != Value::Kind::kInt && value.kind() != Value::Kind::kBool) {
    ThrowError(std::string(what) + " must be an integer, not " + TypeName(value));
  }
  return value.AsInteger();
}

// make_attrgetter: "a.b.0" is a['a']['b'][0] (through GetItem, like Jinja's
// environment.getitem); an Undefined step becomes `fallback` when given.
class AttrGetter {
 public:
  AttrGetter(const Value& attribute, bool ignore_case, std::optional<Value> fallback = std::nullopt)
      : ignore_case_(ignore_case), fallback_(std::move(fallback)) {
    if (attribute.is_none()) return;
    if (!attribute.is_string()) {
      parts_.push_back(attribute);
      return;
    }
    for (const std::string& part : ValueOrThrow(pystr::Split(attribute.string_value(), ".", -1))) {
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                 [](char c) { return c >= '0' && c <= '9'; });
      parts_.push_back(digits ? Value::Int(std::strtoll(part.c_str(), nullptr, 10))
                              : Value::String(part));
    }
  }

  Value operator()(Value item) const {
    for (const Value& part : parts_) {
      item = GetItem(item, part);
      if (fallback_ && item.is_undefined()) item = *fallback_;
    }
    if (ignore_case_ && item.is_string()) return Value::String(pystr::Lower(item.string_value()));
    return item;
  }

 private:
  std::vector<Value> parts_;
  bool ignore_case_;
  std::optional<Value> fallback_;
};

// The key of `sort`: a list of the comma-separated attributes' values.
class MultiAttrGetter {
 public:
  MultiAttrGetter(const Value& attribute, bool ignore_case) {
    if (!attribute.is_string()) {
      getters_.emplace_back(attribute, ignore_case);
      return;
    }
    for (const std::string& part : ValueOrThrow(pystr::Split(attribute.string_value(), ",", -1))) {
      getters_.emplace_back(Value::String(part), ignore_case);
    }
  }
  Value operator()(const Value& item) const {
    ValueList keys;
    for (const AttrGetter& getter : getters_) keys.push_back(getter(item));
    return Value::List(std::move(keys));
  }

 private:
  std::vector<AttrGetter> getters_;
};

bool Less(const Value& a, const Value& b) { return ValueOrThrow(Compare(a, b, "<")) < 0; }

void CheckHashable(const Value& value) {
  if (value.kind() == Value::Kind::kList || value.kind() == Value::Kind::kDict) {
    ThrowError("unhashable type: '" + TypeName(value) + "'");
  }
}

// Python float(str): optional whitespace, sign, digits with single
// underscores between them, fraction, exponent, or inf/infinity/nan.
std::optional<double> ParseFloat(const std::string& raw) {
  std::string text = pystr::Strip(raw, std::nullopt, pystr::StripSide::kBoth);
  std::string lower = pystr::Lower(text);
  std::string body = lower[0] == '+' || lower[0] == '-' ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan")
    return std::strtod(lower.c_str(), nullptr);
  std::string clean;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '_') {
      bool between = i > 0 && i + 1 < text.size() &&
                     std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                     std::isdigit(static_cast<unsigned char>(text[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' &&
        c != '+' && c != '-') {
      return std::nullopt;
    }
    clean.push_back(c);
  }
  if (clean.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return value;
}

// Python int(str, base) for bases 2..36 (with the 0b/0o/0x prefix allowed
// for the matching base), or nullopt.
std::optional<int64_t> ParseInt(const std::string& raw, int64_t base) {
  std::string text = pystr::Strip(raw, std::nullopt, pystr::StripSide::kBoth);
  bool negative = false;
  size_t at = 0;
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) negative = text[at++] == '-';
  if (at + 1 < text.size() && text[at] == '0') {
    char prefix = static_cast<char>(text[at + 1] | 0x20);
    if ((prefix == 'x' && base == 16) || (prefix == 'o' && base == 8) ||
        (prefix == 'b' && base == 2))
      at += 2;
  }
  if (at >= text.size() || base < 2 || base > 36) return std::nullopt;
  int64_t value = 0;
  bool previous_digit = false;
  for (; at < text.size(); ++at) {
    char c = text[at];
    if (c == '_' && previous_digit && at + 1 < text.size()) {
      previous_digit = false;
      continue;
    }
    int digit = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
                : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                              : 99;
    if (digit >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) ||
        __builtin_add_overflow(value, digit, &value)) {
      return std::nullopt;
    }
    previous_digit = true;
  }
  if (!previous_digit) return std::nullopt;
  return negative ? -value : value;
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Python round(x, ndigits) for floats: correctly rounded, ties to even.
double RoundFloat(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 308) return x;
  if (ndigits >= 0) {
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / scale) * scale;
}

// Python round(n, ndigits) for ints (ndigits < 0 rounds to tens, ties to even).
int64_t RoundInt(int64_t n, int64_t ndigits) {
  if (ndigits >= 0) return n;
  if (ndigits < -18) return 0;
  int64_t scale = 1;
  for (int64_t i = 0; i < -ndigits; ++i) scale *= 10;
  int64_t q = n / scale, r = n % scale;
  if (r < 0) {
    r += scale;
    --q;
  }
  if (2 * r > scale || (2 * r == scale && (q & 1))) ++q;
  return q * scale;
}

// ---- filters ----------------------------------------------------------------

Value DoTojson(const Value& value, CallArgs args) {
  ValueList a = BindArgs("tojson", std::move(args),
                         {{"ensure_ascii", Value::Bool(false)},
                          {"indent", Value::None()},
                          {"separators", Value::None()},
                          {"sort_keys", Value::Bool(false)}});
  JsonFormat format;
  format.ensure_ascii = Truthy(a[0]);
  if (a[1].is_string()) {
    format.indent = a[1].string_value();
  } else if (!a[1].is_none()) {
    format.indent =
        std::string(static_cast<size_t>(std::max<int64_t>(IntArg(a[1], "indent"), 0)), ' ');
  }
  if (a[2].is_none()) {
    if (format.indent) format.item_separator = ",";
  } else {
    ValueList separators = Items(a[2]);
    if (separators.size() != 2 || !separators[0].is_string() || !separators[1].is_string()) {
      ThrowError("tojson separators must be a pair of strings");
    }
    format.item_separator = separators[0].string_value();
    format.key_separator = separators[1].string_value();
  }
  format.sort_keys = Truthy(a[3]);
  return Value::String(ValueOrThrow(DumpJson(value, format)));
}

Value DoDefault(const Value& value, CallArgs args) {
  ValueList a = BindArgs("default", std::move(args),
                         {{"default_value", Value::String("")}, {"boolean", Value::Bool(false)}});
  if (value.is_undefined() || (Truthy(a[1]) && !Truthy(value))) return a[0];
  return value;
}

Value DoLength(const Value& value, CallArgs args) {
  BindArgs("length", std::move(args), {});
  return Value::Int(ValueOrThrow(Length(value)));
}

Value DoString(const Value& value, CallArgs args) {
  BindArgs("string", std::move(args), {});
  return Value::String(ToStr(value));
}

Value DoTrim(const Value& value, CallArgs args) {
  ValueList a = BindArgs("trim", std::move(args), {{"chars", Value::None()}});
  return Value::String(pystr::Strip(ToStr(value), OptionalStr(a[0]), pystr::StripSide::kBoth));
}

Value DoUpper(const Value& value, CallArgs args) {
  BindArgs("upper", std::move(args), {});
  return Value::String(pystr::Upper(ToStr(value)));
}

Value DoLower(const Value& value, CallArgs args) {
  BindArgs("lower", std::move(args), {});
  return Value::String(pystr::Lower(ToStr(value)));
}

Value DoCapitalize(const Value& value, CallArgs args) {
  BindArgs("capitalize", std::move(args), {});
  return Value::String(pystr::Capitalize(ToStr(value)));
}

// Jinja's title: split on runs of [-\s({\[<], upper-case each piece's first
// character and lower-case the rest.
Value DoTitle(const Value& value, CallArgs args) {
  BindArgs("title", std::move(args), {});
  std::u32string text = pystr::Decode(ToStr(value));
  auto is_separator = [](char32_t c) {
    return pystr::IsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    bool separator = is_separator(text[i]);
    while (j < text.size() && is_separator(text[j]) == separator) ++j;
    std::string piece = pystr::Encode(std::u32string_view(text).substr(i, j - i));
    if (separator) {
      out += piece;
    } else {
      std::string first = pystr::Encode(std::u32string(1, text[i]));
      out += pystr::Upper(first) +
             pystr::Lower(pystr::Encode(std::u32string_view(text).substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value::String(std::move(out));
}

Value DoFirst(const Value& value, CallArgs args) {
  BindArgs("first", std::move(args), {});
  ValueList items = Items(value);
  return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items.front();
}

Value DoLast(const Value& value, CallArgs args) {
  BindArgs("last", std::move(args), {});
  bool reversible = value.is_string() || value.is_sequence() ||
                    value.kind() == Value::Kind::kDict || value.is_undefined();
  if (!reversible) ThrowError("'" + TypeName(value) + "' object is not reversible");
  ValueList items = Items(value);
  return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
}

Value DoList(const Value& value, CallArgs args) {
  BindArgs("list", std::move(args), {});
  return Value::List(Items(value));
}

Value DoJoin(const Value& value, CallArgs args) {
  ValueList a =
      BindArgs("join", std::move(args), {{"d", Value::String("")}, {"attribute", Value::None()}});
  std::string separator = ToStr(a[0]);
  AttrGetter getter(a[1], false);
  std::string out;
  bool first = true;
  for (const Value& item : Items(value)) {
    if (!first) out += separator;
    first = false;
    out += ToStr(getter(item));
  }
  return Value::String(std::move(out));
}

Value DoItems(const Value& value, CallArgs args) {
  BindArgs("items", std::move(args), {});
  if (value.is_undefined()) return Generator({});
  if (value.kind() != Value::Kind::kDict) ThrowError("Can only get item pairs from a mapping.");
  ValueList pairs;
  for (const auto& [key, item] : value.dict().items()) pairs.push_back(Value::Tuple({key, item}));
  return Generator(std::move(pairs));
}

Value DoReverse(const Value& value, CallArgs args) {
  BindArgs("reverse", std::move(args), {});
  if (value.is_string()) {
    std::u32string text = pystr::Decode(value.string_value());
    std::reverse(text.begin(), text.end());
    return Value::String(pystr::Encode(text));
  }
  bool reversible =
      value.is_sequence() || value.kind() == Value::Kind::kDict || value.is_undefined();
  if (!reversible && value.kind() != Value::Kind::kIterator)
    ThrowError("argument must be iterable");
  ValueList items = Items(value);
  std::reverse(items.begin(), items.end());
  if (!reversible) return Value::List(std::move(items));  // list(generator) reversed
  return Value::Iterator(value.kind() == Value::Kind::kList ? "list_reverseiterator" : "reversed",
                         std::move(items));
}

Value DoSafe(const Value& value, CallArgs args) {
  BindArgs("safe", std::move(args), {});
  return Value::String(ToStr(value));
}

Value DoEscape(const Value& value, CallArgs args) {
  BindArgs("escape", std::move(args), {});
  return Value::String(HtmlEscape(ToStr(value)));
}

Value DoReplace(const Value& value, CallArgs args) {
  ValueList a = BindArgs("replace", std::move(args),
                         {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::None()}});
  int64_t count = a[2].is_none() ? -1 : IntArg(a[2], "count");
  return Value::String(pystr::Replace(ToStr(value), ToStr(a[0]), ToStr(a[1]), count));
}

Value DoInt(const Value& value, CallArgs args) {
  ValueList a =
      BindArgs("int", std::move(args), {{"default", Value::Int(0)}, {"base", Value::Int(10)}});
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      ThrowError(value.undefined_hint().empty() ? "value is undefined" : value.undefined_hint());
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return Value::Int(value.AsInteger());
    case Value::Kind::kFloat: {
      double f = value.float_value();
      if (std::isnan(f)) return a[0];
      if (std::isinf(f) || std::fabs(f) >= 9.2e18)
        ThrowError("cannot convert float infinity or huge value to integer");
      return Value::Int(static_cast<int64_t>(f));
    }
    case Value::Kind::kString: {
      if (auto parsed = ParseInt(value.string_value(), IntArg(a[1], "base")))
        return Value::Int(*parsed);
      auto f = ParseFloat(value.string_value());
      if (f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
        return Value::Int(static_cast<int64_t>(*f));
      return a[0];
    }
    default:
      return a[0];
  }
}

Value DoFloat(const Value& value, CallArgs args) {
  ValueList a = BindArgs("float", std::move(args), {{"default", Value::Float(0.0)}});
  if (value.is_undefined()) {
    ThrowError(value.undefined_hint().empty() ? "value is undefined" : value.undefined_hint());
  }
  if (value.is_number()) return Value::Float(value.AsDouble());
  if (value.is_string()) {
    if (auto parsed = ParseFloat(value.string_value())) return Value::Float(*parsed);
  }
  return a[0];
}

Value DoAbs(const Value& value, CallArgs args) {
  BindArgs("abs", std::move(args), {});
  if (value.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(value.float_value()));
  if (!value.is_number()) ThrowError("bad operand type for abs(): '" + TypeName(value) + "'");
  int64_t v = value.AsInteger();
  return v < 0 ? UnaryOp(ast::Op::kNeg, Value::Int(v)) : Value::Int(v);
}

Value DoRound(const Value& value, CallArgs args) {
  ValueList a = BindArgs("round", std::move(args),
                         {{"precision", Value::Int(0)}, {"method", Value::String("common")}});
  std::string method = ToStr(a[1]);
  if (method != "common" && method != "ceil" && method != "floor") {
    ThrowError("method must be common, ceil or floor");
  }
  if (!value.is_number())
    ThrowError("type " + TypeName(value) + " doesn't define __round__ method");
  int64_t precision = IntArg(a[0], "precision");
  if (method == "common") {
    if (value.kind() != Value::Kind::kFloat)
      return Value::Int(RoundInt(value.AsInteger(), precision));
    return Value::Float(RoundFloat(value.float_value(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = value.AsDouble() * scale;
  return Value::Float((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value DoIndent(const Value& value, CallArgs args) {
  ValueList a = BindArgs(
      "indent", std::move(args),
      {{"width", Value::Int(4)}, {"first", Value::Bool(false)}, {"blank", Value::Bool(false)}});
  std::string indention =
      a[0].is_string()
          ? a[0].string_value()
          : std::string(static_cast<size_t>(std::max<int64_t>(IntArg(a[0], "width"), 0)), ' ');
  std::vector<std::string> lines = pystr::SplitLines(ToStr(value) + "\n", false);
  std::string out;
  if (Truthy(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i > 0 ? "\n" + indention : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i)
      out += "\n" + (lines[i].empty() ? "" : indention) + lines[i];
  }
  if (Truthy(a[1])) out = indention + out;
  return Value::String(std::move(out));
}

Value DoCenter(const Value& value, CallArgs args) {
  ValueList a = BindArgs("center", std::move(args), {{"width", Value::Int(80)}});
  std::string text = ToStr(value);
  int64_t width = IntArg(a[0], "width");
  int64_t margin = width - static_cast<int64_t>(pystr::Length(text));
  if (margin <= 0) return Value::String(text);
  int64_t left = margin / 2 + (margin & width & 1);
  return Value::String(std::string(left, ' ') + text + std::string(margin - left, ' '));
}

Value DoTruncate(const Value& value, CallArgs args) {
  ValueList a = BindArgs("truncate", std::move(args),
                         {{"length", Value::Int(255)},
                          {"killwords", Value::Bool(false)},
                          {"end", Value::String("...")},
                          {"leeway", Value::None()}});
  std::string text = ToStr(value);
  std::string end = ToStr(a[2]);
  int64_t length = IntArg(a[0], "length");
  int64_t leeway = a[3].is_none() ? 5 : IntArg(a[3], "leeway");
  int64_t end_length = static_cast<int64_t>(pystr::Length(end));
  if (length < end_length) ThrowError("expected length >= " + std::to_string(end_length));
  std::u32string cps = pystr::Decode(text);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value::String(text);
  std::string head = pystr::Encode(std::u32string_view(cps).substr(0, length - end_length));
  if (Truthy(a[1])) return Value::String(head + end);
  size_t space = head.rfind(' ');
  return Value::String((space == std::string::npos ? head : head.substr(0, space)) + end);
}

Value DoWordcount(const Value& value, CallArgs args) {
  BindArgs("wordcount", std::move(args), {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t cp : pystr::Decode(ToStr(value))) {
    std::string one = pystr::Encode(std::u32string(1, cp));
    bool word_char = cp == '_' || pystr::IsAlnum(one);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

Value DoBatch(const Value& value, CallArgs args) {
  ValueList a = BindArgs("batch", std::move(args),
                         {{"linecount", std::nullopt}, {"fill_with", Value::None()}});
  int64_t size = IntArg(a[0], "linecount");
  if (size <= 0) ThrowError("batch size must be positive");
  ValueList batches, current;
  for (const Value& item : Items(value)) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == size) {
      batches.push_back(Value::List(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (!a[1].is_none()) current.resize(size, a[1]);
    batches.push_back(Value::List(std::move(current)));
  }
  return Generator(std::move(batches));
}

Value DoSlice(const Value& value, CallArgs args) {
  ValueList a =
      BindArgs("slice", std::move(args), {{"slices", std::nullopt}, {"fill_with", Value::None()}});
  int64_t slices = IntArg(a[0], "slices");
  if (slices <= 0) ThrowError("slices must be positive");
  ValueList seq = Items(value);
  int64_t length = static_cast<int64_t>(seq.size());
  int64_t per_slice = length / slices, with_extra = length % slices, offset = 0;
  ValueList out;
  for (int64_t n = 0; n < slices; ++n) {
    int64_t start = offset + n * per_slice;
    if (n < with_extra) ++offset;
    int64_t end = offset + (n + 1) * per_slice;
    ValueList part(seq.begin() + start, seq.begin() + end);
    if (!a[1].is_none() && n >= with_extra) part.push_back(a[1]);
    out.push_back(Value::List(std::move(part)));
  }
  return Generator(std::move(out));
}

Value DoSort(const Value& value, CallArgs args) {
  ValueList a = BindArgs("sort", std::move(args),
                         {{"reverse", Value::Bool(false)},
                          {"case_sensitive", Value::Bool(false)},
                          {"attribute", Value::None()}});
  MultiAttrGetter key(a[2], !Truthy(a[1]));
  ValueList items = Items(value);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(key(item), std::move(item));
  bool reverse = Truthy(a[0]);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? Less(y.first, x.first) : Less(x.first, y.first);
  });
  ValueList out;
  for (auto& entry : keyed) out.push_back(std::move(entry.second));
  return Value::List(std::move(out));
}

Value DoDictsort(const Value& value, CallArgs args) {
  ValueList a = BindArgs("dictsort", std::move(args),
                         {{"case_sensitive", Value::Bool(false)},
                          {"by", Value::String("key")},
                          {"reverse", Value::Bool(false)}});
  if (value.kind() != Value::Kind::kDict)
    ThrowError("dictsort expects a mapping, not " + TypeName(value));
  std::string by = ToStr(a[1]);
  if (by != "key" && by != "value") ThrowError("You can only sort by either \"key\" or \"value\"");
  bool ignore_case = !Truthy(a[0]), reverse = Truthy(a[2]);
  auto sort_key = [&](const std::pair<Value, Value>& item) {
    const Value& v = by == "key" ? item.first : item.second;
    return ignore_case && v.is_string() ? Value::String(pystr::Lower(v.string_value())) : v;
  };
  std::vector<std::pair<Value, Value>> items = value.dict().items();
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    return reverse ? Less(sort_key(y), sort_key(x)) : Less(sort_key(x), sort_key(y));
  });
  ValueList out;
  for (auto& [k, v] : items) out.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(out));
}

Value MinOrMax(const Value& value, CallArgs args, bool max) {
  ValueList a = BindArgs(max ? "max" : "min", std::move(args),
                         {{"case_sensitive", Value::Bool(false)}, {"attribute", Value::None()}});
  ValueList items = Items(value);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  AttrGetter key(a[1], !Truthy(a[0]));
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (max ? Less(best_key, k) : Less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value DoSum(const Value& value, CallArgs args) {
  ValueList a =
      BindArgs("sum", std::move(args), {{"attribute", Value::None()}, {"start", Value::Int(0)}});
  if (a[1].is_string()) ThrowError("sum() can't sum strings [use ''.join(seq) instead]");
  AttrGetter getter(a[0], false);
  Value total = a[1];
  for (const Value& item : Items(value)) total = BinaryOp(ast::Op::kAdd, total, getter(item));
  return total;
}

Value DoUnique(const Value& value, CallArgs args) {
  ValueList a = BindArgs("unique", std::move(args),
                         {{"case_sensitive", Value::Bool(false)}, {"attribute", Value::None()}});
  AttrGetter key(a[1], !Truthy(a[0]));
  ValueList seen, out;
  for (const Value& item : Items(value)) {
    Value k = key(item);
    CheckHashable(k);
    if (std::any_of(seen.begin(), seen.end(), [&k](const Value& s) { return Equals(s, k); }))
      continue;
    seen.push_back(std::move(k));
    out.push_back(item);
  }
  return Generator(std::move(out));
}

Value DoAttr(const Value& value, CallArgs args) {
  ValueList a = BindArgs("attr", std::move(args), {{"name", std::nullopt}});
  std::string name = ToStr(a[0]);
  if (std::optional<Value> attribute = PythonAttribute(value, name)) return *attribute;
  return Value::Undefined(pystr::Repr(ObjectTypeRepr(value)) + " has no attribute " +
                          pystr::Repr(name));
}

// Jinja's format: `value % (kwargs or args)`.
Value DoFormat(const Value& value, CallArgs args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    ThrowError("can't handle positional and keyword arguments at the same time");
  }
  Value operand;
  if (!args.keyword.empty()) {
    Dict mapping;
    for (auto& [key, v] : args.keyword) mapping.Set(Value::String(key), std::move(v));
    operand = Value::MakeDict(std::move(mapping));
  } else {
    operand = Value::Tuple(std::move(args.positional));
  }
  return Value::String(PercentFormat(ToStr(value), operand));
}

Value DoMap(const Value& value, CallArgs args) {
  if (!Truthy(value)) return Generator({});
  ValueList items = Items(value);
  ValueList out;
  if (args.positional.empty()) {
    std::optional<Value> attribute, fallback;
    for (auto& [name, v] : args.keyword) {
      if (name == "attribute") {
        attribute = v;
      } else if (name == "default") {
        fallback = v;
      } else {
        ThrowError("Unexpected keyword argument '" + name + "'");
      }
    }
    if (!attribute) ThrowError("map requires a filter argument");
    AttrGetter getter(*attribute, false, fallback);
    for (const Value& item : items) out.push_back(getter(item));
    return Generator(std::move(out));
  }
  std::string filter = ToStr(args.positional[0]);
  if (FilterSupport(filter) == Support::kUnknown) ThrowError("No filter named '" + filter + "'.");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) out.push_back(ApplyFilter(filter, item, rest));
  return Generator(std::move(out));
}

// select/reject (attr = false) and selectattr/rejectattr (attr = true).
Value SelectOrReject(const Value& value, CallArgs args, bool select, bool attr) {
  if (!Truthy(value)) return Generator({});
  size_t offset = attr ? 1 : 0;
  if (attr && args.positional.empty()) ThrowError("Missing parameter for attribute name");
  AttrGetter getter(attr ? args.positional[0] : Value::None(), false);
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > offset) {
    test = ToStr(args.positional[offset]);
    if (TestSupport(*test) == Support::kUnknown) ThrowError("No test named '" + *test + "'.");
    test_args.positional.assign(args.positional.begin() + offset + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  ValueList out;
  for (const Value& item : Items(value)) {
    Value subject = getter(item);
    bool passed = test ? ApplyTest(*test, subject, test_args) : Truthy(subject);
    if (passed == select) out.push_back(item);
  }
  return Generator(std::move(out));
}

using FilterFn = Value (*)(const Value& value, CallArgs args);

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"abs", DoAbs},
    {"attr", DoAttr},
    {"batch", DoBatch},
    {"capitalize", DoCapitalize},
    {"center", DoCenter},
    {"count", DoLength},
    {"d", DoDefault},
    {"default", DoDefault},
    {"dictsort", DoDictsort},
    {"e", DoEscape},
    {"escape", DoEscape},
    {"first", DoFirst},
    {"float", DoFloat},
    {"forceescape", DoEscape},
    {"format", DoFormat},
    {"indent", DoIndent},
    {"int", DoInt},
    {"items", DoItems},
    {"join", DoJoin},
    {"last", DoLast},
    {"length", DoLength},
    {"list", DoList},
    {"lower", DoLower},
    {"map", DoMap},
    {"max", [](const Value& v, CallArgs a) { return MinOrMax(v, std::move(a), true); }},
    {"min", [](const Value& v, CallArgs a) { return MinOrMax(v, std::move(a), false); }},
    {"reject",
     [](const Value& v, CallArgs a) { return SelectOrReject(v, std::move(a), false, false); }},
    {"rejectattr",
     [](const Value& v, CallArgs a) { return SelectOrReject(v, std::move(a), false, true); }},
    {"replace", DoReplace},
    {"reverse", DoReverse},
    {"round", DoRound},
    {"safe", DoSafe},
    {"select",
     [](const Value& v, CallArgs a) { return SelectOrReject(v, std::move(a), true, false); }},
    {"selectattr",
     [](const Value& v, CallArgs a) { return SelectOrReject(v, std::move(a), true, true); }},
    {"slice", DoSlice},
    {"sort", DoSort},
    {"string", DoString},
    {"sum", DoSum},
    {"title", DoTitle},
    {"tojson", DoTojson},
    {"trim", DoTrim},
    {"truncate", DoTruncate},
    {"unique", DoUnique},
    {"upper", DoUpper},
    {"wordcount", DoWordcount},
};

// Jinja2 builtin filters not implemented here.
constexpr std::string_view kUnsupportedFilters[] = {"filesizeformat", "groupby",   "pprint",
                                                    "random",         "striptags", "urlencode",
                                                    "urlize",         "wordwrap",  "xmlattr"};

const FilterEntry* FindFilter(std::string_view name) {
  for (const FilterEntry& entry : kFilters) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

// ---- tests ------------------------------------------------------------------

using TestFn = bool (*)(const Value& value, const ValueList& args);

bool OneArg(const char* test, const ValueList& args) {
  if (args.size() != 1) ThrowError(std::string("test '") + test + "' takes exactly one argument");
  return true;
}

bool IsIterable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kString:
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kDict:
    case Value::Kind::kIterator:
    case Value::Kind::kLoop:
      return true;
    default:
      return false;
  }
}

bool Modulo(const Value& value, const Value& divisor, int64_t expected) {
  return Equals(BinaryOp(ast::Op::kMod, value, divisor), Value::Int(expected));
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"odd", [](const Value& v, const ValueList&) { return Modulo(v, Value::Int(2), 1); }},
    {"even", [](const Value& v, const ValueList&) { return Modulo(v, Value::Int(2), 0); }},
    {"divisibleby",
     [](const Value& v, const ValueList& a) {
       return OneArg("divisibleby", a) && Modulo(v, a[0], 0);
     }},
    {"defined", [](const Value& v, const ValueList&) { return !v.is_undefined(); }},
    {"undefined", [](const Value& v, const ValueList&) { return v.is_undefined(); }},
    {"none", [](const Value& v, const ValueList&) { return v.is_none(); }},
    {"boolean", [](const Value& v, const ValueList&) { return v.kind() == Value::Kind::kBool; }},
    {"false", [](const Value& v,
                 const ValueList&) { return v.kind() == Value::Kind::kBool && !v.bool_value(); }},
    {"true", [](const Value& v,
                const ValueList&) { return v.kind() == Value::Kind::kBool && v.bool_value(); }},
    {"integer", [](const Value& v, const ValueList&) { return v.kind() == Value::Kind::kInt; }},
    {"float", [](const Value& v, const ValueList&) { return v.kind() == Value::Kind::kFloat; }},
    {"number", [](const Value& v, const ValueList&) { return v.is_number(); }},
    {"string", [](const Value& v, const ValueList&) { return v.is_string(); }},
    {"mapping", [](const Value& v, const ValueList&) { return v.kind() == Value::Kind::kDict; }},
    {"iterable", [](const Value& v, const ValueList&) { return IsIterable(v); }},
    {"sequence",
     [](const Value& v, const ValueList&) {
       return v.is_undefined() || v.is_string() || v.is_sequence() ||
              v.kind() == Value::Kind::kDict;
     }},
    {"callable",
     [](const Value& v, const ValueList&) {
       return v.kind() == Value::Kind::kCallable || v.kind() == Value::Kind::kLoop ||
              v.is_undefined();
     }},
    {"sameas",
     [](const Value& v, const ValueList& a) { return OneArg("sameas", a) && v.SameAs(a[0]); }},
    {"escaped", [](const Value&, const ValueList&) { return false; }},
    {"in", [](const Value& v, const ValueList& a) { return OneArg("in", a) && Contains(a[0], v); }},
    {"lower", [](const Value& v, const ValueList&) { return pystr::IsLower(ToStr(v)); }},
    {"upper", [](const Value& v, const ValueList&) { return pystr::IsUpper(ToStr(v)); }},
    {"filter",
     [](const Value& v, const ValueList&) {
       return v.is_string() && FilterSupport(v.string_value()) != Support::kUnknown;
     }},
    {"test",
     [](const Value& v, const ValueList&) {
       return v.is_string() && TestSupport(v.string_value()) != Support::kUnknown;
     }},
    {"eq", [](const Value& v,
              const ValueList& a) { return OneArg("eq", a) && CompareOp(ast::Op::kEq, v, a[0]); }},
    {"ne", [](const Value& v,
              const ValueList& a) { return OneArg("ne", a) && CompareOp(ast::Op::kNe, v, a[0]); }},
    {"lt", [](const Value& v,
              const ValueList& a) { return OneArg("lt", a) && CompareOp(ast::Op::kLt, v, a[0]); }},
    {"le", [](const Value& v,
              const ValueList& a) { return OneArg("le", a) && CompareOp(ast::Op::kLe, v, a[0]); }},
    {"gt", [](const Value& v,
              const ValueList& a) { return OneArg("gt", a) && CompareOp(ast::Op::kGt, v, a[0]); }},
    {"ge", [](const Value& v,
              const ValueList& a) { return OneArg("ge", a) && CompareOp(ast::Op::kGe, v, a[0]); }},
};

// Jinja's aliases of the comparison tests.
std::string_view CanonicalTestName(std::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == "<=") return "le";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == ">=") return "ge";
  return name;
}

const TestEntry* FindTest(std::string_view name) {
  name = CanonicalTestName(name);
  for (const TestEntry& entry : kTests) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace

Support FilterSupport(std::string_view name) {
  if (FindFilter(name) != nullptr) return Support::kSupported;
  for (std::string_view unsupported : kUnsupportedFilters) {
    if (name == unsupported) return Support::kUnsupported;
  }
  return Support::kUnknown;
}

Support TestSupport(std::string_view name) {
  return FindTest(name) != nullptr ? Support::kSupported : Support::kUnknown;
}

Value ApplyFilter(const std::string& name, const Value& operand, CallArgs args) {
  const FilterEntry* entry = FindFilter(name);
  if (entry == nullptr) ThrowUnsupported("filter '" + name + "'");
  return entry->fn(operand, std::move(args));
}

bool ApplyTest(const std::string& name, const Value& operand, CallArgs args) {
  const TestEntry* entry = FindTest(name);
  if (entry == nullptr) ThrowUnsupported("test '" + name + "'");
  if (!args.keyword.empty()) ThrowError("test '" + name + "' takes no keyword arguments");
  return entry->fn(operand, args.positional);
}

}  // namespace nightshift::chat
