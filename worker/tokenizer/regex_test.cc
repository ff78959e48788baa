#include "worker/tokenizer/regex.h"

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

// Qwen2/3's pre-tokenizer pattern, as in its tokenizer.json.
constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::vector<std::string> Pieces(const std::string& pattern, const std::string& text) {
  StatusOr<Regex> regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status().ToString();
  if (!regex.ok()) return {};
  std::vector<MatchRange> matches;
  EXPECT_TRUE(regex->FindAll(text, &matches).ok());
  std::vector<std::string> pieces;
  for (const MatchRange& m : matches) pieces.push_back(text.substr(m.begin, m.end - m.begin));
  return pieces;
}

TEST(Regex, QwenPatternSplitsLikeOniguruma) {
  EXPECT_EQ(
      Pieces(kQwenPattern, "Hello  world\n\n  x12 IT'S"),
      (std::vector<std::string>{"Hello", " ", " world", "\n\n", " ", " x", "1", "2", " IT", "'S"}));
}

TEST(Regex, Gpt2ContractionsAreCaseSensitive) {
  EXPECT_EQ(Pieces(kGpt2Pattern, "it's IT'S"),
            (std::vector<std::string>{"it", "'s", " IT", "'", "S"}));
}

TEST(Regex, DigitGroupsOfUpToThree) {
  EXPECT_EQ(Pieces(R"(\p{N}{1,3})", "1234567"), (std::vector<std::string>{"123", "456", "7"}));
}

TEST(Regex, BackslashSIsUnicodeWhiteSpace) {
  EXPECT_EQ(Pieces(R"(\s+)", "a\u0085\u00A0\u3000b"),
            (std::vector<std::string>{"\u0085\u00A0\u3000"}));
  // U+180E stopped being white space in Unicode 6.3; PCRE2 alone still says it is.
  EXPECT_TRUE(Pieces(R"(\s)", "a\u180Eb\uFEFF").empty());
  EXPECT_EQ(Pieces(R"([^\s]+)", "x\u180Ey z"), (std::vector<std::string>{"x\u180Ey", "z"}));
  EXPECT_EQ(Pieces(R"(\S+)", "ab\u2028cd"), (std::vector<std::string>{"ab", "cd"}));
}

TEST(Regex, BackslashWIncludesMarksAndBackslashHIsHex) {
  EXPECT_EQ(Pieces(R"(\w+)", "e\u0301t\u00E9-x"),
            (std::vector<std::string>{"e\u0301t\u00E9", "x"}));
  EXPECT_EQ(Pieces(R"(\h+)", "0x1Fg"), (std::vector<std::string>{"0", "1F"}));
}

TEST(Regex, WordBoundariesUseOnigurumasWordCharacters) {
  // U+0301 is a combining mark: a word character for Oniguruma, so there is
  // no boundary between it and the next letter.
  EXPECT_EQ(Pieces(R"(\b\w)", "e\u0301x a-b"), (std::vector<std::string>{"e", "a", "b"}));
  EXPECT_EQ(Pieces(R"(\B.)", "ab"), (std::vector<std::string>{"b"}));
  EXPECT_EQ(*TranslateOnigurumaPattern(R"([\b])"), R"([\b])");  // backspace in a class
}

TEST(Regex, EmptyMatchesFollowTheCrateIterator) {
  // Search resumes at the end of each match; an empty match right where the
  // previous one ended is skipped.
  StatusOr<Regex> regex = Regex::Compile("a*");
  ASSERT_TRUE(regex.ok());
  std::vector<MatchRange> matches;
  ASSERT_TRUE(regex->FindAll("baab", &matches).ok());
  ASSERT_EQ(matches.size(), 3u);
  EXPECT_EQ(matches[0].begin, 0u);
  EXPECT_EQ(matches[0].end, 0u);
  EXPECT_EQ(matches[1].begin, 1u);
  EXPECT_EQ(matches[1].end, 3u);
  EXPECT_EQ(matches[2].begin, 4u);
  EXPECT_EQ(matches[2].end, 4u);
  matches.clear();
  ASSERT_TRUE(regex->FindAll("", &matches).ok());
  EXPECT_TRUE(matches.empty());
}

TEST(Regex, AnchorsAreLineAnchorsAsInRuby) {
  EXPECT_EQ(Pieces("^a", "a\na"), (std::vector<std::string>{"a", "a"}));
}

TEST(Regex, LiteralMatchesMetacharactersLiterally) {
  StatusOr<Regex> regex = Regex::Literal("a.b");
  ASSERT_TRUE(regex.ok());
  std::vector<MatchRange> matches;
  ASSERT_TRUE(regex->FindAll("axb a.b", &matches).ok());
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].begin, 4u);
}

TEST(Regex, BloomsNestedClassIsAUnion) {
  EXPECT_EQ(Pieces(" ?[^(\\s|[.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C])]+", "Hello, world!"),
            (std::vector<std::string>{"Hello", " world"}));
}

TEST(TranslateOnigurumaPattern, RewritesWhatDiffers) {
  EXPECT_EQ(*TranslateOnigurumaPattern("(?m:.)"), "(?s:.)");
  EXPECT_EQ(*TranslateOnigurumaPattern("(?i:ab)"), "(?i:ab)");
  EXPECT_EQ(*TranslateOnigurumaPattern("(?=x)(?<n>y)"), "(?=x)(?<n>y)");
  EXPECT_EQ(*TranslateOnigurumaPattern("[a[bc]d]"), "[abcd]");
  EXPECT_EQ(*TranslateOnigurumaPattern("[]a]"), "[]a]");
  EXPECT_EQ(*TranslateOnigurumaPattern("\\u00e9"), "\\x{00e9}");
  EXPECT_EQ(*TranslateOnigurumaPattern("[[:alpha:]]"), "[[:alpha:]]");
  EXPECT_EQ(*TranslateOnigurumaPattern("\\p{L}\\d\\."), "\\p{L}\\d\\.");
}

TEST(TranslateOnigurumaPattern, RefusesWhatPcre2CannotExpress) {
  for (const char* pattern : {"[^\\S]", "[\\W]", "[a&&b]", "[a[^b]]"}) {
    StatusOr<std::string> translated = TranslateOnigurumaPattern(pattern);
    EXPECT_EQ(translated.status().code(), StatusCode::kUnimplemented) << pattern;
    EXPECT_NE(translated.status().message().find(pattern), std::string::npos)
        << translated.status().message();
  }
}

TEST(Regex, MalformedPatternIsInvalidArgumentNamingIt) {
  StatusOr<Regex> regex = Regex::Compile("(unclosed");
  EXPECT_EQ(regex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(regex.status().message().find("(unclosed"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::tokenizer
