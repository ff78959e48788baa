#include "worker/chat/interpreter.h"

#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "worker/chat/builtins.h"
#include "worker/chat/error.h"
#include "worker/chat/pystr.h"

namespace nightshift::chat {
namespace {

// Macro calls and recursive loops deeper than this fail (Python's recursion
// limit plays this role for Jinja).
constexpr int kMaxCallDepth = 200;

class Scope;
using ScopePtr = std::shared_ptr<Scope>;

// A set of variables; lookups fall back to the enclosing scope.
class Scope {
 public:
  explicit Scope(ScopePtr parent) : parent_(std::move(parent)) {}

  const Value* Find(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
      for (const auto& [key, value] : scope->vars_) {
        if (key == name) return &value;
      }
    }
    return nullptr;
  }

  void Set(const std::string& name, Value value) {
    for (auto& [key, existing] : vars_) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    vars_.emplace_back(name, std::move(value));
  }

 private:
  ScopePtr parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

ScopePtr Child(const ScopePtr& parent) { return std::make_shared<Scope>(parent); }

enum class Flow { kNormal, kBreak, kContinue };

// A macro, or the `caller` of a call block: parameters, body and the scope
// it was defined in.
class MacroObject : public Callable {
 public:
  MacroObject(std::string name, const std::vector<ast::Param>& params, const ast::Body& body,
              ScopePtr closure, bool uses_varargs, bool uses_kwargs)
      : name_(std::move(name)),
        params_(params),
        body_(body),
        closure_(std::move(closure)),
        uses_varargs_(uses_varargs),
        uses_kwargs_(uses_kwargs) {}

  Value Call(Interpreter& interpreter, CallArgs args) const override;

  const std::string& name() const { return name_; }
  const std::vector<ast::Param>& params() const { return params_; }
  const ast::Body& body() const { return body_; }
  const ScopePtr& closure() const { return closure_; }
  bool uses_varargs() const { return uses_varargs_; }
  bool uses_kwargs() const { return uses_kwargs_; }
  // Drops the closure: a macro is bound inside the scope it closes over,
  // a reference cycle the interpreter breaks when the render ends.
  void ReleaseClosure() { closure_.reset(); }

 private:
  std::string name_;
  const std::vector<ast::Param>& params_;
  const ast::Body& body_;
  ScopePtr closure_;
  bool uses_varargs_;
  bool uses_kwargs_;
};

// Jinja's `loop` object: position in the current iteration, and for
// `recursive` loops the means to run the loop body again.
struct LoopState : Object {
  const ast::For* node = nullptr;
  ScopePtr outer;  // released when the loop ends
  int depth = 1;
  ValueList items;
  size_t index = 0;
  std::optional<Value> last_changed;
};

Value LoopAttribute(const std::shared_ptr<LoopState>& loop, const std::string& name) {
  auto n = static_cast<int64_t>(loop->items.size());
  auto i = static_cast<int64_t>(loop->index);
  if (name == "index") return Value::Int(i + 1);
  if (name == "index0") return Value::Int(i);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(loop->depth);
  if (name == "depth0") return Value::Int(loop->depth - 1);
  if (name == "previtem")
    return i > 0 ? loop->items[i - 1] : Value::Undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? loop->items[i + 1] : Value::Undefined("there is no next item");
  if (name == "cycle") {
    return MakeFunction([loop](CallArgs args) {
      if (args.positional.empty()) ThrowError("no items for cycling given");
      return args.positional[loop->index % args.positional.size()];
    });
  }
  if (name == "changed") {
    return MakeFunction([loop](CallArgs args) {
      Value current = Value::Tuple(std::move(args.positional));
      if (loop->last_changed && Equals(*loop->last_changed, current)) return Value::Bool(false);
      loop->last_changed = std::move(current);
      return Value::Bool(true);
    });
  }
  return Value::Undefined("'jinja2.runtime.LoopContext object' has no attribute " +
                          pystr::Repr(name));
}

}  // namespace

class Interpreter {
 public:
  Interpreter() = default;
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  ~Interpreter() {
    for (const auto& weak : macros_) {
      if (auto macro = weak.lock()) macro->ReleaseClosure();
    }
  }

  std::string Run(const ast::Program& program, const Dict& variables) {
    auto globals = std::make_shared<Scope>(nullptr);
    Dict names = Globals();
    for (const auto& [name, value] : names.items()) globals->Set(name.string_value(), value);
    auto context = Child(globals);
    for (const auto& [name, value] : variables.items()) context->Set(ToStr(name), value);
    std::string out;
    Exec(program.body, context, &out);
    return out;
  }

  Value CallMacro(const MacroObject& macro, CallArgs args) {
    CallDepth depth(this);
    auto scope = Child(macro.closure());
    const std::vector<ast::Param>& params = macro.params();
    std::vector<bool> bound(params.size(), false);
    ValueList extra;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i >= params.size()) {
        extra.push_back(std::move(args.positional[i]));
        continue;
      }
      scope->Set(params[i].name, std::move(args.positional[i]));
      bound[i] = true;
    }
    if (!extra.empty() && !macro.uses_varargs()) {
      ThrowError("macro '" + macro.name() + "' takes not more than " +
                 std::to_string(params.size()) + " argument(s)");
    }
    Dict extra_keywords;
    for (auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < params.size() && params[i].name != key) ++i;
      if (i < params.size()) {
        if (bound[i])
          ThrowError("macro '" + macro.name() + "' got multiple values for argument '" + key + "'");
        scope->Set(key, std::move(value));
        bound[i] = true;
      } else if (key == "caller") {
        scope->Set(key, std::move(value));
      } else if (macro.uses_kwargs()) {
        extra_keywords.Set(Value::String(key), std::move(value));
      } else {
        ThrowError("macro '" + macro.name() + "' takes no keyword argument '" + key + "'");
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      scope->Set(params[i].name, params[i].default_value
                                     ? Eval(*params[i].default_value, scope)
                                     : Value::Undefined("parameter " + pystr::Repr(params[i].name) +
                                                        " was not provided"));
    }
    if (macro.uses_varargs()) scope->Set("varargs", Value::Tuple(std::move(extra)));
    if (macro.uses_kwargs()) scope->Set("kwargs", Value::MakeDict(std::move(extra_keywords)));
    std::string out;
    Exec(macro.body(), scope, &out);
    return Value::String(std::move(out));
  }

 private:
  class CallDepth {
   public:
    explicit CallDepth(Interpreter* interpreter) : interpreter_(interpreter) {
      if (++interpreter_->call_depth_ > kMaxCallDepth) {
        --interpreter_->call_depth_;
        ThrowError("maximum recursion depth exceeded");
      }
    }
    ~CallDepth() { --interpreter_->call_depth_; }

   private:
    Interpreter* interpreter_;
  };

  // ---- statements -----------------------------------------------------------

  Flow Exec(const ast::Body& body, const ScopePtr& scope, std::string* out) {
    for (const ast::StmtPtr& stmt : body) {
      Flow flow = ExecStmt(*stmt, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow ExecStmt(const ast::Stmt& stmt, const ScopePtr& scope, std::string* out) {
    try {
      return ExecStmtUnchecked(stmt, scope, out);
    } catch (TemplateError& error) {
      if (error.line == 0) error.line = stmt.line;
      throw;
    }
  }

  Flow ExecStmtUnchecked(const ast::Stmt& stmt, const ScopePtr& scope, std::string* out) {
    using Kind = ast::Stmt::Kind;
    switch (stmt.kind) {
      case Kind::kText:
        out->append(static_cast<const ast::Text&>(stmt).text);
        return Flow::kNormal;
      case Kind::kPrint:
        out->append(ToStr(Eval(*static_cast<const ast::Print&>(stmt).expr, scope)));
        return Flow::kNormal;
      case Kind::kIf:
        return ExecIf(static_cast<const ast::If&>(stmt), scope, out);
      case Kind::kFor: {
        const auto& node = static_cast<const ast::For&>(stmt);
        return RunLoop(node, Eval(*node.iterable, scope), scope, 1, out);
      }
      case Kind::kSet: {
        const auto& node = static_cast<const ast::Set&>(stmt);
        Assign(node.target, Eval(*node.value, scope), *scope);
        return Flow::kNormal;
      }
      case Kind::kSetBlock: {
        const auto& node = static_cast<const ast::SetBlock&>(stmt);
        std::string text;
        Flow flow = Exec(node.body, Child(scope), &text);
        Assign(node.target, ApplyFilters(node.filters, Value::String(std::move(text)), scope),
               *scope);
        return flow;
      }
      case Kind::kMacro: {
        const auto& node = static_cast<const ast::Macro&>(stmt);
        scope->Set(node.name, MakeMacro(node.name, node.params, node.body, scope, node.uses_varargs,
                                        node.uses_kwargs));
        return Flow::kNormal;
      }
      case Kind::kCallBlock: {
        const auto& node = static_cast<const ast::CallBlock&>(stmt);
        Value caller = MakeMacro("caller", node.caller_params, node.body, scope, false, false);
        out->append(ToStr(EvalCall(static_cast<const ast::Call&>(*node.call), scope, &caller)));
        return Flow::kNormal;
      }
      case Kind::kFilterBlock: {
        const auto& node = static_cast<const ast::FilterBlock&>(stmt);
        std::string text;
        Flow flow = Exec(node.body, Child(scope), &text);
        out->append(ToStr(ApplyFilters(node.filters, Value::String(std::move(text)), scope)));
        return flow;
      }
      case Kind::kWith: {
        const auto& node = static_cast<const ast::With&>(stmt);
        ValueList values;
        for (const auto& assignment : node.assignments)
          values.push_back(Eval(*assignment.second, scope));
        ScopePtr inner = Child(scope);
        for (size_t i = 0; i < values.size(); ++i)
          Assign(node.assignments[i].first, values[i], *inner);
        return Exec(node.body, inner, out);
      }
      case Kind::kScope:
        return Exec(static_cast<const ast::Scope&>(stmt).body, Child(scope), out);
      case Kind::kBreak:
        return Flow::kBreak;
      case Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow ExecIf(const ast::If& node, const ScopePtr& scope, std::string* out) {
    for (const auto& [test, body] : node.branches) {
      if (Truthy(Eval(*test, scope))) return Exec(body, scope, out);
    }
    return Exec(node.else_body, scope, out);
  }

  // Runs a `for` over `iterable` (also for a recursive `loop(...)` call).
  // Each iteration gets a fresh scope under `outer`, as in Jinja.
  Flow RunLoop(const ast::For& node, const Value& iterable, const ScopePtr& outer, int depth,
               std::string* out) {
    ValueList items = ValueOrThrow(Iterate(iterable));
    if (node.filter) {
      ValueList kept;
      for (Value& item : items) {
        ScopePtr scope = Child(outer);
        Assign(node.target, item, *scope);
        if (Truthy(Eval(*node.filter, scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return Exec(node.else_body, Child(outer), out);
    auto loop = std::make_shared<LoopState>();
    loop->node = &node;
    loop->outer = outer;
    loop->depth = depth;
    loop->items = std::move(items);
    struct Release {
      LoopState* loop;
      ~Release() { loop->outer.reset(); }
    } release{loop.get()};
    Value loop_value = Value::MakeObject(Value::Kind::kLoop, loop);
    for (size_t i = 0; i < loop->items.size(); ++i) {
      loop->index = i;
      ScopePtr scope = Child(outer);
      scope->Set("loop", loop_value);
      Assign(node.target, loop->items[i], *scope);
      if (Exec(node.body, scope, out) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value CallLoop(const std::shared_ptr<LoopState>& loop, CallArgs args) {
    if (!loop->node->recursive) {
      ThrowError("The loop must have the 'recursive' marker to be called recursively.");
    }
    if (loop->outer == nullptr) ThrowError("a recursive loop cannot be called after it ended");
    ValueList a = BindArgs("loop", std::move(args), {{"iterable", std::nullopt}});
    CallDepth depth(this);
    std::string text;
    RunLoop(*loop->node, a[0], loop->outer, loop->depth + 1, &text);
    return Value::String(std::move(text));
  }

  void Assign(const ast::Target& target, const Value& value, Scope& scope) {
    switch (target.kind) {
      case ast::Target::Kind::kName:
        scope.Set(target.name, value);
        return;
      case ast::Target::Kind::kNamespaceAttr: {
        const Value* ns = scope.Find(target.name);
        if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
          ThrowError("cannot assign attribute on non-namespace object");
        }
        ns->namespace_attributes().Set(Value::String(target.attr), value);
        return;
      }
      case ast::Target::Kind::kTuple: {
        ValueList items = ValueOrThrow(Iterate(value));
        size_t expected = target.items.size();
        if (items.size() < expected) {
          ThrowError("not enough values to unpack (expected " + std::to_string(expected) +
                     ", got " + std::to_string(items.size()) + ")");
        }
        if (items.size() > expected) {
          ThrowError("too many values to unpack (expected " + std::to_string(expected) + ")");
        }
        for (size_t i = 0; i < expected; ++i) Assign(target.items[i], items[i], scope);
        return;
      }
    }
  }

  Value MakeMacro(const std::string& name, const std::vector<ast::Param>& params,
                  const ast::Body& body, const ScopePtr& scope, bool uses_varargs,
                  bool uses_kwargs) {
    auto macro =
        std::make_shared<MacroObject>(name, params, body, scope, uses_varargs, uses_kwargs);
    macros_.push_back(macro);
    return Value::MakeObject(Value::Kind::kCallable, std::move(macro));
  }

  Value ApplyFilters(const std::vector<ast::FilterCall>& filters, Value value,
                     const ScopePtr& scope) {
    for (const ast::FilterCall& filter : filters) {
      try {
        value = ApplyFilter(filter.name, value, EvalArgs(filter.args, scope));
      } catch (TemplateError& error) {
        if (error.line == 0) error.line = filter.line;
        throw;
      }
    }
    return value;
  }

  // ---- expressions ----------------------------------------------------------

  Value Eval(const ast::Expr& expr, const ScopePtr& scope) {
    try {
      return EvalUnchecked(expr, scope);
    } catch (TemplateError& error) {
      if (error.line == 0) error.line = expr.line;
      throw;
    }
  }

  Value EvalUnchecked(const ast::Expr& expr, const ScopePtr& scope) {
    using Kind = ast::Expr::Kind;
    switch (expr.kind) {
      case Kind::kLiteral:
        return static_cast<const ast::Literal&>(expr).value;
      case Kind::kName: {
        const std::string& name = static_cast<const ast::Name&>(expr).name;
        const Value* value = scope->Find(name);
        return value ? *value : Value::Undefined(pystr::Repr(name) + " is undefined");
      }
      case Kind::kList: {
        const auto& node = static_cast<const ast::ListDisplay&>(expr);
        ValueList items;
        items.reserve(node.items.size());
        for (const ast::ExprPtr& item : node.items) items.push_back(Eval(*item, scope));
        return node.tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
      }
      case Kind::kDict: {
        Dict dict;
        for (const auto& [key_expr, value_expr] :
             static_cast<const ast::DictDisplay&>(expr).items) {
          Value key = Eval(*key_expr, scope);
          if (key.kind() == Value::Kind::kList || key.kind() == Value::Kind::kDict) {
            ThrowError("unhashable type: '" + TypeName(key) + "'");
          }
          dict.Set(std::move(key), Eval(*value_expr, scope));
        }
        return Value::MakeDict(std::move(dict));
      }
      case Kind::kGetAttr: {
        const auto& node = static_cast<const ast::GetAttr&>(expr);
        Value object = Eval(*node.object, scope);
        if (object.kind() == Value::Kind::kLoop) return LoopAttribute(LoopOf(object), node.name);
        return GetAttribute(object, node.name);
      }
      case Kind::kGetItem: {
        const auto& node = static_cast<const ast::GetItem&>(expr);
        Value object = Eval(*node.object, scope);
        Value key = Eval(*node.key, scope);
        if (object.kind() == Value::Kind::kLoop && key.is_string()) {
          return LoopAttribute(LoopOf(object), key.string_value());
        }
        return GetItem(object, key);
      }
      case Kind::kSlice: {
        const auto& node = static_cast<const ast::Slice&>(expr);
        Value object = Eval(*node.object, scope);
        auto part = [&](const ast::ExprPtr& e) { return e ? Eval(*e, scope) : Value::None(); };
        return GetSlice(object, part(node.start), part(node.stop), part(node.step));
      }
      case Kind::kCall:
        return EvalCall(static_cast<const ast::Call&>(expr), scope, nullptr);
      case Kind::kFilter: {
        const auto& node = static_cast<const ast::Filter&>(expr);
        Value operand = Eval(*node.operand, scope);
        return ApplyFilter(node.call.name, operand, EvalArgs(node.call.args, scope));
      }
      case Kind::kTest: {
        const auto& node = static_cast<const ast::Test&>(expr);
        Value operand = Eval(*node.operand, scope);
        bool result = ApplyTest(node.name, operand, EvalArgs(node.args, scope));
        return Value::Bool(result != node.negated);
      }
      case Kind::kUnary: {
        const auto& node = static_cast<const ast::Unary&>(expr);
        Value operand = Eval(*node.operand, scope);
        if (node.op == ast::Op::kNot) return Value::Bool(!Truthy(operand));
        return UnaryOp(node.op, operand);
      }
      case Kind::kBinary:
        return EvalBinary(static_cast<const ast::Binary&>(expr), scope);
      case Kind::kCompare: {
        const auto& node = static_cast<const ast::Compare&>(expr);
        Value left = Eval(*node.first, scope);
        for (const auto& [op, right_expr] : node.rest) {
          Value right = Eval(*right_expr, scope);
          if (!CompareOp(op, left, right)) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Kind::kCondition: {
        const auto& node = static_cast<const ast::Condition&>(expr);
        if (Truthy(Eval(*node.test, scope))) return Eval(*node.then_expr, scope);
        if (node.else_expr) return Eval(*node.else_expr, scope);
        return Value::Undefined("the inline if-expression on line " + std::to_string(node.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return Value();
  }

  Value EvalBinary(const ast::Binary& node, const ScopePtr& scope) {
    Value left = Eval(*node.left, scope);
    if (node.op == ast::Op::kAnd) return Truthy(left) ? Eval(*node.right, scope) : left;
    if (node.op == ast::Op::kOr) return Truthy(left) ? left : Eval(*node.right, scope);
    return BinaryOp(node.op, left, Eval(*node.right, scope));
  }

  CallArgs EvalArgs(const ast::Args& args, const ScopePtr& scope) {
    CallArgs evaluated;
    for (const ast::ExprPtr& arg : args.positional)
      evaluated.positional.push_back(Eval(*arg, scope));
    for (const auto& [name, arg] : args.keyword)
      evaluated.keyword.emplace_back(name, Eval(*arg, scope));
    return evaluated;
  }

  // A call; `caller`, when given, is passed as the `caller` keyword (call
  // blocks).
  Value EvalCall(const ast::Call& call, const ScopePtr& scope, const Value* caller) {
    Value callee = Eval(*call.callee, scope);
    CallArgs args = EvalArgs(call.args, scope);
    if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
    switch (callee.kind()) {
      case Value::Kind::kCallable:
        return static_cast<const Callable&>(*callee.object()).Call(*this, std::move(args));
      case Value::Kind::kLoop:
        return CallLoop(LoopOf(callee), std::move(args));
      case Value::Kind::kUndefined:
        ThrowError(callee.undefined_hint().empty() ? "value is undefined"
                                                   : callee.undefined_hint());
      default:
        ThrowError("'" + TypeName(callee) + "' object is not callable");
    }
  }

  static std::shared_ptr<LoopState> LoopOf(const Value& value) {
    return std::static_pointer_cast<LoopState>(value.object());
  }

  int call_depth_ = 0;
  std::vector<std::weak_ptr<MacroObject>> macros_;
};

Value MacroObject::Call(Interpreter& interpreter, CallArgs args) const {
  return interpreter.CallMacro(*this, std::move(args));
}

StatusOr<std::string> Render(const ast::Program& program, const Dict& variables) {
  Interpreter interpreter;
  try {
    return interpreter.Run(program, variables);
  } catch (const TemplateError& error) {
    return error.ToStatus();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory while rendering the chat template");
  }
}

}  // namespace nightshift::chat
