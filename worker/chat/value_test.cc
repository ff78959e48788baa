#include "worker/chat/value.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace nightshift::chat {
namespace {

using Json = nlohmann::ordered_json;

Value S(const char* s) { return Value::String(s); }

TEST(FormatFloat, MatchesPythonRepr) {
  struct Case {
    double value;
    const char* repr;
  };
  const Case cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {2.5, "2.5"},
      {0.1, "0.1"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {0.0001, "0.0001"},
      {1e-5, "1e-05"},
      {1.5e-7, "1.5e-07"},
      {123456789.123, "123456789.123"},
      {1e100, "1e+100"},
      {-2.5e300, "-2.5e+300"},
      {5e-324, "5e-324"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
  };
  for (const Case& c : cases) EXPECT_EQ(FormatFloat(c.value), c.repr) << c.repr;
  EXPECT_EQ(FormatFloat(std::nan("")), "nan");
}

TEST(Value, StrAndReprFollowPython) {
  EXPECT_EQ(ToStr(Value()), "");
  EXPECT_EQ(ToRepr(Value()), "Undefined");
  EXPECT_EQ(ToStr(Value::None()), "None");
  EXPECT_EQ(ToStr(Value::Bool(false)), "False");
  EXPECT_EQ(ToStr(Value::Int(-42)), "-42");
  EXPECT_EQ(ToStr(S("it's")), "it's");
  EXPECT_EQ(ToRepr(S("it's")), "\"it's\"");
  EXPECT_EQ(ToStr(Value::List({S("a"), Value::Int(1), Value::None(), Value::Float(2.0)})),
            "['a', 1, None, 2.0]");
  EXPECT_EQ(ToStr(Value::Tuple({Value::Int(1)})), "(1,)");
  EXPECT_EQ(ToStr(Value::Tuple({})), "()");
  Dict d;
  d.Set(S("b"), Value::List({}));
  d.Set(S("a"), Value::MakeDict(Dict()));
  EXPECT_EQ(ToStr(Value::MakeDict(d)), "{'b': [], 'a': {}}");
  EXPECT_EQ(ToStr(Value::Namespace(d)), "<Namespace {'b': [], 'a': {}}>");
}

TEST(Value, FromJsonKeepsKeyOrderAndTypes) {
  Value v = Value::FromJson(
      Json::parse(R"({"z": 1, "a": [true, null, 1.5, "s"], "m": {"k": 18446744073709551615}})"));
  ASSERT_EQ(v.kind(), Value::Kind::kDict);
  EXPECT_EQ(ToStr(v), "{'z': 1, 'a': [True, None, 1.5, 's'], 'm': {'k': 1.8446744073709552e+19}}");
  EXPECT_EQ(Value::FromJson(Json(3)).kind(), Value::Kind::kInt);
  EXPECT_EQ(Value::FromJson(Json(3.0)).kind(), Value::Kind::kFloat);
}

TEST(Value, TruthinessFollowsPython) {
  EXPECT_FALSE(Truthy(Value()));
  EXPECT_FALSE(Truthy(Value::None()));
  EXPECT_FALSE(Truthy(Value::Int(0)));
  EXPECT_FALSE(Truthy(Value::Float(0.0)));
  EXPECT_FALSE(Truthy(S("")));
  EXPECT_FALSE(Truthy(Value::List({})));
  EXPECT_FALSE(Truthy(Value::MakeDict(Dict())));
  EXPECT_TRUE(Truthy(S(" ")));
  EXPECT_TRUE(Truthy(Value::Iterator("generator", {})));  // generators are always true
  EXPECT_TRUE(Truthy(Value::Namespace(Dict())));
}

TEST(Value, EqualityFollowsPython) {
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(Equals(Value::Bool(true), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::Int(1), S("1")));
  EXPECT_TRUE(Equals(Value(), Value()));  // Undefined == Undefined
  EXPECT_FALSE(Equals(Value(), Value::None()));
  EXPECT_FALSE(Equals(Value::List({Value::Int(1)}), Value::Tuple({Value::Int(1)})));
  Dict a, b;
  a.Set(S("x"), Value::Int(1));
  a.Set(S("y"), Value::Int(2));
  b.Set(S("y"), Value::Int(2));
  b.Set(S("x"), Value::Float(1.0));
  EXPECT_TRUE(Equals(Value::MakeDict(a), Value::MakeDict(b)));  // order does not matter
  Value ns = Value::Namespace(a);
  EXPECT_FALSE(Equals(ns, Value::Namespace(a)));  // identity
  EXPECT_TRUE(Equals(ns, ns));
}

TEST(Value, OrderingFollowsPython) {
  EXPECT_EQ(*Compare(Value::Int(1), Value::Float(1.5), "<"), -1);
  EXPECT_EQ(*Compare(S("b"), S("a"), "<"), 1);
  EXPECT_EQ(*Compare(S("é"), S("z"), "<"), 1);  // code point order
  EXPECT_EQ(
      *Compare(Value::List({Value::Int(1), Value::Int(2)}), Value::List({Value::Int(1)}), "<"), 1);
  StatusOr<int> mixed = Compare(S("a"), Value::Int(1), ">=");
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().message(), "'>=' not supported between instances of 'str' and 'int'");
}

TEST(Dict, KeepsInsertionOrderAndMergesEqualKeys) {
  Dict d;
  d.Set(S("b"), Value::Int(1));
  d.Set(Value::Int(1), S("int"));
  d.Set(S("a"), Value::Int(2));
  d.Set(S("b"), Value::Int(3));         // replaced in place
  d.Set(Value::Bool(true), S("bool"));  // True == 1: the same key
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(ToStr(Value::MakeDict(d)), "{'b': 3, 1: 'bool', 'a': 2}");
  EXPECT_EQ(ToStr(*d.Find(Value::Float(1.0))), "bool");
  EXPECT_EQ(d.Find(S("missing")), nullptr);
}

TEST(Value, IterateAndLength) {
  Dict d;
  d.Set(S("k1"), Value::Int(1));
  d.Set(S("k2"), Value::Int(2));
  EXPECT_EQ(ToStr(Value::List(*Iterate(Value::MakeDict(d)))), "['k1', 'k2']");
  EXPECT_EQ(ToStr(Value::List(*Iterate(S("hé!")))), "['h', 'é', '!']");
  EXPECT_TRUE(Iterate(Value())->empty());
  Value generator = Value::Iterator("generator", {Value::Int(1)});
  EXPECT_EQ(Iterate(generator)->size(), 1u);
  EXPECT_TRUE(Iterate(generator)->empty());  // consumed
  EXPECT_EQ(Iterate(Value::Int(3)).status().message(), "'int' object is not iterable");
  EXPECT_EQ(*Length(S("日本")), 2);
  EXPECT_EQ(*Length(Value()), 0);
  EXPECT_EQ(Length(Value::None()).status().message(), "object of type 'NoneType' has no len()");
}

TEST(DumpJson, MatchesPythonJsonDumps) {
  Value v = Value::FromJson(
      Json::parse(R"({"s": "é\"\\\n\t\u0001\u007f", "n": [1, 2.5, 1e16, null, true], "e": {}})"));
  EXPECT_EQ(*DumpJson(v, JsonFormat()), R"({"s": "é\"\\\n\t\u0001)"
                                        "\x7f"
                                        R"(", "n": [1, 2.5, 1e+16, null, true], "e": {}})");
  JsonFormat ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*DumpJson(S("é😀\x7f"), ascii), R"("\u00e9\ud83d\ude00\u007f")");
  JsonFormat pretty;
  pretty.indent = "  ";
  pretty.item_separator = ",";
  EXPECT_EQ(*DumpJson(Value::FromJson(Json::parse(R"({"a": [1, []], "b": {}})")), pretty),
            "{\n  \"a\": [\n    1,\n    []\n  ],\n  \"b\": {}\n}");
  JsonFormat sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(*DumpJson(Value::FromJson(Json::parse(R"({"b": 1, "a": 2})")), sorted),
            R"({"a": 2, "b": 1})");
  Dict keys;
  keys.Set(Value::Int(1), S("x"));
  keys.Set(Value::None(), S("y"));
  EXPECT_EQ(*DumpJson(Value::MakeDict(keys), JsonFormat()), R"({"1": "x", "null": "y"})");
  EXPECT_EQ(*DumpJson(Value::Float(std::nan("")), JsonFormat()), "NaN");
  EXPECT_EQ(DumpJson(Value(), JsonFormat()).status().message(),
            "Object of type Undefined is not JSON serializable");
  EXPECT_EQ(DumpJson(Value::Iterator("generator", {}), JsonFormat()).status().message(),
            "Object of type generator is not JSON serializable");
}

}  // namespace
}  // namespace nightshift::chat
