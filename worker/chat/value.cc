#include "worker/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "worker/chat/pystr.h"

namespace nightshift::chat {

// ---- Dict -------------------------------------------------------------------

const Value* Dict::Find(const std::string& key) const {
  auto it = string_index_.find(key);
  return it == string_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(key.string_value());
  for (const auto& [k, v] : items_) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  if (key.is_string()) {
    auto [it, inserted] = string_index_.emplace(key.string_value(), items_.size());
    if (!inserted) {
      items_[it->second].second = std::move(value);
      return;
    }
    items_.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : items_) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

// ---- Value ------------------------------------------------------------------

Value Value::Undefined(std::string hint) {
  Value v;
  v.text_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.scalar_.b = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.scalar_.i = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.scalar_.f = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(s);
  return v;
}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::Namespace(Dict attributes) {
  Value v = MakeDict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::Iterator(std::string type_name, ValueList items) {
  Value v;
  v.kind_ = Kind::kIterator;
  v.iterator_ = std::make_shared<IteratorState>();
  v.iterator_->type_name = std::move(type_name);
  v.iterator_->items = std::move(items);
  return v;
}

Value Value::MakeObject(Kind kind, std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = kind;
  v.object_ = std::move(object);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null:
      return None();
    case Type::boolean:
      return Bool(json.get<bool>());
    case Type::number_integer:
      return Int(json.get<int64_t>());
    case Type::number_unsigned: {
      auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Int(static_cast<int64_t>(u));
      }
      return Float(static_cast<double>(u));
    }
    case Type::number_float:
      return Float(json.get<double>());
    case Type::string:
      return String(json.get<std::string>());
    case Type::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case Type::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.Set(String(key), FromJson(item));
      return MakeDict(std::move(dict));
    }
    default:  // binary, discarded: never produced by the JSON parser
      return None();
  }
}

double Value::AsDouble() const {
  switch (kind_) {
    case Kind::kBool:
      return scalar_.b ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(scalar_.i);
    default:
      return scalar_.f;
  }
}

bool Value::SameAs(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kList:
    case Kind::kTuple:
      return list_ == other.list_;
    case Kind::kDict:
    case Kind::kNamespace:
      return dict_ == other.dict_;
    case Kind::kIterator:
      return iterator_ == other.iterator_;
    case Kind::kCallable:
    case Kind::kLoop:
      return object_ == other.object_;
    default:
      return Equals(*this, other);
  }
}

// ---- Python semantics -------------------------------------------------------

std::string TypeName(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kIterator:
      return value.iterator().type_name;
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kLoop:
      return "LoopContext";
  }
  return "object";
}

bool Truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return value.bool_value();
    case Value::Kind::kInt:
      return value.int_value() != 0;
    case Value::Kind::kFloat:
      return value.float_value() != 0.0;
    case Value::Kind::kString:
      return !value.string_value().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !value.items().empty();
    case Value::Kind::kDict:
      return !value.dict().empty();
    default:
      return true;
  }
}

namespace {

bool SequencesEqual(const ValueList& a, const ValueList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!Equals(a[i], b[i])) return false;
  }
  return true;
}

bool DictsEqual(const Dict& a, const Dict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a.items()) {
    const Value* other = b.Find(key);
    if (other == nullptr || !Equals(value, *other)) return false;
  }
  return true;
}

bool NumbersEqual(const Value& a, const Value& b) {
  if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
    return a.AsInteger() == b.AsInteger();
  }
  return a.AsDouble() == b.AsDouble();
}

}  // namespace

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return NumbersEqual(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.string_value() == b.string_value();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return SequencesEqual(a.items(), b.items());
    case Value::Kind::kDict:
      return DictsEqual(a.dict(), b.dict());
    default:
      return a.SameAs(b);
  }
}

StatusOr<int> Compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      int64_t x = a.AsInteger(), y = b.AsInteger();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    double x = a.AsDouble(), y = b.AsDouble();
    return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as "equal" to nothing ordered
  }
  if (a.is_string() && b.is_string()) {
    int c = a.string_value().compare(b.string_value());  // byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    const ValueList& x = a.items();
    const ValueList& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return InvalidArgument(std::string("'") + op + "' not supported between instances of '" +
                         TypeName(a) + "' and '" + TypeName(b) + "'");
}

std::string FormatFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  std::string sign = std::signbit(f) ? "-" : "";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), std::fabs(f), std::chars_format::scientific);
  std::string sci(buf, result.ptr);  // "d.ddde+XX" or "de+XX"
  size_t e_at = sci.find('e');
  std::string digits = sci.substr(0, e_at);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::atoi(sci.c_str() + e_at + 1);
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return sign + mantissa + exp_buf;
  }
  int point = exponent + 1;  // digits before the decimal point
  if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
  if (point >= static_cast<int>(digits.size())) {
    return sign + digits + std::string(point - digits.size(), '0') + ".0";
  }
  return sign + digits.substr(0, point) + "." + digits.substr(point);
}

namespace {

std::string JoinRepr(const ValueList& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += ToRepr(items[i]);
  }
  return out;
}

std::string DictRepr(const Dict& dict) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : dict.items()) {
    if (!first) out += ", ";
    first = false;
    out += ToRepr(key) + ": " + ToRepr(value);
  }
  return out + "}";
}

}  // namespace

std::string ToStr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.int_value());
    case Value::Kind::kFloat:
      return FormatFloat(value.float_value());
    case Value::Kind::kString:
      return value.string_value();
    case Value::Kind::kList:
      return "[" + JoinRepr(value.items()) + "]";
    case Value::Kind::kTuple:
      return "(" + JoinRepr(value.items()) + (value.items().size() == 1 ? ",)" : ")");
    case Value::Kind::kDict:
      return DictRepr(value.dict());
    case Value::Kind::kNamespace:
      return "<Namespace " + DictRepr(value.dict()) + ">";
    case Value::Kind::kIterator:
      return "<" + value.iterator().type_name + " object>";
    case Value::Kind::kCallable:
      return "<function>";
    case Value::Kind::kLoop:
      return "<LoopContext>";
  }
  return "";
}

std::string ToRepr(const Value& value) {
  if (value.is_string()) return pystr::Repr(value.string_value());
  if (value.is_undefined()) return "Undefined";
  return ToStr(value);
}

StatusOr<ValueList> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return value.items();
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(value.dict().size());
      for (const auto& item : value.dict().items()) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      std::u32string cps = pystr::Decode(value.string_value());
      chars.reserve(cps.size());
      for (char32_t cp : cps) chars.push_back(Value::String(pystr::Encode(std::u32string(1, cp))));
      return chars;
    }
    case Value::Kind::kIterator: {
      IteratorState& state = value.iterator();
      if (state.consumed) return ValueList{};
      state.consumed = true;
      return state.items;
    }
    default:
      return InvalidArgument("'" + TypeName(value) + "' object is not iterable");
  }
}

StatusOr<int64_t> Length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(pystr::Length(value.string_value()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return static_cast<int64_t>(value.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(value.dict().size());
    default:
      return InvalidArgument("object of type '" + TypeName(value) + "' has no len()");
  }
}

// ---- json.dumps -------------------------------------------------------------

namespace {

void AppendJsonString(std::string_view text, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  std::u32string cps = pystr::Decode(text);
  char buf[16];
  for (char32_t cp : cps) {
    switch (cp) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp == 0x7F)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out->append(buf);
    } else if (ensure_ascii && cp > 0x7F) {
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out->append(buf);
    } else {
      AppendUtf8(cp, out);
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return FormatFloat(f);
}

class JsonWriter {
 public:
  JsonWriter(const JsonFormat& format, std::string* out) : format_(format), out_(out) {}

  Status Write(const Value& value, int depth) {
    switch (value.kind()) {
      case Value::Kind::kNone:
        out_->append("null");
        return Status::Ok();
      case Value::Kind::kBool:
        out_->append(value.bool_value() ? "true" : "false");
        return Status::Ok();
      case Value::Kind::kInt:
        out_->append(std::to_string(value.int_value()));
        return Status::Ok();
      case Value::Kind::kFloat:
        out_->append(JsonFloat(value.float_value()));
        return Status::Ok();
      case Value::Kind::kString:
        AppendJsonString(value.string_value(), format_.ensure_ascii, out_);
        return Status::Ok();
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        return WriteList(value.items(), depth);
      case Value::Kind::kDict:
        return WriteDict(value.dict(), depth);
      default:
        return InvalidArgument("Object of type " + TypeName(value) + " is not JSON serializable");
    }
  }

 private:
  // Writes the opening newline+indent of an item at `depth` (or the item
  // separator before any item but the first).
  void BeginItem(bool first, int depth) {
    if (!first) out_->append(format_.item_separator);
    if (format_.indent) NewLine(depth);
  }

  void NewLine(int depth) {
    out_->push_back('\n');
    for (int i = 0; i < depth; ++i) out_->append(*format_.indent);
  }

  Status WriteList(const ValueList& items, int depth) {
    if (items.empty()) {
      out_->append("[]");
      return Status::Ok();
    }
    out_->push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      BeginItem(i == 0, depth + 1);
      NS_RETURN_IF_ERROR(Write(items[i], depth + 1));
    }
    if (format_.indent) NewLine(depth);
    out_->push_back(']');
    return Status::Ok();
  }

  static StatusOr<std::string> KeyString(const Value& key) {
    switch (key.kind()) {
      case Value::Kind::kString:
        return key.string_value();
      case Value::Kind::kInt:
        return std::to_string(key.int_value());
      case Value::Kind::kFloat:
        return JsonFloat(key.float_value());
      case Value::Kind::kBool:
        return std::string(key.bool_value() ? "true" : "false");
      case Value::Kind::kNone:
        return std::string("null");
      default:
        return InvalidArgument("keys must be str, int, float, bool or None, not " + TypeName(key));
    }
  }

  Status WriteDict(const Dict& dict, int depth) {
    if (dict.empty()) {
      out_->append("{}");
      return Status::Ok();
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.items()) entries.push_back(&entry);
    if (format_.sort_keys) NS_RETURN_IF_ERROR(SortByKey(&entries));
    out_->push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      BeginItem(i == 0, depth + 1);
      NS_ASSIGN_OR_RETURN(std::string key, KeyString(entries[i]->first));
      AppendJsonString(key, format_.ensure_ascii, out_);
      out_->append(format_.key_separator);
      NS_RETURN_IF_ERROR(Write(entries[i]->second, depth + 1));
    }
    if (format_.indent) NewLine(depth);
    out_->push_back('}');
    return Status::Ok();
  }

  static Status SortByKey(std::vector<const std::pair<Value, Value>*>* entries) {
    Status error;
    std::stable_sort(entries->begin(), entries->end(), [&error](auto* a, auto* b) {
      StatusOr<int> c = Compare(a->first, b->first, "<");
      if (!c.ok()) {
        error = c.status();
        return false;
      }
      return *c < 0;
    });
    return error;
  }

  const JsonFormat& format_;
  std::string* out_;
};

}  // namespace

StatusOr<std::string> DumpJson(const Value& value, const JsonFormat& format) {
  std::string out;
  JsonWriter writer(format, &out);
  NS_RETURN_IF_ERROR(writer.Write(value, 0));
  return out;
}

}  // namespace nightshift::chat
