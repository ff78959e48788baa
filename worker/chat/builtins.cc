// Attribute/item access, Python methods of str/dict/list, operators and the
// template globals. Filters and tests are in filters.cc.
#include "worker/chat/builtins.h"

#include <cmath>
#include <ctime>
#include <limits>

#include "worker/chat/error.h"
#include "worker/chat/pystr.h"
#include "worker/chat/strformat.h"

namespace nightshift::chat {

Value MakeFunction(NativeFunction::Fn fn) {
  return Value::MakeObject(Value::Kind::kCallable, std::make_shared<NativeFunction>(std::move(fn)));
}

ValueList BindArgs(const std::string& function, CallArgs args,
                   std::initializer_list<Param> params) {
  std::vector<const Param*> list;
  for (const Param& p : params) list.push_back(&p);
  if (args.positional.size() > list.size()) {
    ThrowError(function + "() takes at most " + std::to_string(list.size()) + " argument(s) (" +
               std::to_string(args.positional.size()) + " given)");
  }
  ValueList bound(list.size());
  std::vector<bool> given(list.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = std::move(args.positional[i]);
    given[i] = true;
  }
  for (auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < list.size() && name != list[i]->name) ++i;
    if (i == list.size())
      ThrowError(function + "() got an unexpected keyword argument '" + name + "'");
    if (given[i]) ThrowError(function + "() got multiple values for argument '" + name + "'");
    bound[i] = std::move(value);
    given[i] = true;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (given[i]) continue;
    if (!list[i]->default_value) {
      ThrowError(function + "() missing required argument '" + list[i]->name + "'");
    }
    bound[i] = *list[i]->default_value;
  }
  return bound;
}

std::string ObjectTypeRepr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kNamespace:
      return "jinja2.utils.Namespace object";
    case Value::Kind::kLoop:
      return "jinja2.runtime.LoopContext object";
    case Value::Kind::kUndefined:
      return "jinja2.runtime.Undefined object";
    default:
      return TypeName(value) + " object";
  }
}

namespace {

[[noreturn]] void ThrowUndefined(const Value& undefined) {
  ThrowError(undefined.undefined_hint().empty() ? "value is undefined"
                                                : undefined.undefined_hint());
}

Value MissingAttribute(const Value& object, const std::string& name) {
  return Value::Undefined(pystr::Repr(ObjectTypeRepr(object)) + " has no attribute " +
                          pystr::Repr(name));
}

Value MissingElement(const Value& object, const Value& key) {
  if (key.is_string()) return MissingAttribute(object, key.string_value());
  return Value::Undefined(ObjectTypeRepr(object) + " has no element " + ToRepr(key));
}

// Jinja's sandbox answer to a method that would mutate its object.
Value UnsafeAttribute(const Value& object, const std::string& name) {
  return Value::Undefined("access to attribute " + pystr::Repr(name) + " of " +
                          pystr::Repr(TypeName(object)) + " object is unsafe.");
}

std::string RequireString(const Value& value, const std::string& what) {
  if (!value.is_string()) {
    ThrowError(what + " must be str, not " + TypeName(value));
  }
  return value.string_value();
}

std::optional<std::string> OptionalString(const Value& value, const std::string& what) {
  if (value.is_none()) return std::nullopt;
  return RequireString(value, what);
}

int64_t RequireInt(const Value& value, const std::string& what) {
  if (value.kind() != Value::Kind::kInt && value.kind() != Value::Kind::kBool) {
    ThrowError("'" + TypeName(value) + "' object cannot be interpreted as an integer (" + what +
               ")");
  }
  return value.AsInteger();
}

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  items.reserve(parts.size());
  for (const std::string& part : parts) items.push_back(Value::String(part));
  return Value::List(std::move(items));
}

// Python's slice index adjustment: the code-point/element indices a slice
// selects from a sequence of `length`.
std::vector<int64_t> SliceIndices(int64_t length, const Value& start_v, const Value& stop_v,
                                  const Value& step_v) {
  auto index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      ThrowError("slice indices must be integers or None or have an __index__ method");
    }
    return v.AsInteger();
  };
  int64_t step = index(step_v).value_or(1);
  if (step == 0) ThrowError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> i, int64_t fallback) {
    if (!i) return fallback;
    int64_t v = *i;
    if (v < 0) {
      v += length;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= length) {
      v = step < 0 ? length - 1 : length;
    }
    return v;
  };
  int64_t start = clamp(index(start_v), step < 0 ? length - 1 : 0);
  int64_t stop = clamp(index(stop_v), step < 0 ? -1 : length);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  return picked;
}

std::string SliceString(const std::string& text, const Value& start, const Value& stop,
                        const Value& step) {
  std::u32string cps = pystr::Decode(text);
  std::u32string out;
  for (int64_t i : SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step)) {
    out.push_back(cps[i]);
  }
  return pystr::Encode(out);
}

// str.startswith / str.endswith.
Value AffixTest(const std::string& text, CallArgs args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  ValueList a =
      BindArgs(name, std::move(args),
               {{"prefix", std::nullopt}, {"start", Value::None()}, {"end", Value::None()}});
  std::string subject = text;
  if (!a[1].is_none() || !a[2].is_none()) subject = SliceString(text, a[1], a[2], Value::None());
  ValueList candidates = a[0].kind() == Value::Kind::kTuple ? a[0].items() : ValueList{a[0]};
  for (const Value& candidate : candidates) {
    if (!candidate.is_string()) {
      ThrowError(std::string(name) + " first arg must be str or a tuple of str, not " +
                 TypeName(candidate));
    }
    const std::string& affix = candidate.string_value();
    bool match =
        affix.size() <= subject.size() &&
        (prefix ? subject.compare(0, affix.size(), affix) == 0
                : subject.compare(subject.size() - affix.size(), affix.size(), affix) == 0);
    if (match) return Value::Bool(true);
  }
  return Value::Bool(false);
}

Value StrJoin(const std::string& separator, CallArgs args) {
  ValueList a = BindArgs("join", std::move(args), {{"iterable", std::nullopt}});
  ValueList items = ValueOrThrow(Iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      ThrowError("sequence item " + std::to_string(i) + ": expected str instance, " +
                 TypeName(items[i]) + " found");
    }
    if (i > 0) out += separator;
    out += items[i].string_value();
  }
  return Value::String(std::move(out));
}

Value StrIndex(const std::string& text, CallArgs args, const char* name, bool from_right,
               bool must_find) {
  ValueList a = BindArgs(name, std::move(args), {{"sub", std::nullopt}});
  std::string sub = RequireString(a[0], std::string(name) + "() argument");
  int64_t at = from_right ? pystr::RFind(text, sub) : pystr::Find(text, sub);
  if (at < 0 && must_find) ThrowError("substring not found");
  return Value::Int(at);
}

using Method = Value (*)(const std::string& self, CallArgs args);

Value StripMethod(const std::string& self, CallArgs args, const char* name, pystr::StripSide side) {
  ValueList a = BindArgs(name, std::move(args), {{"chars", Value::None()}});
  return Value::String(pystr::Strip(self, OptionalString(a[0], "strip arg"), side));
}

Value SplitMethod(const std::string& self, CallArgs args, bool from_right) {
  ValueList a = BindArgs(from_right ? "rsplit" : "split", std::move(args),
                         {{"sep", Value::None()}, {"maxsplit", Value::Int(-1)}});
  std::optional<std::string> sep = OptionalString(a[0], "separator");
  int64_t maxsplit = RequireInt(a[1], "maxsplit");
  auto parts = from_right ? pystr::RSplit(self, sep, maxsplit) : pystr::Split(self, sep, maxsplit);
  return StringList(ValueOrThrow(std::move(parts)));
}

Value NoArgs(const char* name, CallArgs args) {
  BindArgs(name, std::move(args), {});
  return Value();
}

struct StrMethod {
  const char* name;
  Method method;
};

const StrMethod kStrMethods[] = {
    {"upper",
     [](const std::string& s, CallArgs a) {
       NoArgs("upper", std::move(a));
       return Value::String(pystr::Upper(s));
     }},
    {"lower",
     [](const std::string& s, CallArgs a) {
       NoArgs("lower", std::move(a));
       return Value::String(pystr::Lower(s));
     }},
    {"title",
     [](const std::string& s, CallArgs a) {
       NoArgs("title", std::move(a));
       return Value::String(pystr::Title(s));
     }},
    {"capitalize",
     [](const std::string& s, CallArgs a) {
       NoArgs("capitalize", std::move(a));
       return Value::String(pystr::Capitalize(s));
     }},
    {"strip",
     [](const std::string& s, CallArgs a) {
       return StripMethod(s, std::move(a), "strip", pystr::StripSide::kBoth);
     }},
    {"lstrip",
     [](const std::string& s, CallArgs a) {
       return StripMethod(s, std::move(a), "lstrip", pystr::StripSide::kLeft);
     }},
    {"rstrip",
     [](const std::string& s, CallArgs a) {
       return StripMethod(s, std::move(a), "rstrip", pystr::StripSide::kRight);
     }},
    {"split", [](const std::string& s, CallArgs a) { return SplitMethod(s, std::move(a), false); }},
    {"rsplit", [](const std::string& s, CallArgs a) { return SplitMethod(s, std::move(a), true); }},
    {"splitlines",
     [](const std::string& s, CallArgs a) {
       ValueList v = BindArgs("splitlines", std::move(a), {{"keepends", Value::Bool(false)}});
       return StringList(pystr::SplitLines(s, Truthy(v[0])));
     }},
    {"startswith",
     [](const std::string& s, CallArgs a) { return AffixTest(s, std::move(a), true); }},
    {"endswith",
     [](const std::string& s, CallArgs a) { return AffixTest(s, std::move(a), false); }},
    {"replace",
     [](const std::string& s, CallArgs a) {
       ValueList v =
           BindArgs("replace", std::move(a),
                    {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::Int(-1)}});
       return Value::String(pystr::Replace(s, RequireString(v[0], "replace() argument 1"),
                                           RequireString(v[1], "replace() argument 2"),
                                           RequireInt(v[2], "count")));
     }},
    {"find", [](const std::string& s,
                CallArgs a) { return StrIndex(s, std::move(a), "find", false, false); }},
    {"rfind", [](const std::string& s,
                 CallArgs a) { return StrIndex(s, std::move(a), "rfind", true, false); }},
    {"index", [](const std::string& s,
                 CallArgs a) { return StrIndex(s, std::move(a), "index", false, true); }},
    {"rindex", [](const std::string& s,
                  CallArgs a) { return StrIndex(s, std::move(a), "rindex", true, true); }},
    {"count",
     [](const std::string& s, CallArgs a) {
       ValueList v = BindArgs("count", std::move(a), {{"sub", std::nullopt}});
       return Value::Int(pystr::Count(s, RequireString(v[0], "count() argument")));
     }},
    {"join", [](const std::string& s, CallArgs a) { return StrJoin(s, std::move(a)); }},
    {"isdigit",
     [](const std::string& s, CallArgs a) {
       NoArgs("isdigit", std::move(a));
       return Value::Bool(pystr::IsDigit(s));
     }},
    {"isalpha",
     [](const std::string& s, CallArgs a) {
       NoArgs("isalpha", std::move(a));
       return Value::Bool(pystr::IsAlpha(s));
     }},
    {"isalnum",
     [](const std::string& s, CallArgs a) {
       NoArgs("isalnum", std::move(a));
       return Value::Bool(pystr::IsAlnum(s));
     }},
    {"isspace",
     [](const std::string& s, CallArgs a) {
       NoArgs("isspace", std::move(a));
       return Value::Bool(pystr::IsSpaceString(s));
     }},
    {"islower",
     [](const std::string& s, CallArgs a) {
       NoArgs("islower", std::move(a));
       return Value::Bool(pystr::IsLower(s));
     }},
    {"isupper",
     [](const std::string& s, CallArgs a) {
       NoArgs("isupper", std::move(a));
       return Value::Bool(pystr::IsUpper(s));
     }},
    {"removeprefix",
     [](const std::string& s, CallArgs a) {
       ValueList v = BindArgs("removeprefix", std::move(a), {{"prefix", std::nullopt}});
       std::string p = RequireString(v[0], "removeprefix() argument");
       return Value::String(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
     }},
    {"removesuffix",
     [](const std::string& s, CallArgs a) {
       ValueList v = BindArgs("removesuffix", std::move(a), {{"suffix", std::nullopt}});
       std::string p = RequireString(v[0], "removesuffix() argument");
       bool ends =
           !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
       return Value::String(ends ? s.substr(0, s.size() - p.size()) : s);
     }},
    {"format", [](const std::string& s, CallArgs a) { return Value::String(StrFormat(s, a)); }},
};

// Python str methods not implemented here: accessing one is an error
// naming it rather than Undefined.
constexpr std::string_view kUnsupportedStrMethods[] = {
    "casefold",   "center",    "encode",       "expandtabs", "format_map",
    "isascii",    "isdecimal", "isidentifier", "isnumeric",  "isprintable",
    "istitle",    "ljust",     "maketrans",    "partition",  "rjust",
    "rpartition", "swapcase",  "translate",    "zfill"};

Value BindMethod(const Value& self, Method method) {
  std::string text = self.string_value();
  return MakeFunction([text, method](CallArgs args) { return method(text, std::move(args)); });
}

std::optional<Value> StrMethodOf(const Value& self, const std::string& name) {
  for (const StrMethod& m : kStrMethods) {
    if (name == m.name) return BindMethod(self, m.method);
  }
  for (std::string_view unsupported : kUnsupportedStrMethods) {
    if (name == unsupported) ThrowUnsupported("method 'str." + name + "'");
  }
  return std::nullopt;
}

Value DictItems(const Dict& dict) {
  ValueList items;
  items.reserve(dict.size());
  for (const auto& [key, value] : dict.items()) items.push_back(Value::Tuple({key, value}));
  return Value::List(std::move(items));
}

// A dict method (bound), an unsafe-method Undefined, or nullopt when `name`
// is no dict method.
std::optional<Value> DictMethod(const Value& self, const std::string& name) {
  if (name == "items") {
    return MakeFunction([self](CallArgs a) {
      NoArgs("items", std::move(a));
      return DictItems(self.dict());
    });
  }
  if (name == "keys") {
    return MakeFunction([self](CallArgs a) {
      NoArgs("keys", std::move(a));
      return Value::List(ValueOrThrow(Iterate(self)));
    });
  }
  if (name == "values") {
    return MakeFunction([self](CallArgs a) {
      NoArgs("values", std::move(a));
      ValueList values;
      for (const auto& item : self.dict().items()) values.push_back(item.second);
      return Value::List(std::move(values));
    });
  }
  if (name == "get") {
    return MakeFunction([self](CallArgs a) {
      ValueList v =
          BindArgs("get", std::move(a), {{"key", std::nullopt}, {"default", Value::None()}});
      const Value* found = self.dict().Find(v[0]);
      return found ? *found : v[1];
    });
  }
  if (name == "copy") {
    return MakeFunction([self](CallArgs a) {
      NoArgs("copy", std::move(a));
      return Value::MakeDict(self.dict());
    });
  }
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" ||
      name == "update") {
    return UnsafeAttribute(self, name);
  }
  if (name == "fromkeys") ThrowUnsupported("method 'dict.fromkeys'");
  return std::nullopt;
}

std::optional<Value> SequenceMethod(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    bool index = name == "index";
    return MakeFunction([self, index](CallArgs a) {
      ValueList v = BindArgs(index ? "index" : "count", std::move(a), {{"value", std::nullopt}});
      int64_t count = 0;
      for (size_t i = 0; i < self.items().size(); ++i) {
        if (!Equals(self.items()[i], v[0])) continue;
        if (index) return Value::Int(static_cast<int64_t>(i));
        ++count;
      }
      if (index) ThrowError(ToRepr(v[0]) + " is not in list");
      return Value::Int(count);
    });
  }
  if (self.kind() == Value::Kind::kList) {
    if (name == "copy") {
      return MakeFunction([self](CallArgs a) {
        NoArgs("copy", std::move(a));
        return Value::List(self.items());
      });
    }
    static const char* const kMutators[] = {"append", "clear",  "extend",  "insert",
                                            "pop",    "remove", "reverse", "sort"};
    for (const char* mutator : kMutators) {
      if (name == mutator) return UnsafeAttribute(self, name);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> PythonAttribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) ThrowUndefined(object);
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') return UnsafeAttribute(object, name);
  switch (object.kind()) {
    case Value::Kind::kString:
      return StrMethodOf(object, name);
    case Value::Kind::kDict:
      return DictMethod(object, name);
    case Value::Kind::kNamespace: {
      const Value* found = object.dict().Find(name);
      return found ? std::optional<Value>(*found) : std::nullopt;
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return SequenceMethod(object, name);
    default:
      return std::nullopt;
  }
}

Value GetAttribute(const Value& object, const std::string& name) {
  if (std::optional<Value> attribute = PythonAttribute(object, name)) return *attribute;
  if (object.kind() == Value::Kind::kDict) {
    if (const Value* found = object.dict().Find(name)) return *found;
  }
  return MissingAttribute(object, name);
}

Value GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) ThrowUndefined(object);
  switch (object.kind()) {
    case Value::Kind::kDict: {
      if (key.kind() == Value::Kind::kList || key.kind() == Value::Kind::kDict) break;
      const Value* found = object.dict().Find(key);
      if (found) return *found;
      break;
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kString: {
      if (key.kind() != Value::Kind::kInt && key.kind() != Value::Kind::kBool) break;
      int64_t length = ValueOrThrow(Length(object));
      int64_t i = key.AsInteger();
      if (i < 0) i += length;
      if (i < 0 || i >= length) return MissingElement(object, key);
      if (!object.is_string()) return object.items()[i];
      return Value::String(
          SliceString(object.string_value(), Value::Int(i), Value::Int(i + 1), Value::None()));
    }
    default:
      break;
  }
  if (key.is_string()) {
    if (std::optional<Value> attribute = PythonAttribute(object, key.string_value()))
      return *attribute;
  }
  return MissingElement(object, key);
}

Value GetSlice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) ThrowUndefined(object);
  if (object.is_string())
    return Value::String(SliceString(object.string_value(), start, stop, step));
  if (!object.is_sequence())
    return Value::Undefined(ObjectTypeRepr(object) + " has no element slice");
  const ValueList& items = object.items();
  ValueList picked;
  for (int64_t i : SliceIndices(static_cast<int64_t>(items.size()), start, stop, step)) {
    picked.push_back(items[i]);
  }
  return object.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(picked))
                                              : Value::List(std::move(picked));
}

// ---- operators --------------------------------------------------------------

namespace {

// Results larger than this (repetition, concatenation) are refused rather
// than exhausting memory.
constexpr size_t kMaxResultBytes = size_t{256} << 20;

[[noreturn]] void UnsupportedOperands(const char* op, const Value& a, const Value& b) {
  ThrowError(std::string("unsupported operand type(s) for ") + op + ": '" + TypeName(a) +
             "' and '" + TypeName(b) + "'");
}

bool IsIntLike(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}

[[noreturn]] void ThrowOverflow() {
  ThrowError("integer overflow (results beyond 64 bits are not supported)");
}

// x op y on int64, failing on overflow.
template <typename Op>
int64_t Checked(Op op, int64_t x, int64_t y) {
  int64_t result;
  if (op(x, y, &result)) ThrowOverflow();
  return result;
}

bool AddOverflow(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool SubOverflow(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool MulOverflow(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

double FloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value Arithmetic(ast::Op op, const Value& a, const Value& b, const char* symbol) {
  if (IsIntLike(a) && IsIntLike(b)) {
    int64_t x = a.AsInteger(), y = b.AsInteger();
    switch (op) {
      case ast::Op::kAdd:
        return Value::Int(Checked(AddOverflow, x, y));
      case ast::Op::kSub:
        return Value::Int(Checked(SubOverflow, x, y));
      case ast::Op::kMul:
        return Value::Int(Checked(MulOverflow, x, y));
      case ast::Op::kDiv:
        if (y == 0) ThrowError("division by zero");
        return Value::Float(static_cast<double>(x) / static_cast<double>(y));
      case ast::Op::kFloorDiv:
      case ast::Op::kMod: {
        if (y == 0) {
          ThrowError(op == ast::Op::kMod ? "integer modulo by zero"
                                         : "integer division or modulo by zero");
        }
        if (x == std::numeric_limits<int64_t>::min() && y == -1) ThrowOverflow();
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::Int(op == ast::Op::kMod ? m : q);
      }
      case ast::Op::kPow: {
        if (y < 0) {
          if (x == 0) ThrowError("0.0 cannot be raised to a negative power");
          return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        }
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if (e & 1) result = Checked(MulOverflow, result, base);
          if (e > 1) base = Checked(MulOverflow, base, base);
        }
        return Value::Int(result);
      }
      default:
        break;
    }
  }
  double x = a.AsDouble(), y = b.AsDouble();
  switch (op) {
    case ast::Op::kAdd:
      return Value::Float(x + y);
    case ast::Op::kSub:
      return Value::Float(x - y);
    case ast::Op::kMul:
      return Value::Float(x * y);
    case ast::Op::kDiv:
      if (y == 0) ThrowError("float division by zero");
      return Value::Float(x / y);
    case ast::Op::kFloorDiv:
      if (y == 0) ThrowError("float floor division by zero");
      return Value::Float(std::floor(x / y));
    case ast::Op::kMod:
      if (y == 0) ThrowError("float modulo");
      return Value::Float(FloorMod(x, y));
    case ast::Op::kPow:
      if (x == 0 && y < 0) ThrowError("0.0 cannot be raised to a negative power");
      return Value::Float(std::pow(x, y));
    default:
      UnsupportedOperands(symbol, a, b);
  }
}

Value Repeat(const Value& sequence, int64_t times) {
  times = std::max<int64_t>(times, 0);
  if (sequence.is_string()) {
    const std::string& s = sequence.string_value();
    if (!s.empty() && static_cast<uint64_t>(times) > kMaxResultBytes / s.size()) {
      ThrowError("repetition result is too large");
    }
    std::string out;
    out.reserve(s.size() * times);
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::String(std::move(out));
  }
  const ValueList& items = sequence.items();
  if (!items.empty() && static_cast<uint64_t>(times) > kMaxResultBytes / 64 / items.size()) {
    ThrowError("repetition result is too large");
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return sequence.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                                : Value::List(std::move(out));
}

Value Add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return Arithmetic(ast::Op::kAdd, a, b, "+");
  if (a.is_string() && b.is_string()) return Value::String(a.string_value() + b.string_value());
  if (a.is_sequence() && a.kind() == b.kind()) {
    ValueList items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return a.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(items))
                                           : Value::List(std::move(items));
  }
  if (a.is_string() || a.is_sequence()) {
    ThrowError("can only concatenate " + TypeName(a) + " (not \"" + TypeName(b) + "\") to " +
               TypeName(a));
  }
  UnsupportedOperands("+", a, b);
}

Value Multiply(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return Arithmetic(ast::Op::kMul, a, b, "*");
  if ((a.is_string() || a.is_sequence()) && IsIntLike(b)) return Repeat(a, b.AsInteger());
  if ((b.is_string() || b.is_sequence()) && IsIntLike(a)) return Repeat(b, a.AsInteger());
  if (a.is_string() || a.is_sequence() || b.is_string() || b.is_sequence()) {
    ThrowError("can't multiply sequence by non-int of type '" +
               TypeName(a.is_string() || a.is_sequence() ? b : a) + "'");
  }
  UnsupportedOperands("*", a, b);
}

const char* Symbol(ast::Op op) {
  switch (op) {
    case ast::Op::kAdd:
      return "+";
    case ast::Op::kSub:
      return "-";
    case ast::Op::kMul:
      return "*";
    case ast::Op::kDiv:
      return "/";
    case ast::Op::kFloorDiv:
      return "//";
    case ast::Op::kMod:
      return "%";
    case ast::Op::kPow:
      return "**";
    case ast::Op::kLt:
      return "<";
    case ast::Op::kLe:
      return "<=";
    case ast::Op::kGt:
      return ">";
    case ast::Op::kGe:
      return ">=";
    default:
      return "?";
  }
}

}  // namespace

Value UnaryOp(ast::Op op, const Value& operand) {
  if (operand.is_undefined()) ThrowUndefined(operand);
  if (!operand.is_number()) {
    ThrowError(std::string("bad operand type for unary ") + (op == ast::Op::kNeg ? "-" : "+") +
               ": '" + TypeName(operand) + "'");
  }
  if (operand.kind() == Value::Kind::kFloat) {
    return Value::Float(op == ast::Op::kNeg ? -operand.float_value() : operand.float_value());
  }
  int64_t v = operand.AsInteger();
  if (op == ast::Op::kNeg) v = Checked(SubOverflow, 0, v);
  return Value::Int(v);
}

Value BinaryOp(ast::Op op, const Value& left, const Value& right) {
  if (op == ast::Op::kConcat) {
    std::string out = ToStr(left);
    out += ToStr(right);
    return Value::String(std::move(out));
  }
  if (left.is_undefined()) ThrowUndefined(left);
  if (right.is_undefined()) ThrowUndefined(right);
  switch (op) {
    case ast::Op::kAdd:
      return Add(left, right);
    case ast::Op::kMul:
      return Multiply(left, right);
    case ast::Op::kMod:
      if (left.is_string()) return Value::String(PercentFormat(left.string_value(), right));
      [[fallthrough]];
    default:
      if (!left.is_number() || !right.is_number()) UnsupportedOperands(Symbol(op), left, right);
      return Arithmetic(op, left, right, Symbol(op));
  }
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        ThrowError("'in <string>' requires string as left operand, not " + TypeName(item));
      }
      return container.string_value().find(item.string_value()) != std::string::npos;
    case Value::Kind::kDict:
      if (item.kind() == Value::Kind::kList || item.kind() == Value::Kind::kDict) {
        ThrowError("unhashable type: '" + TypeName(item) + "'");
      }
      return container.dict().Find(item) != nullptr;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kIterator:
    case Value::Kind::kUndefined: {
      for (const Value& element : ValueOrThrow(Iterate(container))) {
        if (Equals(element, item)) return true;
      }
      return false;
    }
    default:
      ThrowError("argument of type '" + TypeName(container) + "' is not iterable");
  }
}

bool CompareOp(ast::Op op, const Value& left, const Value& right) {
  switch (op) {
    case ast::Op::kEq:
      return Equals(left, right);
    case ast::Op::kNe:
      return !Equals(left, right);
    case ast::Op::kIn:
      return Contains(right, left);
    case ast::Op::kNotIn:
      return !Contains(right, left);
    default:
      break;
  }
  if (left.is_undefined()) ThrowUndefined(left);
  if (right.is_undefined()) ThrowUndefined(right);
  int c = ValueOrThrow(Compare(left, right, Symbol(op)));
  switch (op) {
    case ast::Op::kLt:
      return c < 0;
    case ast::Op::kLe:
      return c <= 0;
    case ast::Op::kGt:
      return c > 0;
    default:
      return c >= 0;
  }
}

// ---- globals ----------------------------------------------------------------

namespace {

// The sandbox's MAX_RANGE.
constexpr int64_t kMaxRange = 100000;

Value Range(CallArgs args) {
  if (!args.keyword.empty()) ThrowError("range() takes no keyword arguments");
  const ValueList& a = args.positional;
  if (a.empty() || a.size() > 3)
    ThrowError("range expected 1 to 3 arguments, got " + std::to_string(a.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (a.size() == 1) {
    stop = RequireInt(a[0], "range");
  } else {
    start = RequireInt(a[0], "range");
    stop = RequireInt(a[1], "range");
    if (a.size() == 3) step = RequireInt(a[2], "range");
  }
  if (step == 0) ThrowError("range() arg 3 must not be zero");
  ValueList items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      ThrowError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    items.push_back(Value::Int(i));
  }
  return Value::List(std::move(items));
}

// Python's dict(*args, **kwargs): a mapping or iterable of pairs, then keywords.
Dict DictFromArgs(const std::string& function, CallArgs args) {
  if (args.positional.size() > 1) {
    ThrowError(function + " expected at most 1 argument, got " +
               std::to_string(args.positional.size()));
  }
  Dict dict;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.kind() == Value::Kind::kDict) {
      dict = source.dict();
    } else {
      for (const Value& pair : ValueOrThrow(Iterate(source))) {
        ValueList kv = ValueOrThrow(Iterate(pair));
        if (kv.size() != 2)
          ThrowError("dictionary update sequence element has length " + std::to_string(kv.size()) +
                     "; 2 is required");
        dict.Set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) dict.Set(Value::String(key), std::move(value));
  return dict;
}

Value RaiseException(CallArgs args) {
  ValueList a = BindArgs("raise_exception", std::move(args), {{"message", std::nullopt}});
  throw TemplateError{StatusCode::kInvalidArgument, ToStr(a[0]), 0, true};
}

Value StrftimeNow(CallArgs args) {
  ValueList a = BindArgs("strftime_now", std::move(args), {{"format", std::nullopt}});
  std::string format = RequireString(a[0], "strftime_now() argument");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256, '\0');
  size_t n = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
  if (n == 0 && !format.empty())
    ThrowError("strftime_now(): format produced no output or is too long");
  out.resize(n);
  return Value::String(std::move(out));
}

Value Unsupported(const std::string& name) {
  return MakeFunction([name](CallArgs) -> Value { ThrowUnsupported("global '" + name + "'"); });
}

}  // namespace

Dict Globals() {
  Dict globals;
  globals.Set(Value::String("range"), MakeFunction(Range));
  globals.Set(Value::String("dict"), MakeFunction([](CallArgs a) {
                return Value::MakeDict(DictFromArgs("dict", std::move(a)));
              }));
  globals.Set(Value::String("namespace"), MakeFunction([](CallArgs a) {
                return Value::Namespace(DictFromArgs("namespace", std::move(a)));
              }));
  globals.Set(Value::String("raise_exception"), MakeFunction(RaiseException));
  globals.Set(Value::String("strftime_now"), MakeFunction(StrftimeNow));
  for (const char* name : {"cycler", "joiner", "lipsum"})
    globals.Set(Value::String(name), Unsupported(name));
  return globals;
}

}  // namespace nightshift::chat
