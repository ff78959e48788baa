// Normalizers, pre-tokenizers, decoders and post-processors, each built from
// its tokenizer.json spelling, on the examples the Rust crate documents and
// tests them with.
#include <functional>

#include <gtest/gtest.h>

#include "worker/tokenizer/decoders.h"
#include "worker/tokenizer/normalizers.h"
#include "worker/tokenizer/post_processors.h"
#include "worker/tokenizer/pre_tokenizers.h"

namespace nightshift::tokenizer {
namespace {

using Strings = std::vector<std::string>;

std::string Normalized(const std::string& spec, std::string text) {
  StatusOr<std::unique_ptr<Normalizer>> normalizer = ParseNormalizer(Json::parse(spec), "n");
  EXPECT_TRUE(normalizer.ok()) << normalizer.status().ToString();
  if (!normalizer.ok()) return "<error>";
  EXPECT_TRUE((*normalizer)->Normalize(&text).ok());
  return text;
}

Strings PreTokenized(const std::string& spec, const std::string& text, bool at_start = true) {
  StatusOr<std::unique_ptr<PreTokenizer>> pre = ParsePreTokenizer(Json::parse(spec), "p");
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  if (!pre.ok()) return {"<error>"};
  std::vector<PreToken> pieces{{text, at_start}};
  EXPECT_TRUE((*pre)->PreTokenize(&pieces).ok());
  Strings out;
  for (const PreToken& piece : pieces) out.push_back(piece.text);
  return out;
}

Strings Decoded(const std::string& spec, Strings tokens) {
  StatusOr<std::unique_ptr<Decoder>> decoder = ParseDecoder(Json::parse(spec), "d");
  EXPECT_TRUE(decoder.ok()) << decoder.status().ToString();
  if (!decoder.ok()) return {"<error>"};
  EXPECT_TRUE((*decoder)->DecodeChain(&tokens).ok());
  return tokens;
}

std::vector<int32_t> PostProcessed(const std::string& spec, std::vector<int32_t> ids) {
  StatusOr<std::unique_ptr<PostProcessor>> post = ParsePostProcessor(Json::parse(spec), "pp");
  EXPECT_TRUE(post.ok()) << post.status().ToString();
  if (!post.ok()) return {-1};
  (*post)->Process(&ids);
  return ids;
}

TEST(SplitPiece, EveryBehaviorOnTheCratesExample) {
  const PreToken piece{"the-final--countdown", true};
  const std::vector<MatchRange> dashes = {{3, 4}, {9, 10}, {10, 11}};
  auto split = [&](SplitBehavior behavior, bool invert = false) {
    std::vector<PreToken> out;
    SplitPiece(piece, dashes, behavior, invert, &out);
    Strings texts;
    for (const PreToken& p : out) texts.push_back(p.text);
    return texts;
  };
  EXPECT_EQ(split(SplitBehavior::kRemoved), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous), (Strings{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kRemoved, /*invert=*/true), (Strings{"-", "-", "-"}));
}

TEST(SplitPiece, OnlyTheFirstPartKeepsAtStart) {
  std::vector<PreToken> out;
  SplitPiece({"ab cd", true}, {{2, 3}}, SplitBehavior::kIsolated, false, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].at_start);
  EXPECT_FALSE(out[1].at_start);
  out.clear();
  SplitPiece({" cd", true}, {{0, 1}}, SplitBehavior::kRemoved, false, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].at_start);
}

TEST(PreTokenizers, ByteLevel) {
  EXPECT_EQ(PreTokenized(R"({"type":"ByteLevel","add_prefix_space":true})", "Hello my friend"),
            (Strings{"\u0120Hello", "\u0120my", "\u0120friend"}));
  EXPECT_EQ(PreTokenized(R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false})",
                         "Hi you\n"),
            (Strings{"Hi\u0120you\u010A"}));
  // A leading space is not doubled.
  EXPECT_EQ(PreTokenized(R"({"type":"ByteLevel","add_prefix_space":true})", " x"),
            (Strings{"\u0120x"}));
}

TEST(PreTokenizers, SplitWithRegexBehaviorAndInvert) {
  const std::string digits = R"({"type":"Split","pattern":{"Regex":"\\d+"},"behavior":)";
  EXPECT_EQ(PreTokenized(digits + R"("Isolated","invert":false})", "ab12cd3"),
            (Strings{"ab", "12", "cd", "3"}));
  EXPECT_EQ(PreTokenized(digits + R"("Removed","invert":true})", "ab12cd3"), (Strings{"12", "3"}));
  EXPECT_EQ(
      PreTokenized(R"({"type":"Split","pattern":{"String":"."},"behavior":"Removed"})", "a.b.c"),
      (Strings{"a", "b", "c"}));
}

TEST(PreTokenizers, Metaspace) {
  const std::string always =
      R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":true})";
  EXPECT_EQ(PreTokenized(always, "Hey   friend!"),
            (Strings{"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"}));
  const std::string first =
      R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":false})";
  EXPECT_EQ(PreTokenized(first, "Hey you", true), (Strings{"\u2581Hey\u2581you"}));
  EXPECT_EQ(PreTokenized(first, "Hey you", false), (Strings{"Hey\u2581you"}));
  const std::string legacy = R"({"type":"Metaspace","replacement":"_","add_prefix_space":false})";
  EXPECT_EQ(PreTokenized(legacy, "a b"), (Strings{"a", "_b"}));
}

TEST(PreTokenizers, DigitsWhitespacePunctuationDelimiter) {
  EXPECT_EQ(PreTokenized(R"({"type":"Digits","individual_digits":true})", "a123b45"),
            (Strings{"a", "1", "2", "3", "b", "4", "5"}));
  EXPECT_EQ(PreTokenized(R"({"type":"Digits","individual_digits":false})", "a123b45"),
            (Strings{"a", "123", "b", "45"}));
  EXPECT_EQ(PreTokenized(R"({"type":"Whitespace"})", "Hey friend!     How are you?!?"),
            (Strings{"Hey", "friend", "!", "How", "are", "you", "?!?"}));
  EXPECT_EQ(PreTokenized(R"({"type":"WhitespaceSplit"})", "Hey friend!\u3000x"),
            (Strings{"Hey", "friend!", "x"}));
  EXPECT_EQ(PreTokenized(R"({"type":"Punctuation","behavior":"Isolated"})",
                         "Hey friend!     How are you?!?"),
            (Strings{"Hey friend", "!", "     How are you", "?", "!", "?"}));
  EXPECT_EQ(PreTokenized(R"({"type":"CharDelimiterSplit","delimiter":"-"})", "the-final"),
            (Strings{"the", "final"}));
}

TEST(PreTokenizers, SequenceAppliesInOrder) {
  const std::string spec = R"({"type":"Sequence","pretokenizers":[
      {"type":"Split","pattern":{"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false},
      {"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})";
  EXPECT_EQ(PreTokenized(spec, "x 12345"), (Strings{"x\u0120", "123", "45"}));
}

TEST(Normalizers, EachType) {
  EXPECT_EQ(Normalized(R"({"type":"NFC"})", "e\u0301"), "\u00E9");
  EXPECT_EQ(Normalized(R"({"type":"NFD"})", "\u00E9"), "e\u0301");
  EXPECT_EQ(Normalized(R"({"type":"NFKC"})", "\uFB01"), "fi");
  EXPECT_EQ(Normalized(R"({"type":"NFKD"})", "\u00B2"), "2");
  EXPECT_EQ(Normalized(R"({"type":"Lowercase"})", "HeLLo \u00C9"), "hello \u00E9");
  EXPECT_EQ(Normalized(R"({"type":"Strip","strip_left":true,"strip_right":false})", "  a  "),
            "a  ");
  EXPECT_EQ(Normalized(R"({"type":"Strip","strip_left":true,"strip_right":true})", "\u3000a\t"),
            "a");
  EXPECT_EQ(Normalized(R"({"type":"StripAccents"})", "e\u0301te\u0301"), "ete");
  EXPECT_EQ(
      Normalized(R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"})", "a b\u00A0c"),
      "a\u2581b\u00A0c");
  EXPECT_EQ(Normalized(R"({"type":"Replace","pattern":{"Regex":"\\s+"},"content":"_"})",
                       " Hello   friend "),
            "_Hello_friend_");
  EXPECT_EQ(Normalized(R"({"type":"Prepend","prepend":"\u2581"})", "x"), "\u2581x");
  EXPECT_EQ(Normalized(R"({"type":"Prepend","prepend":"\u2581"})", ""), "");
  EXPECT_EQ(Normalized(R"({"type":"ByteLevel"})", "a b"), "a\u0120b");
  EXPECT_EQ(Normalized(R"({"type":"Sequence","normalizers":[{"type":"NFD"},
                          {"type":"StripAccents"},{"type":"Lowercase"}]})",
                       "\u00C9cole"),
            "ecole");
}

TEST(Decoders, ByteLevelReassemblesBytesLossily) {
  const std::string spec = R"({"type":"ByteLevel"})";
  EXPECT_EQ(Decoded(spec, {"Hello", "\u0120w", "orld\u010A"}), (Strings{"Hello world\n"}));
  // U+4F60 is E4 BD A0 = "ä½ł" in the byte-level alphabet; without its last
  // byte it is one U+FFFD.
  EXPECT_EQ(Decoded(spec, {"\u00E4\u00BD\u0142"}), (Strings{"\u4F60"}));
  EXPECT_EQ(Decoded(spec, {"\u00E4\u00BD"}), (Strings{"\uFFFD"}));
  // A token with characters outside the alphabet contributes its own bytes.
  EXPECT_EQ(Decoded(spec, {"<\u4F60>", "a"}), (Strings{"<\u4F60>a"}));
}

TEST(Decoders, SentencePieceChain) {
  const std::string spec = R"({"type":"Sequence","decoders":[
      {"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
      {"type":"ByteFallback"},{"type":"Fuse"},
      {"type":"Strip","content":" ","start":1,"stop":0}]})";
  EXPECT_EQ(Decoded(spec, {"\u2581Hey", "\u2581friend", "<0xE4>", "<0xBD>", "<0xA0>", "!"}),
            (Strings{"Hey friend\u4F60!"}));
  EXPECT_EQ(Decoded(spec, {"\u2581\u2581x"}), (Strings{" x"}));  // exactly one space stripped
}

TEST(Decoders, ByteFallbackReplacesEachByteOfAnInvalidRun) {
  const std::string spec = R"({"type":"ByteFallback"})";
  EXPECT_EQ(Decoded(spec, {"<0xE4>", "<0xBD>", "<0xA0>", "a"}), (Strings{"\u4F60", "a"}));
  EXPECT_EQ(Decoded(spec, {"<0xE4>", "<0xBD>", "x", "<0x61>"}),
            (Strings{"\uFFFD", "\uFFFD", "x", "a"}));
  EXPECT_EQ(Decoded(spec, {"<0xZZ>", "<0x4>"}), (Strings{"<0xZZ>", "<0x4>"}));
}

TEST(Decoders, MetaspaceStripStripsPerScheme) {
  EXPECT_EQ(Decoded(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always"})",
                    {"\u2581Hey", "\u2581friend!"}),
            (Strings{"Hey", " friend!"}));
  EXPECT_EQ(Decoded(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never"})",
                    {"\u2581Hey", "\u2581friend!"}),
            (Strings{" Hey", " friend!"}));
  EXPECT_EQ(Decoded(R"({"type":"Strip","content":"x","start":2,"stop":1})", {"xxxaxx", "xx"}),
            (Strings{"xax", ""}));
}

TEST(Decoders, BpeSuffixAndFuse) {
  EXPECT_EQ(Decoded(R"({"type":"BPEDecoder","suffix":"</w>"})", {"hel", "lo</w>", "you</w>"}),
            (Strings{"hel", "lo ", "you"}));
  EXPECT_EQ(Decoded(R"({"type":"Fuse"})", {"a", "b", "c"}), (Strings{"abc"}));
}

TEST(PostProcessors, EachType) {
  const std::string mistral = R"({"type":"TemplateProcessing",
      "single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
                {"SpecialToken":{"id":"</s>","type_id":0}}],
      "pair":[],
      "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]},
                        "</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}})";
  EXPECT_EQ(PostProcessed(mistral, {7, 8}), (std::vector<int32_t>{1, 7, 8, 2}));
  EXPECT_EQ(PostProcessed(mistral, {}), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(
      PostProcessed(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false})", {5, 6}),
      (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(PostProcessed(R"({"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0]})", {5}),
            (std::vector<int32_t>{0, 5, 2}));
  EXPECT_EQ(
      PostProcessed(R"({"type":"BertProcessing","sep":["[SEP]",102],"cls":["[CLS]",101]})", {5}),
      (std::vector<int32_t>{101, 5, 102}));
  EXPECT_EQ(PostProcessed(
                R"({"type":"Sequence","processors":[{"type":"ByteLevel"},)" + mistral + "]}", {9}),
            (std::vector<int32_t>{1, 9, 2}));
}

TEST(Components, UnknownTypesAreUnimplementedNamingThem) {
  struct Unknown {
    std::function<Status()> parse;
    std::string expected;
  };
  auto status = [](auto result) { return result.status(); };
  const std::vector<Unknown> cases = {
      {[&] { return status(ParseNormalizer(Json::parse(R"({"type":"Precompiled"})"), "n")); },
       "n: type 'Precompiled' is not supported"},
      {[&] {
         return status(ParsePreTokenizer(
             Json::parse(R"({"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},
                            {"type":"UnicodeScripts"}]})"),
             "pre_tokenizer"));
       },
       "pre_tokenizer.pretokenizers[1]: type 'UnicodeScripts' is not supported"},
      {[&] { return status(ParseDecoder(Json::parse(R"({"type":"CTC"})"), "decoder")); },
       "decoder: type 'CTC' is not supported"},
      {[&] { return status(ParsePostProcessor(Json::parse(R"({"type":"Fancy"})"), "pp")); },
       "pp: type 'Fancy' is not supported"},
  };
  for (const Unknown& u : cases) {
    Status s = u.parse();
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_EQ(s.message(), u.expected);
  }
}

TEST(Components, MalformedSpecsAreInvalidArgument) {
  EXPECT_EQ(ParsePreTokenizer(Json::parse(R"({"type":"Split","pattern":{"Regex":"\\d"},
                                             "behavior":"Sideways"})"),
                              "p")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNormalizer(Json::parse(R"({"type":"Prepend"})"), "n").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDecoder(Json::parse(R"({"type":"Strip","content":"ab"})"), "d").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNormalizer(Json::parse(R"({"no_type":1})"), "n").status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nightshift::tokenizer
