// The values a chat template computes with, and Python's rules for them.
//
// Jinja templates run on Python objects, so a template's output depends on
// Python semantics: `str()` of a list is its repr, `1 == 1.0 == true`, empty
// containers are false, dicts keep insertion order, a missing key is
// Jinja's Undefined (prints as "", fails when used further). Value models the
// kinds chat templates meet (None, bool, int, float, str, list, tuple, dict,
// Jinja's Undefined and namespace, one-shot iterators such as what
// `selectattr` returns, and callables) and the functions below give them
// Python's behaviour.
//
// Lists, tuples and dicts are immutable and shared between copies, as in
// the immutable sandbox transformers renders with; a namespace is the one
// mutable container (`{% set ns.x = ... %}`), shared by reference like a
// Python object. An iterator is consumed by its first iteration, as a Python
// generator is.
//
// Values are not synchronised: one render uses its values on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nightshift::chat {

class Value;
using ValueList = std::vector<Value>;

// Base of the reference kinds that are not plain data (callables, loop
// contexts); the interpreter defines the concrete classes.
class Object {
 public:
  virtual ~Object() = default;
};

// An insertion-ordered dict with Python key equality (1 and 1.0 and true
// are the same key). String keys are indexed, others searched.
class Dict {
 public:
  // The value stored under `key`, or nullptr.
  const Value* Find(const Value& key) const;
  const Value* Find(const std::string& key) const;
  // Replaces the value of an existing key (keeping its position) or appends.
  void Set(Value key, Value value);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> string_index_;
};

// A one-shot sequence (what a Python generator or reverse iterator is):
// always true, no length, empty after its first iteration.
struct IteratorState {
  std::string type_name;  // "generator", "list_reverseiterator"
  ValueList items;
  bool consumed = false;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kIterator,
    kCallable,
    kLoop,
  };

  // An Undefined without a hint (a plain missing variable has one, see
  // Undefined()).
  Value() = default;
  // Jinja's Undefined; `hint` is the error a misuse reports, e.g.
  // "'messages' is undefined" or "'dict object' has no attribute 'role'".
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  static Value MakeDict(Dict dict);
  static Value Namespace(Dict attributes);
  static Value Iterator(std::string type_name, ValueList items);
  // kCallable or kLoop around an interpreter object.
  static Value MakeObject(Kind kind, std::shared_ptr<Object> object);

  // Converts parsed JSON (objects keep their key order). Integers beyond
  // int64 become floats.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  // bool, int or float (Python's numbers; bool is an int there).
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  // list or tuple.
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }

  // Accessors; each requires the matching kind.
  bool bool_value() const { return scalar_.b; }
  int64_t int_value() const { return scalar_.i; }
  double float_value() const { return scalar_.f; }
  const std::string& string_value() const { return text_; }
  const std::string& undefined_hint() const { return text_; }
  const ValueList& items() const { return *list_; }                  // list, tuple
  const Dict& dict() const { return *dict_; }                        // dict, namespace
  Dict& namespace_attributes() const { return *dict_; }              // namespace
  IteratorState& iterator() const { return *iterator_; }             // iterator
  const std::shared_ptr<Object>& object() const { return object_; }  // callable, loop

  // bool or int as int64 (Python's int(True) == 1); requires kBool or kInt.
  int64_t AsInteger() const { return kind_ == Kind::kBool ? scalar_.b : scalar_.i; }
  // Any number as double.
  double AsDouble() const;

  // Whether two values are the same object (Jinja's `sameas`): identity for
  // containers and objects, equal value for scalars.
  bool SameAs(const Value& other) const;

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    bool b;
    int64_t i;
    double f;
  } scalar_{};
  std::string text_;  // string value, or the undefined hint
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<IteratorState> iterator_;
  std::shared_ptr<Object> object_;
};

// Python's type name, as error messages show it ("str", "NoneType", "dict").
std::string TypeName(const Value& value);

// Python truthiness (Undefined is false; iterators and objects are true).
bool Truthy(const Value& value);

// Python ==.
bool Equals(const Value& a, const Value& b);

// Python's <, <=, >, >= order: numbers with numbers, str with str, lists
// and tuples element by element. Returns -1/0/1, or InvalidArgument
// ("'<' not supported between instances of 'str' and 'int'") for other
// pairs. `op` names the operator in that message.
StatusOr<int> Compare(const Value& a, const Value& b, const char* op);

// Python str() (Undefined is ""), and repr().
std::string ToStr(const Value& value);
std::string ToRepr(const Value& value);

// Python's repr() of a float: shortest round-trip digits, fixed notation for
// exponents -4..15 (always with a fractional part, "2.0"), otherwise
// scientific ("1e+16", "1.5e-07"); "inf", "-inf", "nan".
std::string FormatFloat(double f);

// The elements a Python `for` would visit: list/tuple items, dict keys,
// string characters, an iterator's items (consuming it), nothing for
// Undefined. Other kinds are InvalidArgument ("'int' object is not iterable").
StatusOr<ValueList> Iterate(const Value& value);

// Python's len(): str (code points), list, tuple, dict, Undefined (0).
// Other kinds are InvalidArgument ("object of type 'int' has no len()").
StatusOr<int64_t> Length(const Value& value);

// json.dumps options, as transformers' `tojson` filter passes them.
struct JsonFormat {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // per-level indent; nullopt = one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Python's json.dumps(value, ...): insertion order, "NaN"/"Infinity",
// Python float formatting, "\u00XX" escapes for control characters. Values
// JSON cannot hold (Undefined, namespaces, callables, iterators) are
// InvalidArgument ("Object of type Undefined is not JSON serializable").
StatusOr<std::string> DumpJson(const Value& value, const JsonFormat& format);

}  // namespace nightshift::chat
