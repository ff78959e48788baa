#include "worker/chat/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "worker/chat/builtins.h"
#include "worker/chat/error.h"

namespace nightshift::chat {
namespace {

using ast::ExprPtr;
using ast::Op;
using ast::StmtPtr;

// Nesting deeper than this (brackets, unary operators, blocks) is refused
// rather than risking the stack.
constexpr int kMaxDepth = 200;

// Jinja2 tags this interpreter does not implement.
constexpr std::string_view kUnsupportedTags[] = {"block", "extends",    "include", "import",
                                                 "from",  "autoescape", "endblock"};

std::string Describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data / text";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEnd:
      return "end of template";
    default:
      return token.text;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::unique_ptr<ast::Program> ParseProgram() {
    auto program = std::make_unique<ast::Program>();
    program->body = ParseBody({});
    if (Current().type != TokenType::kEnd) Fail("unexpected '" + Describe(Current()) + "'");
    return program;
  }

 private:
  // ---- tokens ---------------------------------------------------------------

  const Token& Current() const { return tokens_[pos_]; }
  const Token& Peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& Advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }

  bool IsName(std::string_view name) const {
    return Current().type == TokenType::kName && Current().text == name;
  }
  bool IsOp(std::string_view op) const {
    return Current().type == TokenType::kOperator && Current().text == op;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }

  [[noreturn]] void Fail(std::string message, int line = 0) const {
    throw TemplateError{StatusCode::kInvalidArgument, std::move(message),
                        line ? line : Current().line};
  }
  [[noreturn]] void FailUnsupported(std::string what, int line = 0) const {
    throw TemplateError{StatusCode::kUnimplemented, "unsupported " + std::move(what),
                        line ? line : Current().line};
  }

  [[noreturn]] void FailExpected(const std::string& what) const {
    if (Current().type == TokenType::kEnd) {
      Fail("unexpected end of template, expected '" + what + "'");
    }
    Fail("expected token '" + what + "', got '" + Describe(Current()) + "'");
  }

  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) FailExpected(std::string(op));
  }
  void ExpectName(std::string_view name) {
    if (!SkipName(name)) FailExpected(std::string(name));
  }
  std::string ExpectIdentifier() {
    if (Current().type != TokenType::kName) FailExpected("name");
    return Advance().text;
  }
  void Expect(TokenType type) {
    if (Current().type != type) FailExpected(Describe(Token{type, ""}));
    Advance();
  }

  // Guards recursion depth for nested expressions and blocks.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* parser) : parser_(parser) {
      if (++parser_->depth_ > kMaxDepth) parser_->Fail("template nesting is too deep");
    }
    ~DepthGuard() { --parser_->depth_; }

   private:
    Parser* parser_;
  };

  // ---- statements -----------------------------------------------------------

  // Parses until a block tag whose name is in `end_tags` (left current, just
  // after its `{%`) or the end of the template.
  ast::Body ParseBody(std::initializer_list<std::string_view> end_tags) {
    DepthGuard guard(this);
    ast::Body body;
    while (true) {
      const Token& token = Current();
      switch (token.type) {
        case TokenType::kEnd:
          return body;
        case TokenType::kData:
          body.push_back(std::make_unique<ast::Text>(token.line, token.text));
          Advance();
          break;
        case TokenType::kVariableBegin: {
          int line = Advance().line;
          ExprPtr expr = ParseTuple(true, false);
          Expect(TokenType::kVariableEnd);
          body.push_back(std::make_unique<ast::Print>(line, std::move(expr)));
          break;
        }
        case TokenType::kBlockBegin: {
          Advance();
          const Token& tag = Current();
          if (tag.type == TokenType::kName &&
              std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
            return body;
          }
          body.push_back(ParseStatement());
          Expect(TokenType::kBlockEnd);
          break;
        }
        default:
          Fail("unexpected '" + Describe(token) + "'");
      }
    }
  }

  // The body of a block statement: optional ':' and `%}`, then statements up
  // to one of `end_tags`; fails at the end of the template naming `block`.
  ast::Body ParseBlock(std::initializer_list<std::string_view> end_tags, const char* block) {
    SkipOp(":");
    Expect(TokenType::kBlockEnd);
    ast::Body body = ParseBody(end_tags);
    if (Current().type == TokenType::kEnd) {
      std::string names;
      for (std::string_view tag : end_tags) {
        names += (names.empty() ? "'" : " or '") + std::string(tag) + "'";
      }
      Fail(std::string("Unexpected end of template. Jinja was looking for the following tags: ") +
           names + ". The innermost block that needs to be closed is '" + block + "'.");
    }
    return body;
  }

  // Like ParseBlock, then consumes the (single) end tag.
  ast::Body ParseBlockUntil(std::string_view end_tag, const char* block) {
    ast::Body body = ParseBlock({end_tag}, block);
    Advance();
    return body;
  }

  StmtPtr ParseStatement() {
    const Token& token = Current();
    if (token.type != TokenType::kName) Fail("tag name expected");
    const std::string& tag = token.text;
    if (tag == "if") return ParseIf();
    if (tag == "for") return ParseFor();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "call") return ParseCallBlock();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "with") return ParseWith();
    if (tag == "print") return ParsePrint();
    if (tag == "generation") return ParseGeneration();
    if (tag == "break" || tag == "continue") return ParseLoopControl();
    for (std::string_view unsupported : kUnsupportedTags) {
      if (tag == unsupported) FailUnsupported("tag '" + tag + "'");
    }
    Fail("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr ParseIf() {
    auto node = std::make_unique<ast::If>(Advance().line);
    while (true) {
      ExprPtr test = ParseTuple(false, false);
      ast::Body body = ParseBlock({"elif", "else", "endif"}, "if");
      node->branches.emplace_back(std::move(test), std::move(body));
      std::string tag = Advance().text;
      if (tag == "elif") continue;
      if (tag == "else") node->else_body = ParseBlockUntil("endif", "if");
      return node;
    }
  }

  StmtPtr ParseFor() {
    auto node = std::make_unique<ast::For>(Advance().line);
    node->target = ParseTarget(false, "in");
    ExpectName("in");
    node->iterable = ParseTuple(false, false, "recursive");
    if (SkipName("if")) node->filter = ParseExpression(true);
    node->recursive = SkipName("recursive");
    ++loop_depth_;
    node->body = ParseBlock({"endfor", "else"}, "for");
    --loop_depth_;
    if (Advance().text == "else") node->else_body = ParseBlockUntil("endfor", "for");
    return node;
  }

  StmtPtr ParseSet() {
    int line = Advance().line;
    ast::Target target = ParseTarget(true, nullptr);
    if (SkipOp("="))
      return std::make_unique<ast::Set>(line, std::move(target), ParseTuple(true, false));
    auto node = std::make_unique<ast::SetBlock>(line);
    node->target = std::move(target);
    while (SkipOp("|")) node->filters.push_back(ParseFilterCall());
    node->body = ParseBlockUntil("endset", "set");
    return node;
  }

  StmtPtr ParseMacro() {
    auto node = std::make_unique<ast::Macro>(Advance().line);
    node->name = ExpectIdentifier();
    node->params = ParseSignature();
    macros_.push_back(node.get());
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = ParseBlockUntil("endmacro", "macro");
    loop_depth_ = saved_loop_depth;
    macros_.pop_back();
    return node;
  }

  std::vector<ast::Param> ParseSignature() {
    std::vector<ast::Param> params;
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!params.empty()) ExpectOp(",");
      ast::Param param;
      param.name = ExpectIdentifier();
      if (SkipOp("=")) {
        param.default_value = ParseExpression(true);
      } else if (!params.empty() && params.back().default_value) {
        Fail("non-default argument follows default argument");
      }
      params.push_back(std::move(param));
    }
    ExpectOp(")");
    return params;
  }

  StmtPtr ParseCallBlock() {
    auto node = std::make_unique<ast::CallBlock>(Advance().line);
    if (IsOp("(")) node->caller_params = ParseSignature();
    node->call = ParseExpression(true);
    if (node->call->kind != ast::Expr::Kind::kCall) Fail("expected call", node->line);
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = ParseBlockUntil("endcall", "call");
    loop_depth_ = saved_loop_depth;
    return node;
  }

  StmtPtr ParseFilterBlock() {
    auto node = std::make_unique<ast::FilterBlock>(Advance().line);
    do {
      node->filters.push_back(ParseFilterCall());
    } while (SkipOp("|"));
    node->body = ParseBlockUntil("endfilter", "filter");
    return node;
  }

  StmtPtr ParseWith() {
    auto node = std::make_unique<ast::With>(Advance().line);
    while (Current().type != TokenType::kBlockEnd) {
      if (!node->assignments.empty()) ExpectOp(",");
      ast::Target target = ParseTarget(false, nullptr);
      ExpectOp("=");
      node->assignments.emplace_back(std::move(target), ParseExpression(true));
    }
    node->body = ParseBlockUntil("endwith", "with");
    return node;
  }

  StmtPtr ParsePrint() {
    int line = Advance().line;
    return std::make_unique<ast::Print>(line, ParseTuple(true, false));
  }

  StmtPtr ParseGeneration() {
    auto node = std::make_unique<ast::Scope>(Advance().line);
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = ParseBlockUntil("endgeneration", "generation");
    loop_depth_ = saved_loop_depth;
    return node;
  }

  StmtPtr ParseLoopControl() {
    const Token& token = Advance();
    if (loop_depth_ == 0) Fail("'" + token.text + "' outside loop", token.line);
    return std::make_unique<ast::LoopControl>(token.line, token.text == "break");
  }

  // A `set`/`for`/`with` target: `name`, `ns.attr` (when `with_namespace`),
  // or a tuple of names (parenthesised or not). `end_name` ends a bare
  // tuple (`in` for `for`).
  ast::Target ParseTarget(bool with_namespace, const char* end_name) {
    if (with_namespace && Current().type == TokenType::kName &&
        Peek().type == TokenType::kOperator && Peek().text == ".") {
      ast::Target target;
      target.kind = ast::Target::Kind::kNamespaceAttr;
      target.name = Advance().text;
      Advance();
      target.attr = ExpectIdentifier();
      return target;
    }
    return ParseTargetTuple(end_name, false);
  }

  ast::Target ParseTargetTuple(const char* end_name, bool parenthesised) {
    DepthGuard guard(this);
    std::vector<ast::Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) ExpectOp(",");
      bool at_end = IsOp(")") || Current().type == TokenType::kBlockEnd ||
                    (end_name != nullptr && IsName(end_name));
      if (at_end) break;
      items.push_back(ParseTargetAtom());
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    if (items.empty() && !parenthesised) Fail("can't assign to an empty target");
    ast::Target target;
    target.kind = ast::Target::Kind::kTuple;
    target.items = std::move(items);
    return target;
  }

  ast::Target ParseTargetAtom() {
    if (SkipOp("(")) {
      ast::Target inner = ParseTargetTuple(nullptr, true);
      ExpectOp(")");
      return inner;
    }
    if (Current().type != TokenType::kName) Fail("can't assign to '" + Describe(Current()) + "'");
    const std::string& name = Current().text;
    if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
        name == "None") {
      Fail("can't assign to constant '" + name + "'");
    }
    ast::Target target;
    target.name = Advance().text;
    return target;
  }

  // ---- expressions ----------------------------------------------------------

  // Comma-separated expressions (a tuple when there is a comma). Without
  // `with_condition` the items cannot be `x if c else y` (so `for`/`if`
  // keep their own `if`). `end_name` also ends the tuple.
  ExprPtr ParseTuple(bool with_condition, bool parenthesised, const char* end_name = nullptr) {
    int line = Current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) ExpectOp(",");
      bool at_end = IsOp(")") || Current().type == TokenType::kBlockEnd ||
                    Current().type == TokenType::kVariableEnd ||
                    (end_name != nullptr && IsName(end_name));
      if (at_end) break;
      items.push_back(ParseExpression(with_condition));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!parenthesised) Fail("Expected an expression, got '" + Describe(Current()) + "'");
    }
    auto tuple = std::make_unique<ast::ListDisplay>(line, true);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr ParseExpression(bool with_condition) {
    DepthGuard guard(this);
    return with_condition ? ParseCondition() : ParseOr();
  }

  ExprPtr ParseCondition() {
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
      int line = Advance().line;
      ExprPtr test = ParseOr();
      ExprPtr otherwise = SkipName("else") ? ParseCondition() : nullptr;
      expr = std::make_unique<ast::Condition>(line, std::move(test), std::move(expr),
                                              std::move(otherwise));
    }
    return expr;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      int line = Advance().line;
      left = std::make_unique<ast::Binary>(line, Op::kOr, std::move(left), ParseAnd());
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      int line = Advance().line;
      left = std::make_unique<ast::Binary>(line, Op::kAnd, std::move(left), ParseNot());
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      int line = Advance().line;
      return std::make_unique<ast::Unary>(line, Op::kNot, ParseNot());
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    int line = Current().line;
    ExprPtr first = ParseMath1();
    std::unique_ptr<ast::Compare> compare;
    while (true) {
      Op op;
      if (IsOp("==")) {
        op = Op::kEq;
      } else if (IsOp("!=")) {
        op = Op::kNe;
      } else if (IsOp("<")) {
        op = Op::kLt;
      } else if (IsOp("<=")) {
        op = Op::kLe;
      } else if (IsOp(">")) {
        op = Op::kGt;
      } else if (IsOp(">=")) {
        op = Op::kGe;
      } else if (IsName("in")) {
        op = Op::kIn;
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        Advance();
        op = Op::kNotIn;
      } else {
        break;
      }
      Advance();
      if (!compare) compare = std::make_unique<ast::Compare>(line, std::move(first));
      compare->rest.emplace_back(op, ParseMath1());
    }
    if (compare) return compare;
    return first;
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      Op op = Current().text == "+" ? Op::kAdd : Op::kSub;
      int line = Advance().line;
      left = std::make_unique<ast::Binary>(line, op, std::move(left), ParseConcat());
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      int line = Advance().line;
      left = std::make_unique<ast::Binary>(line, Op::kConcat, std::move(left), ParseMath2());
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (true) {
      Op op;
      if (IsOp("*")) {
        op = Op::kMul;
      } else if (IsOp("/")) {
        op = Op::kDiv;
      } else if (IsOp("//")) {
        op = Op::kFloorDiv;
      } else if (IsOp("%")) {
        op = Op::kMod;
      } else {
        return left;
      }
      int line = Advance().line;
      left = std::make_unique<ast::Binary>(line, op, std::move(left), ParsePow());
    }
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      int line = Advance().line;
      left = std::make_unique<ast::Binary>(line, Op::kPow, std::move(left), ParseUnary(true));
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      Op op = Current().text == "-" ? Op::kNeg : Op::kPos;
      int line = Advance().line;
      node = std::make_unique<ast::Unary>(line, op, ParseUnary(false));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& token = Current();
    int line = token.line;
    switch (token.type) {
      case TokenType::kName: {
        Advance();
        if (token.text == "true" || token.text == "True") return Literal(line, Value::Bool(true));
        if (token.text == "false" || token.text == "False")
          return Literal(line, Value::Bool(false));
        if (token.text == "none" || token.text == "None") return Literal(line, Value::None());
        NoteNameUse(token.text);
        return std::make_unique<ast::Name>(line, token.text);
      }
      case TokenType::kString: {
        std::string text;
        while (Current().type == TokenType::kString) text += Advance().text;
        return Literal(line, Value::String(std::move(text)));
      }
      case TokenType::kInteger:
        Advance();
        return Literal(line, Value::Int(token.int_value));
      case TokenType::kFloat:
        Advance();
        return Literal(line, Value::Float(token.float_value));
      case TokenType::kOperator:
        if (token.text == "(") {
          Advance();
          ExprPtr inner = ParseTuple(true, true);
          ExpectOp(")");
          return inner;
        }
        if (token.text == "[") return ParseList();
        if (token.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    if (token.type == TokenType::kEnd) Fail("unexpected end of template");
    Fail("unexpected '" + Describe(token) + "'");
  }

  static ExprPtr Literal(int line, Value value) {
    return std::make_unique<ast::Literal>(line, std::move(value));
  }

  void NoteNameUse(const std::string& name) {
    if (macros_.empty()) return;
    if (name == "varargs") macros_.back()->uses_varargs = true;
    if (name == "kwargs") macros_.back()->uses_kwargs = true;
  }

  ExprPtr ParseList() {
    auto list = std::make_unique<ast::ListDisplay>(Advance().line, false);
    while (!IsOp("]")) {
      if (!list->items.empty()) ExpectOp(",");
      if (IsOp("]")) break;
      list->items.push_back(ParseExpression(true));
    }
    ExpectOp("]");
    return list;
  }

  ExprPtr ParseDict() {
    auto dict = std::make_unique<ast::DictDisplay>(Advance().line);
    while (!IsOp("}")) {
      if (!dict->items.empty()) ExpectOp(",");
      if (IsOp("}")) break;
      ExprPtr key = ParseExpression(true);
      ExpectOp(":");
      dict->items.emplace_back(std::move(key), ParseExpression(true));
    }
    ExpectOp("}");
    return dict;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        int line = Advance().line;
        node = std::make_unique<ast::Filter>(line, std::move(node), ParseFilterCall());
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const Token& token = Advance();
    int line = token.line;
    if (token.text == ".") {
      const Token& attr = Advance();
      if (attr.type == TokenType::kName)
        return std::make_unique<ast::GetAttr>(line, std::move(node), attr.text);
      if (attr.type != TokenType::kInteger) Fail("expected name or number");
      return std::make_unique<ast::GetItem>(line, std::move(node),
                                            Literal(line, Value::Int(attr.int_value)));
    }
    // '['
    ExprPtr result;
    if (IsOp(":")) {
      result = ParseSliceRest(line, std::move(node), nullptr);
    } else {
      ExprPtr key = ParseExpression(true);
      if (IsOp(":")) {
        result = ParseSliceRest(line, std::move(node), std::move(key));
      } else {
        result = std::make_unique<ast::GetItem>(line, std::move(node), std::move(key));
      }
    }
    if (IsOp(",")) FailUnsupported("tuple subscript (a[x, y])");
    ExpectOp("]");
    return result;
  }

  // After `object[start` (start may be null), at the first ':'.
  ExprPtr ParseSliceRest(int line, ExprPtr object, ExprPtr start) {
    auto slice = std::make_unique<ast::Slice>(line, std::move(object));
    slice->start = std::move(start);
    ExpectOp(":");
    if (!IsOp(":") && !IsOp("]") && !IsOp(",")) slice->stop = ParseExpression(true);
    if (SkipOp(":")) {
      if (!IsOp("]") && !IsOp(",")) slice->step = ParseExpression(true);
    }
    return slice;
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto call = std::make_unique<ast::Call>(Current().line, std::move(callee));
    call->args = ParseArgs();
    return call;
  }

  ast::Args ParseArgs() {
    ast::Args args;
    ExpectOp("(");
    bool need_comma = false;
    while (!IsOp(")")) {
      if (need_comma) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**"))
        FailUnsupported("'" + Current().text + "' argument unpacking in a call");
      if (Current().type == TokenType::kName && Peek().type == TokenType::kOperator &&
          Peek().text == "=") {
        std::string key = Advance().text;
        Advance();
        args.keyword.emplace_back(std::move(key), ParseExpression(true));
      } else {
        if (!args.keyword.empty()) Fail("invalid syntax for function call expression");
        args.positional.push_back(ParseExpression(true));
      }
      need_comma = true;
    }
    ExpectOp(")");
    return args;
  }

  // `name[.name...][(args)]` after a '|'.
  ast::FilterCall ParseFilterCall() {
    ast::FilterCall call;
    call.line = Current().line;
    call.name = ExpectIdentifier();
    while (SkipOp(".")) call.name += "." + ExpectIdentifier();
    switch (FilterSupport(call.name)) {
      case Support::kUnknown:
        Fail("No filter named '" + call.name + "'.", call.line);
      case Support::kUnsupported:
        FailUnsupported("filter '" + call.name + "'", call.line);
      case Support::kSupported:
        break;
    }
    if (IsOp("(")) call.args = ParseArgs();
    return call;
  }

  ExprPtr ParseTest(ExprPtr node) {
    int line = Advance().line;  // 'is'
    bool negated = SkipName("not");
    std::string name = ExpectIdentifier();
    while (SkipOp(".")) name += "." + ExpectIdentifier();
    switch (TestSupport(name)) {
      case Support::kUnknown:
        Fail("No test named '" + name + "'.", line);
      case Support::kUnsupported:
        FailUnsupported("test '" + name + "'", line);
      case Support::kSupported:
        break;
    }
    auto test = std::make_unique<ast::Test>(line, std::move(node), std::move(name), negated);
    const Token& next = Current();
    bool starts_argument =
        next.type == TokenType::kName || next.type == TokenType::kString ||
        next.type == TokenType::kInteger || next.type == TokenType::kFloat ||
        (next.type == TokenType::kOperator && (next.text == "[" || next.text == "{"));
    if (IsOp("(")) {
      test->args = ParseArgs();
    } else if (starts_argument && !IsName("else") && !IsName("or") && !IsName("and") &&
               // Jinja would take `if` as the test's argument and then fail
               // on `x is defined if c else y`; the conditional expression is
               // the only reading an author can mean.
               !IsName("if")) {
      if (IsName("is")) Fail("You cannot chain multiple tests with is");
      test->args.positional.push_back(ParsePostfix(ParsePrimary()));
    }
    return test;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<ast::Macro*> macros_;  // macros being parsed, innermost last
};

}  // namespace

StatusOr<std::unique_ptr<ast::Program>> Parse(std::vector<Token> tokens) {
  try {
    return Parser(std::move(tokens)).ParseProgram();
  } catch (const TemplateError& error) {
    return error.ToStatus();
  }
}

}  // namespace nightshift::chat
