// The library a chat template calls into, with Jinja2's and Python's
// behaviour: filters (`x|trim`), tests (`x is string`), attribute and item
// access (`m.role`, `m['role']`, `s.startswith(...)`, `d.items()`), slicing,
// operators, and the globals transformers provides (`range`, `namespace`,
// `dict`, `raise_exception`, `strftime_now`).
//
// Access follows Jinja's ImmutableSandboxedEnvironment: `a.b` tries a Python
// attribute (a method) first and then the key; `a['b']` the other way
// round; a missing one is Undefined with Jinja's message ("'dict object' has
// no attribute 'x'"); methods that would mutate a list or dict are refused.
// Python methods and Jinja filters/tests this module does not implement are
// Unimplemented errors naming them, never approximations.
//
// Errors are thrown as TemplateError (error.h); the interpreter attaches the
// template line. Everything here is stateless and thread-safe except
// strftime_now's use of the local clock.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "worker/chat/ast.h"
#include "worker/chat/value.h"

namespace nightshift::chat {

class Interpreter;

// Evaluated arguments of a call: positional, then keyword.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A value a template can call (a macro, a bound method, a global).
class Callable : public Object {
 public:
  virtual Value Call(Interpreter& interpreter, CallArgs args) const = 0;
};

// A callable implemented in C++ (a global, a bound method).
class NativeFunction : public Callable {
 public:
  using Fn = std::function<Value(CallArgs)>;
  explicit NativeFunction(Fn fn) : fn_(std::move(fn)) {}
  Value Call(Interpreter&, CallArgs args) const override { return fn_(std::move(args)); }

 private:
  Fn fn_;
};

// A kCallable value around `fn`.
Value MakeFunction(NativeFunction::Fn fn);

// Binds call arguments to a Python-style signature: each parameter has a
// name and, unless required, a default. Too many arguments, unknown or
// duplicate keywords and missing required ones throw, naming `function`.
struct Param {
  const char* name;
  std::optional<Value> default_value;  // nullopt: required
};
ValueList BindArgs(const std::string& function, CallArgs args, std::initializer_list<Param> params);

// Jinja's object_type_repr ("dict object", "None", ...), used in messages.
std::string ObjectTypeRepr(const Value& value);

// Whether a filter or test name is implemented here, is one of Jinja2's
// (or transformers') that is not, or is unknown to Jinja altogether.
enum class Support { kSupported, kUnsupported, kUnknown };
Support FilterSupport(std::string_view name);
Support TestSupport(std::string_view name);

// Applies a supported filter / test.
Value ApplyFilter(const std::string& name, const Value& operand, CallArgs args);
bool ApplyTest(const std::string& name, const Value& operand, CallArgs args);

// `object.name` and `object[key]` (see above). Using an Undefined object
// throws its hint.
Value GetAttribute(const Value& object, const std::string& name);
// Python getattr() alone (methods, namespace attributes; never dict keys):
// nullopt when the object has no such attribute. Jinja's `attr` filter.
std::optional<Value> PythonAttribute(const Value& object, const std::string& name);
Value GetItem(const Value& object, const Value& key);
// `object[start:stop:step]` on a str, list or tuple; null parts are None.
Value GetSlice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Unary and binary operators with Python semantics (`and`/`or`/comparisons
// are the interpreter's). kConcat is Jinja's `~`.
Value UnaryOp(ast::Op op, const Value& operand);
Value BinaryOp(ast::Op op, const Value& left, const Value& right);
// Python `item in container`.
bool Contains(const Value& container, const Value& item);
// One comparison of a chain (==, !=, <, <=, >, >=, in, not in).
bool CompareOp(ast::Op op, const Value& left, const Value& right);

// The template globals: range, dict, namespace, raise_exception,
// strftime_now, plus Jinja's cycler/joiner/lipsum as unsupported.
Dict Globals();

}  // namespace nightshift::chat
