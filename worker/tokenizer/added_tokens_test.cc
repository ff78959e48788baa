#include "worker/tokenizer/added_tokens.h"

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

// (text, token id or -1) for each span.
std::vector<std::pair<std::string, int>> Spans(const AddedTokenMatcher& matcher,
                                               const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  for (const AddedTokenSpan& span : matcher.Split(text)) {
    out.emplace_back(text.substr(span.begin, span.end - span.begin),
                     span.token == nullptr ? -1 : span.token->id);
  }
  return out;
}

AddedToken Token(int id, std::string content) {
  AddedToken token;
  token.id = id;
  token.content = std::move(content);
  return token;
}

TEST(AddedTokenMatcher, LeftmostThenLongest) {
  AddedToken a = Token(1, "<a>"), ab = Token(2, "<a><b>"), b = Token(3, "<b>");
  AddedTokenMatcher matcher;
  matcher.Add(a.content, &a);
  matcher.Add(ab.content, &ab);
  matcher.Add(b.content, &b);
  using V = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(Spans(matcher, "x<a><b>y<b><a>"),
            (V{{"x", -1}, {"<a><b>", 2}, {"y", -1}, {"<b>", 3}, {"<a>", 1}}));
  EXPECT_EQ(Spans(matcher, "<a><a"), (V{{"<a>", 1}, {"<a", -1}}));
  EXPECT_EQ(Spans(matcher, "plain"), (V{{"plain", -1}}));
  EXPECT_TRUE(Spans(matcher, "").empty());
}

TEST(AddedTokenMatcher, EmptyMatcherKeepsTextWhole) {
  AddedTokenMatcher matcher;
  EXPECT_TRUE(matcher.empty());
  EXPECT_EQ(Spans(matcher, "a <s> b"), (std::vector<std::pair<std::string, int>>{{"a <s> b", -1}}));
}

TEST(AddedTokenMatcher, SingleWordNeedsNoWordCharacterAround) {
  // The crate's own test_single_word_is_correct (without the lowercasing).
  AddedToken mask = Token(0, "<mask>");
  mask.single_word = true;
  AddedTokenMatcher matcher;
  matcher.Add(mask.content, &mask);
  using V = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(Spans(matcher, "<mask> my name <mask> a<mask> <mask>ony <mask>"),
            (V{{"<mask>", 0},
               {" my name ", -1},
               {"<mask>", 0},
               {" a<mask> <mask>ony ", -1},
               {"<mask>", 0}}));
  // Punctuation is not a word character; a combining mark is.
  EXPECT_EQ(Spans(matcher, "<mask>, <mask>- \u25CC\u0330<mask>"),
            (V{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- \u25CC\u0330<mask>", -1}}));
}

TEST(AddedTokenMatcher, LstripAndRstripTakeUnicodeWhiteSpace) {
  // The crate's test_lstrip_unicode_space (without the lowercasing).
  AddedToken mask = Token(0, "<mask>");
  mask.single_word = mask.lstrip = mask.rstrip = true;
  AddedTokenMatcher matcher;
  matcher.Add(mask.content, &mask);
  using V = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(
      Spans(matcher, "Hi <mask> there\t<mask>\t<mask>\u2000"),
      (V{{"Hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}));
}

TEST(AddedTokenMatcher, LstripOnlyTakesSpaceBefore) {
  AddedToken mask = Token(4, "<m>");
  mask.lstrip = true;
  AddedTokenMatcher matcher;
  matcher.Add(mask.content, &mask);
  using V = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(Spans(matcher, "a  <m> b"), (V{{"a", -1}, {"  <m>", 4}, {" b", -1}}));
}

TEST(AddedTokenMatcher, FirstTokenForAPatternWins) {
  AddedToken first = Token(7, "<x>"), second = Token(8, "<x>");
  AddedTokenMatcher matcher;
  matcher.Add(first.content, &first);
  matcher.Add(second.content, &second);
  EXPECT_EQ(Spans(matcher, "<x>"), (std::vector<std::pair<std::string, int>>{{"<x>", 7}}));
}

}  // namespace
}  // namespace nightshift::tokenizer
