#include "worker/chat/pystr.h"

#include <gtest/gtest.h>

namespace nightshift::chat::pystr {
namespace {

using Strings = std::vector<std::string>;

TEST(PyStr, ValidatesUtf8) {
  EXPECT_TRUE(ValidateUtf8("plain é 日本 😀").ok());
  EXPECT_EQ(ValidateUtf8("ab\xff").message(), "invalid UTF-8 at byte 2");
  EXPECT_FALSE(ValidateUtf8("\xc0\xaf").ok());          // overlong
  EXPECT_FALSE(ValidateUtf8("\xed\xa0\x80").ok());      // surrogate
  EXPECT_FALSE(ValidateUtf8("\xf4\x90\x80\x80").ok());  // past U+10FFFF
  EXPECT_FALSE(ValidateUtf8("\xe6\x97").ok());          // truncated
}

TEST(PyStr, LengthAndCodePoints) {
  EXPECT_EQ(Length("日本語😀"), 4u);
  EXPECT_EQ(Encode(Decode("añ😀")), "añ😀");
}

TEST(PyStr, WhitespaceIsPythons) {
  EXPECT_TRUE(IsSpace(0x1C));  // Python counts the information separators
  EXPECT_TRUE(IsSpace(0xA0));
  EXPECT_TRUE(IsSpace(0x3000));
  EXPECT_FALSE(IsSpace(0x200B));  // zero width space is not whitespace
  EXPECT_EQ(Strip("\u3000 x\u00a0\n", std::nullopt, StripSide::kBoth), "x");
}

TEST(PyStr, Strip) {
  EXPECT_EQ(Strip("xxaxx", std::string("x"), StripSide::kBoth), "a");
  EXPECT_EQ(Strip("\n\na\n", std::string("\n"), StripSide::kLeft), "a\n");
  EXPECT_EQ(Strip("abcba", std::string("ab"), StripSide::kRight), "abc");
  EXPECT_EQ(Strip("éaé", std::string("é"), StripSide::kBoth), "a");
  EXPECT_EQ(Strip("xyz", std::string(""), StripSide::kBoth), "xyz");
}

TEST(PyStr, Split) {
  EXPECT_EQ(*Split("a,b,,c", std::string(","), -1), (Strings{"a", "b", "", "c"}));
  EXPECT_EQ(*Split("  a  b  ", std::nullopt, -1), (Strings{"a", "b"}));
  EXPECT_EQ(*Split("  a  b  c ", std::nullopt, 1), (Strings{"a", "b  c "}));
  EXPECT_EQ(*Split("", std::nullopt, -1), Strings{});
  EXPECT_EQ(*Split("", std::string(","), -1), Strings{""});
  EXPECT_EQ(*Split("a b c", std::string(" "), 1), (Strings{"a", "b c"}));
  EXPECT_EQ(Split("a", std::string(""), -1).status().message(), "empty separator");
  EXPECT_EQ(*RSplit("a b c", std::string(" "), 1), (Strings{"a b", "c"}));
  EXPECT_EQ(*RSplit("  a  b  c ", std::nullopt, 1), (Strings{"  a  b", "c"}));
  EXPECT_EQ(*RSplit("a::b::c", std::string("::"), -1), (Strings{"a", "b", "c"}));
}

TEST(PyStr, SplitLines) {
  EXPECT_EQ(SplitLines("a\nb\r\nc\rd\x0b"
                       "e\u2028f\n",
                       false),
            (Strings{"a", "b", "c", "d", "e", "f"}));
  EXPECT_EQ(SplitLines("a\r\nb", true), (Strings{"a\r\n", "b"}));
  EXPECT_EQ(SplitLines("", false), Strings{});
  EXPECT_EQ(SplitLines("\n", false), Strings{""});
}

TEST(PyStr, ReplaceFindCount) {
  EXPECT_EQ(Replace("aaaa", "aa", "b", -1), "bb");
  EXPECT_EQ(Replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(Replace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(Replace("éé", "", "-", 2), "-é-é");
  EXPECT_EQ(Find("日本語", "語"), 2);
  EXPECT_EQ(RFind("abcabc", "c"), 5);
  EXPECT_EQ(Find("abc", "z"), -1);
  EXPECT_EQ(Count("aXbXc", "X"), 2);
  EXPECT_EQ(Count("abc", ""), 4);
}

TEST(PyStr, CaseMapping) {
  EXPECT_EQ(Upper("héllo wörld"), "HÉLLO WÖRLD");
  EXPECT_EQ(Lower("ÀÉΣ"), "àéς");  // final sigma
  EXPECT_EQ(Lower("ΣA AΣ'b"), "σa aσ'b");
  EXPECT_EQ(Upper("straße ﬁx"), "STRASSE FIX");
  EXPECT_EQ(Lower("İ"), "i\u0307");
  EXPECT_EQ(Capitalize("hELLO wORLD"), "Hello world");
  EXPECT_EQ(Capitalize("ǆemal"), "ǅemal");  // title case, not upper case
  EXPECT_EQ(Capitalize("ßA"), "Ssa");
  EXPECT_EQ(Title("they're bill's friends"), "They'Re Bill'S Friends");  // Python's quirk
  EXPECT_EQ(Title("ÉCOLE élève"), "École Élève");
}

TEST(PyStr, CharacterClasses) {
  EXPECT_TRUE(IsDigit("0123"));
  EXPECT_FALSE(IsDigit(""));
  EXPECT_TRUE(IsAlpha("abcé"));
  EXPECT_FALSE(IsAlpha("ab1"));
  EXPECT_TRUE(IsAlnum("ab1"));
  EXPECT_TRUE(IsSpaceString(" \t\n"));
  EXPECT_TRUE(IsLower("abc1"));
  EXPECT_FALSE(IsLower("123"));
  EXPECT_TRUE(IsUpper("AB-C"));
  EXPECT_TRUE(IsIdentifierChar('_', true));
  EXPECT_TRUE(IsIdentifierChar(U'é', true));
  EXPECT_FALSE(IsIdentifierChar('1', true));
  EXPECT_TRUE(IsIdentifierChar('1', false));
}

TEST(PyStr, ReprMatchesPython) {
  EXPECT_EQ(Repr("abc"), "'abc'");
  EXPECT_EQ(Repr("it's"), "\"it's\"");
  EXPECT_EQ(Repr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(Repr("a\nb\tc\\"), "'a\\nb\\tc\\\\'");
  EXPECT_EQ(Repr("\x07\x7f"), "'\\x07\\x7f'");
  EXPECT_EQ(Repr("\u00a0é\u200b日"), "'\\xa0é\\u200b日'");
  EXPECT_EQ(Repr("😀"), "'😀'");
}

}  // namespace
}  // namespace nightshift::chat::pystr
