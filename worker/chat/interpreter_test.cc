// The interpreter construct by construct (expected values checked against
// Python Jinja2 configured like transformers), its error reporting, the
// constructs it refuses by name, and its limits.
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/chat/chat_template.h"

namespace nightshift::chat {
namespace {

using Json = nlohmann::ordered_json;

// The rendered text, or the status when compiling or rendering fails.
StatusOr<std::string> Run(const std::string& source, const Json& variables = Json::object()) {
  NS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Compile(source));
  return t.Render(variables);
}

// The rendered text; a failure is reported and yields "<error>".
std::string R(const std::string& source, const Json& variables = Json::object()) {
  StatusOr<std::string> out = Run(source, variables);
  EXPECT_TRUE(out.ok()) << source << "\n" << out.status().ToString();
  return out.ok() ? *out : "<error>";
}

// The failure of a template expected to fail.
Status E(const std::string& source, const Json& variables = Json::object()) {
  StatusOr<std::string> out = Run(source, variables);
  EXPECT_FALSE(out.ok()) << source << " rendered " << (out.ok() ? *out : "");
  return out.ok() ? Status() : out.status();
}

const Json kMessages = Json::parse(R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "Hello!"},
  {"role": "user", "content": "Bye"}])");

TEST(Interpreter, TextAndPrint) {
  EXPECT_EQ(R("plain text"), "plain text");
  EXPECT_EQ(R("Hello {{ name }}!", {{"name", "Ann"}}), "Hello Ann!");
  EXPECT_EQ(R(""), "");
  EXPECT_EQ(R("{{ 'a' }}{{ \"b\" }}"), "ab");
}

TEST(Interpreter, PrintsValuesAsPythonStr) {
  EXPECT_EQ(R("{{ 1 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e16 }}|{{ true }}|{{ none }}"),
            "1|1.5|2.0|1e+16|True|None");
  EXPECT_EQ(R("{{ [1, 'a', none] }}|{{ {'k': [true]} }}|{{ (1,) }}"),
            "[1, 'a', None]|{'k': [True]}|(1,)");
  EXPECT_EQ(R("{{ x }}", {{"x", {{"b", 1}, {"a", "it's"}}}}), "{'b': 1, 'a': \"it's\"}");
}

TEST(Interpreter, WhitespaceControlLikeTransformers) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the
  // indentation before it; neither applies to {{ }}.
  EXPECT_EQ(R("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(R("  {% if true %}\n  A\n  {% endif %}\n  B"), "  A\n  B");
  EXPECT_EQ(R("{{ 'x' }}\n{{ 'y' }}"), "x\ny");
  EXPECT_EQ(R("a   {%- if true -%}   b   {%- endif -%}   c"), "abc");
  EXPECT_EQ(R("a\n  {{- 'b' -}}  \nc"), "abc");
  EXPECT_EQ(R("  {%+ if true +%}\nA{% endif %}"), "  \nA");
  EXPECT_EQ(R("a\n  {# comment #}\nb"), "a\nb");
  EXPECT_EQ(R("x  {% if true %}y{% endif %}  z"), "x  y  z");  // not at a line start
  EXPECT_EQ(R("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n"), "a\nb\n");
  EXPECT_EQ(R("line\n\n"), "line\n");  // one trailing newline dropped
  EXPECT_EQ(R("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
}

TEST(Interpreter, Arithmetic) {
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}"),
            "3 -4 1 2 3.5 2.0");
  EXPECT_EQ(R("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 - 4 }} {{ true + 1 }}"), "1024 0.5 3 2");
  EXPECT_EQ(R("{{ 'ab' * 2 }} {{ [0] * 2 }} {{ 'a' + 'b' }} {{ [1] + [2] }}"),
            "abab [0, 0] ab [1, 2]");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none ~ missing }}"), "a1None");
  EXPECT_EQ(R("{{ -(1 + 2) }} {{ --2 }} {{ -1|abs }}"), "-3 2 1");
}

TEST(Interpreter, ComparisonsAndLogic) {
  EXPECT_EQ(
      R("{{ 1 == 1.0 }} {{ true == 1 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }}"),
      "True True True False True");
  EXPECT_EQ(R("{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1] == (1,) }}"), "True False");
  EXPECT_EQ(R("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in 'abc' }}"),
            "True True True True");
  // and/or return an operand, as in Python.
  EXPECT_EQ(R("{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ not [] }}"), "x|b||True");
  EXPECT_EQ(R("{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 else 'n' }}|{{ 'y' if 0 }}"), "y|n|");
}

TEST(Interpreter, ParsesWithJinjaPrecedence) {
  // A filter binds tighter than arithmetic; `not x is defined` is `not (x is defined)`.
  EXPECT_EQ(R("{{ m|length - 1 }}", {{"m", kMessages}}), "3");
  EXPECT_EQ(R("{{ not x is defined }}"), "True");
  EXPECT_EQ(R("{{ (m[0].role == 'user') != (0 % 2 == 0) }}", {{"m", kMessages}}), "True");
  EXPECT_EQ(R("{{ 2 ** 3 ** 2 }}"), "64");  // Jinja's ** is left-associative
}

TEST(Interpreter, SubscriptsSlicesAndAttributes) {
  Json vars = {{"m", kMessages}};
  EXPECT_EQ(R("{{ m[0]['role'] }} {{ m[-1].content }} {{ m.1.role }} {{ m[1:]|length }}", vars),
            "system Bye user 3");
  EXPECT_EQ(
      R("{{ (m[::-1]|first).content }} {{ 'hello'[1:3] }} {{ 'héllo'[::-1] }} {{ 'ab'[:-1] }}",
        vars),
      "Bye el olléh a");
  EXPECT_EQ(R("{{ messages[loop_index - 1].role }}", {{"messages", kMessages}, {"loop_index", 2}}),
            "user");
  // a.b tries Python attributes (methods) first, a['b'] the key first.
  Json d = {{"d", {{"items", 1}}}};
  EXPECT_EQ(R("{{ d.items is callable }} {{ d['items'] }}", d), "True 1");
  EXPECT_EQ(R("{{ x.content.content is defined }}", {{"x", {{"content", "s"}}}}), "False");
  EXPECT_EQ(R("{{ c[0]['text'] }}", {{"c", Json::parse(R"([{"type": "text", "text": "T"}])")}}),
            "T");
}

TEST(Interpreter, UndefinedBehavesLikeJinjasDefault) {
  EXPECT_EQ(
      R("[{{ missing }}][{{ d.nope }}][{{ none.x }}][{{ 'ab'[9] }}]", {{"d", Json::object()}}),
      "[][][][]");
  EXPECT_EQ(R("{{ missing is defined }} {{ missing is undefined }} {{ missing|length }} {{ "
              "missing|default('d') }}"),
            "False True 0 d");
  EXPECT_EQ(R("{% for x in missing %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(E("{{ missing.attr }}").message(), "line 1: 'missing' is undefined");
  EXPECT_EQ(E("{{ d.a.b }}", {{"d", Json::object()}}).message(),
            "line 1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(E("{{ missing + 'x' }}").message(), "line 1: 'missing' is undefined");
  EXPECT_EQ(E("{{ m.content + 'x' }}", {{"m", Json::object()}}).message(),
            "line 1: 'dict object' has no attribute 'content'");
}

TEST(Interpreter, IfElifElse) {
  EXPECT_EQ(R("{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% "
              "endif %},{% endfor %}"),
            "one,two,many,");
  EXPECT_EQ(R("{% if messages %}yes{% endif %}", {{"messages", Json::array()}}), "");
}

TEST(Interpreter, ForLoopVariables) {
  EXPECT_EQ(
      R("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
        "{{ loop.last }}{{ loop.length }};{% endfor %}"),
      "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}"),
            "-2 1-3 2- ");
  EXPECT_EQ(
      R("{% for x in [1, 1, 2] %}{{ loop.cycle('a', 'b') }}{{ loop.changed(x) }}{% endfor %}"),
      "aTruebFalseaTrue");
}

TEST(Interpreter, ForElseFilterUnpackingAndDicts) {
  EXPECT_EQ(R("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  // The filter runs before the loop: loop.last counts only the kept items.
  EXPECT_EQ(R("{% for k, v in d.items() if k != 'skip' %}{{ k }}={{ v }}{{ ',' if not loop.last "
              "}}{% endfor %}",
              {{"d", {{"a", 1}, {"skip", 2}, {"b", 3}}}}),
            "a=1,b=3");
  EXPECT_EQ(R("{% for a, (b, c) in [(1, (2, 3))] %}{{ a }}{{ b }}{{ c }}{% endfor %}"), "123");
  EXPECT_EQ(R("{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}"), "za");  // insertion order
  EXPECT_EQ(E("{% for a, b in [[1, 2, 3]] %}{% endfor %}").message(),
            "line 1: too many values to unpack (expected 2)");
}

TEST(Interpreter, ForBreakContinueAndRecursion) {
  EXPECT_EQ(
      R("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
        "{% endif %}{{ i }}{% endfor %}"),
      "0134");
  Json tree = Json::parse(R"([{"n": "a", "kids": [{"n": "b", "kids": []}]}, {"n": "c"}])");
  EXPECT_EQ(R("{% for x in t recursive %}{{ x.n }}{{ loop.depth }}{% if x.kids %}({{ loop(x.kids) "
              "}}){% endif %}"
              "{% endfor %}",
              {{"t", tree}}),
            "a1(b2)c1");
  EXPECT_EQ(E("{% break %}").message(), "line 1: 'break' outside loop");
}

TEST(Interpreter, LoopBodiesHaveTheirOwnScope) {
  // Assignments in a loop body do not leak out, and each iteration starts
  // from the enclosing values (Jinja2, unlike some other engines).
  EXPECT_EQ(R("{% set x = 'out' %}{% for i in [1, 2] %}{{ x }}{% set x = 'in' %}{{ x }} {% endfor "
              "%}{{ x }}"),
            "outin outin out");
  EXPECT_EQ(
      R("{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'set' %}{% endif %}[{{ y }}]{% endfor %}"),
      "[set][]");
  EXPECT_EQ(R("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{% endfor %}{{ loop.index "
              "}};{% endfor %}"),
            "121;122;");
  // `if` has no scope of its own.
  EXPECT_EQ(R("{% if true %}{% set v = 1 %}{% endif %}{{ v }}"), "1");
}

TEST(Interpreter, NamespaceAttributesSurviveScopes) {
  EXPECT_EQ(R("{% set ns = namespace(n=0, last=none) %}{% for m in msgs %}{% if m.role == 'user' %}"
              "{% set ns.n = ns.n + 1 %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ "
              "ns.n }} {{ ns.last }}",
              {{"msgs", kMessages}}),
            "2 3");
  EXPECT_EQ(R("{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{{ ns['a'] }}"), "11");
  EXPECT_EQ(R("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"), "12");
  EXPECT_EQ(E("{% set d = {} %}{% set d.x = 1 %}").message(),
            "line 1: cannot assign attribute on non-namespace object");
}

TEST(Interpreter, SetForms) {
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }}"), "12 (1, 2)");
  EXPECT_EQ(R("{% set x %} hi {{ 'there' }} {% endset %}[{{ x }}]"), "[ hi there ]");
  EXPECT_EQ(R("{% set y | upper | trim %} abc {% endset %}[{{ y }}]"), "[ABC]");
  EXPECT_EQ(R("{% if m[0].role == 'system' %}{% set m = m[1:] %}{% endif %}{{ m|length }}",
              {{"m", kMessages}}),
            "3");
}

TEST(Interpreter, Macros) {
  EXPECT_EQ(R("{% macro g(name, greet='Hi') %}{{ greet }}, {{ name }}!{% endmacro %}"
              "{{ g('A') }} {{ g('B', 'Yo') }} {{ g(greet='Hey', name='C') }} [{{ g() }}]"),
            "Hi, A! Yo, B! Hey, C! [Hi, !]");
  EXPECT_EQ(R("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, x=3) }}"),
            "1(2,){'x': 3}");
  EXPECT_EQ(R("{% macro w(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call w('b') "
              "%}in{% endcall %}"),
            "<b>in</b>");
  EXPECT_EQ(R("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
              "{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}"),
            "[1][2]");
  EXPECT_EQ(
      R("{% macro fact(n) %}{{ 1 if n <= 1 else n * fact(n - 1)|int }}{% endmacro %}{{ fact(5) }}"),
      "120");
  EXPECT_EQ(E("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").message(),
            "line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(E("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}").message(),
            "line 1: macro 'm' takes no keyword argument 'b'");
}

TEST(Interpreter, FilterWithAndGenerationBlocks) {
  EXPECT_EQ(R("{% filter upper %}hi {{ 'x' }}{% endfilter %}"), "HI X");
  EXPECT_EQ(R("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}"), "3False");
  EXPECT_EQ(R("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(Interpreter, TojsonIsPythonJsonDumps) {
  Json x = Json::parse(R"({"b": [1, {"c": null}], "a": "é\"", "e": [], "f": 1.0})");
  EXPECT_EQ(R("{{ x|tojson }}", {{"x", x}}),
            R"({"b": [1, {"c": null}], "a": "é\"", "e": [], "f": 1.0})");
  EXPECT_EQ(R("{{ x|tojson(indent=2) }}", {{"x", Json::parse(R"({"a": [1, 2], "b": {}})")}}),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(
      R("{{ x|tojson(separators=(',', ':'), sort_keys=true) }}", {{"x", {{"b", 1}, {"a", 2}}}}),
      R"({"a":2,"b":1})");
  EXPECT_EQ(R("{{ 'é😀'|tojson(ensure_ascii=true) }}"), R"("\u00e9\ud83d\ude00")");
  EXPECT_EQ(E("{{ missing|tojson }}").message(),
            "line 1: Object of type Undefined is not JSON serializable");
}

TEST(Interpreter, CommonFilters) {
  Json vars = {{"m", kMessages}};
  EXPECT_EQ(
      R("[{{ '  x  '|trim }}] {{ 'ab'|length }} {{ m|map(attribute='role')|join(',') }}", vars),
      "[x] 2 system,user,assistant,user");
  EXPECT_EQ(R("{{ m|selectattr('role', 'equalto', 'user')|list|length }} "
              "{{ m|rejectattr('role', 'eq', 'user')|map(attribute='content')|join('/') }}",
              vars),
            "2 Be brief./Hello!");
  EXPECT_EQ(R("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }}"),
            "[1, 3] [2, 4]");
  EXPECT_EQ(R("{{ ['b', 'A', 'c']|sort }} {{ [3, 1]|sort(reverse=true) }} {{ ['a', 'A', "
              "'b']|unique|list }}"),
            "['A', 'b', 'c'] [3, 1] ['a', 'b']");
  EXPECT_EQ(
      R("{{ '42'|int + '1.5'|float }} {{ 'x'|int(7) }} {{ 3.14159|round(2) }} {{ 2.5|round }}"),
      "43.5 7 3.14 2.0");
  EXPECT_EQ(
      R("{{ 'a\nb'|indent(2, first=true) }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}"),
      "  a\n  b|Hello World|Hello");
  EXPECT_EQ(
      R("{{ {'a': 1}|items|list }} {{ [1, 2]|reverse|list }} {{ 'aaa'|replace('a', 'b', 2) }}"),
      "[('a', 1)] [2, 1] bba");
  EXPECT_EQ(R("{{ '%s=%d'|format('x', 2) }} {{ '%05.1f' % 3.14159 }} {{ '{}-{}'.format(1, 'b') }}"),
            "x=2 003.1 1-b");
}

TEST(Interpreter, GeneratorsAreOneShotAndAlwaysTrue) {
  // selectattr returns a generator in Python: true even when empty, empty
  // after one iteration, and without a length.
  EXPECT_EQ(R("{{ 'T' if ([]|select) else 'F' }}{{ 'T' if ([]|select|list) else 'F' }}"), "TF");
  EXPECT_EQ(R("{% set g = [1, 2]|select %}{{ g|list }}{{ g|list }}"), "[1, 2][]");
  EXPECT_EQ(E("{{ [1]|select|length }}").message(),
            "line 1: object of type 'generator' has no len()");
}

TEST(Interpreter, Tests) {
  EXPECT_EQ(
      R("{% for v in [1, 1.5, 'a', [1], {'a': 1}, none, true] %}{{ v is number }}{{ v is string }}"
        "{{ v is mapping }}{{ v is iterable }}{{ v is none }};{% endfor %}"),
      "TrueFalseFalseFalseFalse;TrueFalseFalseFalseFalse;FalseTrueFalseTrueFalse;"
      "FalseFalseFalseTrueFalse;FalseFalseTrueTrueFalse;FalseFalseFalseFalseTrue;"
      "TrueFalseFalseFalseFalse;");
  EXPECT_EQ(R("{{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 2 is gt 1 }} {{ false is false }} {{ 0 "
              "is false }}"),
            "True True True True False");
  EXPECT_EQ(R("{{ x is not none }} {{ x is string }}", {{"x", nullptr}}), "False False");
}

TEST(Interpreter, StringMethods) {
  EXPECT_EQ(R("{{ c.split('</think>')[-1].lstrip('\\n') }}|"
              "{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
              {{"c", "<think>\nwhy\n</think>\n\nanswer"}}),
            "answer|why");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ ' a b '.split() }} "
              "{{ 'a,b'.split(',', 1) }} {{ 'xax'.strip('x') }} {{ '-'.join(['a', 'b']) }}"),
            "True True ['a', 'b'] ['a', 'b'] a a-b");
  EXPECT_EQ(R("{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'ab cd'.title() }}{{ 'abca'.find('c') }}{{ "
              "'aa'.count('a') }}"),
            "ABabAb Cd22");
  EXPECT_EQ(R("{{ 'héllo'|upper }} {{ '日本語'|length }} {{ '日本語'[1] }}"), "HÉLLO 3 本");
}

TEST(Interpreter, RaiseExceptionReportsTheTemplatesMessageVerbatim) {
  Status st = E("line1\n{% if true %}{{ raise_exception('Roles must alternate!') }}{% endif %}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "Roles must alternate!");
  EXPECT_EQ(
      E("{% macro c(x) %}{{ raise_exception('bad: ' ~ x) }}{% endmacro %}{{ c(3) }}").message(),
      "bad: 3");
}

TEST(Interpreter, UnsupportedConstructsAreNamed) {
  struct Case {
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"{% include 'x.jinja' %}", "line 1: unsupported tag 'include'"},
      {"{% extends 'base' %}", "line 1: unsupported tag 'extends'"},
      {"{% import 'm' as m %}", "line 1: unsupported tag 'import'"},
      {"\n{% block b %}{% endblock %}", "line 2: unsupported tag 'block'"},
      {"{{ x|wordwrap }}", "line 1: unsupported filter 'wordwrap'"},
      {"{{ x|groupby('a') }}", "line 1: unsupported filter 'groupby'"},
      {"{{ f(*args) }}", "line 1: unsupported '*' argument unpacking in a call"},
      {"{{ x[1, 2] }}", "line 1: unsupported tuple subscript (a[x, y])"},
  };
  for (const Case& c : cases) {
    StatusOr<ChatTemplate> t = ChatTemplate::Compile(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << c.source;
    EXPECT_EQ(t.status().message(), c.message);
  }
  // Found only when evaluated (they depend on the value's type).
  EXPECT_EQ(E("{{ 'x'.center(5) }}").message(), "line 1: unsupported method 'str.center'");
  EXPECT_EQ(E("{{ '{:>5}'.format(1) }}").message(),
            "line 1: unsupported format spec in str.format ('{:>5}')");
  EXPECT_EQ(E("\n\n{{ cycler(1, 2) }}").message(), "line 3: unsupported global 'cycler'");
  EXPECT_EQ(E("{{ '%a' % 1 }}").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(
      E("{{ '{99999999999999999999}'.format(1) }}").message(),
      "line 1: Replacement index 99999999999999999999 out of range for positional args tuple");
}

TEST(Interpreter, UnknownNamesFailAsInJinja) {
  EXPECT_EQ(E("{% do x %}").message(), "line 1: Encountered unknown tag 'do'.");
  EXPECT_EQ(E("{{ 1|nosuch }}").message(), "line 1: No filter named 'nosuch'.");
  EXPECT_EQ(E("{{ 1 is nosuch }}").message(), "line 1: No test named 'nosuch'.");
  EXPECT_EQ(E("{{ [1].append(2) }}").message(),
            "line 1: access to attribute 'append' of 'list' object is unsafe.");
}

TEST(Interpreter, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(E("ok\n{% if true %}\nno end").message(),
            "line 3: Unexpected end of template. Jinja was looking for the following tags: 'elif' "
            "or 'else' "
            "or 'endif'. The innermost block that needs to be closed is 'if'.");
  EXPECT_EQ(E("a\nb\n{{ 1 + }}").message(), "line 3: unexpected 'end of print statement'");
  EXPECT_EQ(E("{{ 'unterminated }}").message(), "line 1: unexpected char '''");
  EXPECT_EQ(E("{# open").message(), "line 1: Missing end of comment tag");
  EXPECT_EQ(E("{{ (1 }}").message(), "line 1: unexpected '}', expected ')'");
  EXPECT_EQ(E("{% endfor %}").message(), "line 1: Encountered unknown tag 'endfor'.");
}

TEST(Interpreter, RuntimeErrorsUsePythonsMessages) {
  EXPECT_EQ(E("{{ 'a' + 1 }}").message(), "line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(E("{{ 1 / 0 }}").message(), "line 1: division by zero");
  EXPECT_EQ(E("{{ 5|length }}").message(), "line 1: object of type 'int' has no len()");
  EXPECT_EQ(E("{{ 'a' < 1 }}").message(),
            "line 1: '<' not supported between instances of 'str' and 'int'");
  EXPECT_EQ(E("x\n{{ 1 in none }}").message(),
            "line 2: argument of type 'NoneType' is not iterable");
}

TEST(Interpreter, LimitsFailInsteadOfExhaustingResources) {
  EXPECT_EQ(E("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").message(),
            "line 1: maximum recursion depth exceeded");
  EXPECT_EQ(E("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}").message(),
            "line 1: template nesting is too deep");
  std::string deep_ifs;
  for (int i = 0; i < 300; ++i) deep_ifs += "{% if true %}";
  EXPECT_EQ(E(deep_ifs).message(), "line 1: template nesting is too deep");
  EXPECT_EQ(E("{{ range(200000)|length }}").message(),
            "line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(E("{{ 'x' * 1000000000000 }}").message(), "line 1: repetition result is too large");
  EXPECT_EQ(E("{{ 9223372036854775807 + 1 }}").message(),
            "line 1: integer overflow (results beyond 64 bits are not supported)");
}

TEST(Interpreter, LenientWhereJinjaWouldFailToParse) {
  // Jinja2 takes `if` as the argument of `is defined` and fails; the
  // conditional expression is the only reading an author can mean.
  EXPECT_EQ(R("{{ x is defined if true else 'n' }}"), "False");
}

TEST(Interpreter, ConcurrentRendersOfOneTemplateAgree) {
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.role }}:{{ m.content|upper }};{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  const std::string expected = "system:BE BRIEF.;user:HI;assistant:HELLO!;user:BYE;4";
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 200; ++n) {
        StatusOr<std::string> out = t->Render(kMessages, false, nullptr);
        if (!out.ok() || *out != expected) ++mismatches[i];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(Interpreter, LongConversationsRenderQuickly) {
  // 2,000 messages of 6,000 characters through a typical template: linear work.
  Json messages = Json::array();
  for (int i = 0; i < 2000; ++i) {
    messages.push_back(
        {{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(6000, 'a' + i % 26)}});
  }
  StatusOr<ChatTemplate> t = ChatTemplate::Compile(
      "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content|trim + "
      "'<|im_end|>\\n' }}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out = t->Render(messages, true, nullptr);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->size(), 2000u * 6024 + 1000u * (4 + 9) + 22);  // markers + roles + prompt
}

}  // namespace
}  // namespace nightshift::chat
