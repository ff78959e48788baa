// The syntax tree of a chat template: what the parser builds and the
// interpreter walks. Nodes are immutable after parsing; a tree is owned by
// its Program and shared read-only by every render.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/chat/value.h"

namespace nightshift::chat::ast {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class Op {
  // unary
  kNot,
  kNeg,
  kPos,
  // binary
  kAnd,
  kOr,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kConcat,  // ~
  // comparisons
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kNotIn,
};

// Arguments of a call, filter or test: positional, then `name=value`.
struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,  // list or tuple display
    kDict,
    kGetAttr,
    kGetItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kCompare,
    kCondition,
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  const Kind kind;
  const int line;
};

struct Literal : Expr {
  Literal(int l, Value v) : Expr(Kind::kLiteral, l), value(std::move(v)) {}
  Value value;
};

struct Name : Expr {
  Name(int l, std::string n) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};

struct ListDisplay : Expr {
  ListDisplay(int l, bool t) : Expr(Kind::kList, l), tuple(t) {}
  bool tuple;
  std::vector<ExprPtr> items;
};

struct DictDisplay : Expr {
  explicit DictDisplay(int l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttr : Expr {  // object.name
  GetAttr(int l, ExprPtr o, std::string n)
      : Expr(Kind::kGetAttr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct GetItem : Expr {  // object[key]
  GetItem(int l, ExprPtr o, ExprPtr k)
      : Expr(Kind::kGetItem, l), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

struct Slice : Expr {  // object[start:stop:step]; absent parts are null
  Slice(int l, ExprPtr o) : Expr(Kind::kSlice, l), object(std::move(o)) {}
  ExprPtr object;
  ExprPtr start, stop, step;
};

struct Call : Expr {
  Call(int l, ExprPtr c) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Args args;
};

// One `|name(args)` step; a Filter expression applies it to `operand`.
struct FilterCall {
  std::string name;
  Args args;
  int line = 0;
};

struct Filter : Expr {
  Filter(int l, ExprPtr o, FilterCall c)
      : Expr(Kind::kFilter, l), operand(std::move(o)), call(std::move(c)) {}
  ExprPtr operand;
  FilterCall call;
};

struct Test : Expr {  // operand is [not] name(args)
  Test(int l, ExprPtr o, std::string n, bool neg)
      : Expr(Kind::kTest, l), operand(std::move(o)), name(std::move(n)), negated(neg) {}
  ExprPtr operand;
  std::string name;
  bool negated;
  Args args;
};

struct Unary : Expr {
  Unary(int l, Op o, ExprPtr e) : Expr(Kind::kUnary, l), op(o), operand(std::move(e)) {}
  Op op;
  ExprPtr operand;
};

struct Binary : Expr {
  Binary(int l, Op o, ExprPtr a, ExprPtr b)
      : Expr(Kind::kBinary, l), op(o), left(std::move(a)), right(std::move(b)) {}
  Op op;
  ExprPtr left, right;
};

struct Compare : Expr {  // first op1 e1 op2 e2 ... (chained, like Python)
  Compare(int l, ExprPtr f) : Expr(Kind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<Op, ExprPtr>> rest;
};

struct Condition : Expr {  // then_expr if test else else_expr (else may be null)
  Condition(int l, ExprPtr t, ExprPtr a, ExprPtr b)
      : Expr(Kind::kCondition, l),
        test(std::move(t)),
        then_expr(std::move(a)),
        else_expr(std::move(b)) {}
  ExprPtr test, then_expr, else_expr;
};

// The left side of `set`, `for` and `with`: a name, `ns.attr`, or a tuple.
struct Target {
  enum class Kind { kName, kNamespaceAttr, kTuple };
  Kind kind = Kind::kName;
  std::string name;           // kName, and the namespace variable of kNamespaceAttr
  std::string attr;           // kNamespaceAttr
  std::vector<Target> items;  // kTuple
};

// A macro or caller parameter: name and optional default.
struct Param {
  std::string name;
  ExprPtr default_value;
};

struct Stmt {
  enum class Kind {
    kText,
    kPrint,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kWith,
    kScope,  // a body in its own scope (`{% generation %}`)
    kBreak,
    kContinue,
  };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  const Kind kind;
  const int line;
};

struct Text : Stmt {
  Text(int l, std::string t) : Stmt(Kind::kText, l), text(std::move(t)) {}
  std::string text;
};

struct Print : Stmt {
  Print(int l, ExprPtr e) : Stmt(Kind::kPrint, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct If : Stmt {
  explicit If(int l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

struct For : Stmt {
  explicit For(int l) : Stmt(Kind::kFor, l) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in y if filter`, or null
  bool recursive = false;
  Body body;
  Body else_body;
};

struct Set : Stmt {
  Set(int l, Target t, ExprPtr v)
      : Stmt(Kind::kSet, l), target(std::move(t)), value(std::move(v)) {}
  Target target;
  ExprPtr value;
};

struct SetBlock : Stmt {  // {% set x | filters %}body{% endset %}
  explicit SetBlock(int l) : Stmt(Kind::kSetBlock, l) {}
  Target target;
  std::vector<FilterCall> filters;
  Body body;
};

struct Macro : Stmt {
  explicit Macro(int l) : Stmt(Kind::kMacro, l) {}
  std::string name;
  std::vector<Param> params;
  Body body;
  // Whether the body reads these names: extra arguments are an error unless
  // it does (as in Jinja).
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct CallBlock : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  explicit CallBlock(int l) : Stmt(Kind::kCallBlock, l) {}
  ExprPtr call;  // a Call expression
  std::vector<Param> caller_params;
  Body body;
};

struct FilterBlock : Stmt {  // {% filter f | g %}body{% endfilter %}
  explicit FilterBlock(int l) : Stmt(Kind::kFilterBlock, l) {}
  std::vector<FilterCall> filters;
  Body body;
};

struct With : Stmt {
  explicit With(int l) : Stmt(Kind::kWith, l) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct Scope : Stmt {
  explicit Scope(int l) : Stmt(Kind::kScope, l) {}
  Body body;
};

struct LoopControl : Stmt {  // break / continue
  LoopControl(int l, bool is_break) : Stmt(is_break ? Kind::kBreak : Kind::kContinue, l) {}
};

struct Program {
  Body body;
};

}  // namespace nightshift::chat::ast
