#include "worker/tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

using namespace std::string_literals;

TEST(ValidateUtf8, AcceptsWellFormedText) {
  EXPECT_TRUE(ValidateUtf8("").ok());
  EXPECT_TRUE(ValidateUtf8("plain ascii").ok());
  EXPECT_TRUE(ValidateUtf8("nul \0 inside"s).ok());
  EXPECT_TRUE(ValidateUtf8("caf\xC3\xA9 \xE4\xBD\xA0 \xF0\x9F\x8D\x95 \xF4\x8F\xBF\xBF").ok());
}

TEST(ValidateUtf8, RejectsIllFormedSequencesNamingTheOffset) {
  struct Bad {
    std::string text;
    size_t offset;
  };
  const Bad cases[] = {
      {"ab\x80", 2},               // lone continuation byte
      {"\xC0\x80", 0},             // overlong NUL
      {"x\xE4\xBD", 1},            // truncated 3-byte character
      {"\xED\xA0\x80", 0},         // UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},     // past U+10FFFF
      {"ok \xF5\x80\x80\x80", 3},  // invalid lead byte
  };
  for (const Bad& bad : cases) {
    Status status = ValidateUtf8(bad.text);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "invalid UTF-8 at byte " + std::to_string(bad.offset));
  }
}

TEST(Utf8Lossy, ReplacesEachMaximalIllFormedSubsequenceOnce) {
  EXPECT_EQ(Utf8Lossy("ok"), "ok");
  EXPECT_EQ(Utf8Lossy("a\xE4\xBD"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");  // one U+FFFD for E4 BD
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x8D"), "\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // ED A0 is not a prefix of any character: three replacements.
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(EndsWithReplacementChar(Utf8Lossy("x\xE4")));
  EXPECT_FALSE(EndsWithReplacementChar("x"));
}

TEST(DecodeAndAppendUtf8, RoundTripEveryLength) {
  for (char32_t cp : {U'A', U'\u00E9', U'\u4F60', U'\U0001F355', U'\U0010FFFF'}) {
    std::string encoded;
    AppendUtf8(cp, &encoded);
    size_t length = 0;
    EXPECT_EQ(DecodeUtf8(encoded, 0, &length), cp);
    EXPECT_EQ(length, encoded.size());
  }
}

TEST(CharacterClasses, WhiteSpaceIsUnicodeWhiteSpace) {
  for (char32_t cp :
       {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u0085', U'\u00A0', U'\u1680', U'\u2000',
        U'\u200A', U'\u2028', U'\u2029', U'\u202F', U'\u205F', U'\u3000'}) {
    EXPECT_TRUE(IsWhiteSpace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  for (char32_t cp : {U'a', U'\x1C', U'\u180E', U'\u200B', U'\uFEFF'}) {
    EXPECT_FALSE(IsWhiteSpace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(CharacterClasses, NumericWordPunctuationMark) {
  EXPECT_TRUE(IsNumeric(U'7'));
  EXPECT_TRUE(IsNumeric(U'\u0663'));  // Arabic-Indic three (Nd)
  EXPECT_TRUE(IsNumeric(U'\u00B2'));  // superscript two (No)
  EXPECT_TRUE(IsNumeric(U'\u2167'));  // Roman numeral eight (Nl)
  EXPECT_FALSE(IsNumeric(U'x'));
  EXPECT_TRUE(IsWordChar(U'_'));
  EXPECT_TRUE(IsWordChar(U'\u00E9'));
  EXPECT_TRUE(IsWordChar(U'\u0301'));  // combining mark
  EXPECT_FALSE(IsWordChar(U'-'));
  EXPECT_TRUE(IsPunctuation(U'!'));
  EXPECT_TRUE(IsPunctuation(U'$'));  // ASCII punctuation counts, as in the crate
  EXPECT_TRUE(IsPunctuation(U'\u3002'));
  EXPECT_FALSE(IsPunctuation(U'a'));
  EXPECT_TRUE(IsMark(U'\u0301'));
  EXPECT_FALSE(IsMark(U'e'));
}

TEST(ToNormalForm, AppliesTheFourForms) {
  EXPECT_EQ(*ToNormalForm("e\xCC\x81", NormalForm::kNFC), "\xC3\xA9");
  EXPECT_EQ(*ToNormalForm("\xE2\x84\xAB", NormalForm::kNFC), "\xC3\x85");  // U+212B -> U+00C5
  EXPECT_EQ(*ToNormalForm("\xC3\xA9", NormalForm::kNFD), "e\xCC\x81");
  EXPECT_EQ(*ToNormalForm("\xEF\xAC\x81", NormalForm::kNFKC), "fi");  // U+FB01 ligature
  EXPECT_EQ(*ToNormalForm("\xC2\xB2", NormalForm::kNFKD), "2");
  EXPECT_EQ(*ToNormalForm("a\0b\xC3\xA9"s, NormalForm::kNFC), "a\0b\xC3\xA9"s);
  EXPECT_EQ(*ToNormalForm("ascii stays", NormalForm::kNFKD), "ascii stays");
}

TEST(ToLowercase, FollowsRustToLowercase) {
  EXPECT_EQ(ToLowercase("HeLLo"), "hello");
  EXPECT_EQ(ToLowercase("\xC3\x89T\xC3\x89"), "\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(ToLowercase("\xC4\xB0"), "i\xCC\x87");  // U+0130
  // Final sigma: ΟΔΟΣ -> οδος, a lone Σ stays σ, Σ inside a word is σ.
  EXPECT_EQ(ToLowercase("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3"), "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");
  EXPECT_EQ(ToLowercase("\xCE\xA3"), "\xCF\x83");
  EXPECT_EQ(ToLowercase("\xCE\xA3\xCE\x91"), "\xCF\x83\xCE\xB1");
}

TEST(ByteLevelAlphabet, MatchesGpt2) {
  const auto& alphabet = ByteToUnicode();
  EXPECT_EQ(alphabet[' '], "\xC4\xA0");   // Ġ U+0120
  EXPECT_EQ(alphabet['\n'], "\xC4\x8A");  // Ċ U+010A
  EXPECT_EQ(alphabet['\r'], "\xC4\x8D");  // č U+010D
  EXPECT_EQ(alphabet['A'], "A");
  EXPECT_EQ(alphabet[0xAD], "\xC5\x83");  // the last unprintable byte, U+0143
  for (int b = 0; b < 256; ++b) {
    size_t length;
    EXPECT_EQ(UnicodeToByte(DecodeUtf8(alphabet[b], 0, &length)), b);
  }
  EXPECT_EQ(UnicodeToByte(U'\u0144'), -1);
  EXPECT_EQ(UnicodeToByte(U'\u4F60'), -1);
}

}  // namespace
}  // namespace nightshift::tokenizer
