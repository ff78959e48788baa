#include "worker/tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

// GPT-2's pre-tokenization regex (ByteLevel with use_regex).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The crate's Whitespace pre-tokenizer: `\w+|[^\w\s]+` with the Rust regex
// crate's \w (Alphabetic, marks, decimal digits, connector punctuation,
// joiners).
constexpr std::string_view kWhitespacePattern =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)";

// The built-in patterns are constants covered by tests; compiling them
// cannot fail at run time.
const Regex& Gpt2Regex() {
  static const Regex regex = Regex::Compile(kGpt2Pattern).value();
  return regex;
}

const Regex& WhitespaceRegex() {
  static const Regex regex = Regex::Compile(kWhitespacePattern).value();
  return regex;
}

// Every character of `text` for which `is_delimiter` holds, one range each
// (the crate's Pattern impl for `Fn(char) -> bool`).
std::vector<MatchRange> CharMatches(std::string_view text,
                                    const std::function<bool(char32_t)>& is_delimiter) {
  std::vector<MatchRange> out;
  size_t length;
  for (size_t pos = 0; pos < text.size(); pos += length) {
    if (is_delimiter(DecodeUtf8(text, pos, &length))) out.push_back({pos, pos + length});
  }
  return out;
}

// Applies `split` to every piece, replacing the list with the parts.
Status SplitEach(std::vector<PreToken>* pieces,
                 const std::function<Status(const PreToken&, std::vector<PreToken>*)>& split) {
  std::vector<PreToken> out;
  out.reserve(pieces->size());
  for (const PreToken& piece : *pieces) NS_RETURN_IF_ERROR(split(piece, &out));
  *pieces = std::move(out);
  return Status::Ok();
}

StatusOr<SplitBehavior> ParseBehavior(const Json& spec, const std::string& where,
                                      SplitBehavior fallback) {
  auto it = spec.find("behavior");
  if (it == spec.end() || it->is_null()) return fallback;
  if (!it->is_string()) return InvalidArgument(where + ".behavior: expected a string");
  std::string name = it->get<std::string>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument(where + ".behavior: unknown split behavior '" + name + "'");
}

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    return SplitEach(pieces, [this](const PreToken& piece, std::vector<PreToken>* out) {
      std::vector<MatchRange> matches;
      NS_RETURN_IF_ERROR(regex_.FindAll(piece.text, &matches));
      SplitPiece(piece, matches, behavior_, invert_, out);
      return Status::Ok();
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// Digits, WhitespaceSplit, Punctuation, CharDelimiterSplit: split at
// characters with a property.
class CharSplit : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> is_delimiter, SplitBehavior behavior)
      : is_delimiter_(std::move(is_delimiter)), behavior_(behavior) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    return SplitEach(pieces, [this](const PreToken& piece, std::vector<PreToken>* out) {
      SplitPiece(piece, CharMatches(piece.text, is_delimiter_), behavior_, false, out);
      return Status::Ok();
    });
  }

 private:
  std::function<bool(char32_t)> is_delimiter_;
  SplitBehavior behavior_;
};

// ByteLevel: optional leading space, optional GPT-2 split, then every byte
// spelled with the byte-level alphabet.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    NS_RETURN_IF_ERROR(SplitEach(pieces, [this](const PreToken& piece, std::vector<PreToken>* out) {
      PreToken spaced;
      const PreToken* source = &piece;
      if (add_prefix_space_ && piece.text[0] != ' ') {
        spaced = {" " + piece.text, piece.at_start};
        source = &spaced;
      }
      if (!use_regex_) {
        out->push_back(*source);
        return Status::Ok();
      }
      std::vector<MatchRange> matches;
      NS_RETURN_IF_ERROR(Gpt2Regex().FindAll(source->text, &matches));
      SplitPiece(*source, matches, SplitBehavior::kIsolated, false, out);
      return Status::Ok();
    }));
    const auto& alphabet = ByteToUnicode();
    for (PreToken& piece : *pieces) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      for (unsigned char byte : piece.text) mapped += alphabet[byte];
      piece.text = std::move(mapped);
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// Metaspace: spaces become the replacement character, which is prepended
// per the scheme; with `split`, each replacement character starts a piece.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    size_t length;
    replacement_cp_ = DecodeUtf8(replacement_, 0, &length);
  }
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    return SplitEach(pieces, [this](const PreToken& piece, std::vector<PreToken>* out) {
      PreToken rewritten{std::string(), piece.at_start};
      rewritten.text.reserve(piece.text.size() + 8);
      for (char c : piece.text) {
        if (c == ' ') {
          rewritten.text += replacement_;
        } else {
          rewritten.text.push_back(c);
        }
      }
      bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && rewritten.text.compare(0, replacement_.size(), replacement_) != 0) {
        rewritten.text.insert(0, replacement_);
      }
      if (!split_) {
        out->push_back(std::move(rewritten));
        return Status::Ok();
      }
      std::vector<MatchRange> marks =
          CharMatches(rewritten.text, [this](char32_t cp) { return cp == replacement_cp_; });
      SplitPiece(rewritten, marks, SplitBehavior::kMergedWithNext, false, out);
      return Status::Ok();
    });
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    for (const auto& step : steps_) NS_RETURN_IF_ERROR(step->PreTokenize(pieces));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

StatusOr<PrependScheme> ParsePrependScheme(const Json& spec, const std::string& where) {
  auto it = spec.find("prepend_scheme");
  if (it != spec.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument(where + ".prepend_scheme: expected a string");
    std::string name = it->get<std::string>();
    if (name == "always") return PrependScheme::kAlways;
    if (name == "first") return PrependScheme::kFirst;
    if (name == "never") return PrependScheme::kNever;
    return InvalidArgument(where + ".prepend_scheme: unknown scheme '" + name + "'");
  }
  // Files written before prepend_scheme existed say add_prefix_space.
  NS_ASSIGN_OR_RETURN(bool add_prefix_space, BoolField(spec, "add_prefix_space", true, where));
  return add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
}

StatusOr<std::unique_ptr<PreTokenizer>> ParseSequence(const Json& spec, const std::string& where) {
  auto it = spec.find("pretokenizers");
  if (it == spec.end() || !it->is_array()) {
    return InvalidArgument(where + ".pretokenizers: expected a list");
  }
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (size_t i = 0; i < it->size(); ++i) {
    std::string at = where + ".pretokenizers[" + std::to_string(i) + "]";
    if ((*it)[i].is_null()) return InvalidArgument(at + ": expected an object");
    NS_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> step, ParsePreTokenizer((*it)[i], at));
    steps.push_back(std::move(step));
  }
  return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
}

StatusOr<std::unique_ptr<PreTokenizer>> ParseMetaspace(const Json& spec, const std::string& where) {
  NS_ASSIGN_OR_RETURN(std::string replacement, CharField(spec, "replacement", where));
  NS_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(spec, where));
  NS_ASSIGN_OR_RETURN(bool split, BoolField(spec, "split", true, where));
  return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, scheme, split));
}

}  // namespace

void SplitPiece(const PreToken& piece, const std::vector<MatchRange>& delimiters,
                SplitBehavior behavior, bool invert, std::vector<PreToken>* out) {
  struct Part {
    size_t begin, end;
    bool is_match;
  };
  const size_t size = piece.text.size();
  std::vector<Part> cover;
  cover.reserve(delimiters.size() * 2 + 1);
  size_t previous = 0;
  for (const MatchRange& m : delimiters) {
    if (previous != m.begin) cover.push_back({previous, m.begin, invert});
    cover.push_back({m.begin, m.end, !invert});
    previous = m.end;
  }
  if (previous != size) cover.push_back({previous, size, invert});

  std::vector<Part> parts;
  parts.reserve(cover.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      parts = cover;
      break;
    case SplitBehavior::kRemoved:
      for (const Part& p : cover) {
        if (!p.is_match) parts.push_back(p);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : cover) {
        if (p.is_match == previous_match && !parts.empty()) {
          parts.back().end = p.end;
        } else {
          parts.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : cover) {
        if (p.is_match && !previous_match && !parts.empty()) {
          parts.back().end = p.end;
        } else {
          parts.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = cover.rbegin(); it != cover.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty()) {
          parts.back().begin = it->begin;
        } else {
          parts.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
  }
  for (const Part& p : parts) {
    if (p.begin == p.end) continue;
    out->push_back({piece.text.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
  }
}

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& spec,
                                                          const std::string& where) {
  if (spec.is_null()) return std::unique_ptr<PreTokenizer>();
  NS_ASSIGN_OR_RETURN(std::string type, TypeField(spec, where));
  if (type == "Sequence") return ParseSequence(spec, where);
  if (type == "Metaspace") return ParseMetaspace(spec, where);
  if (type == "ByteLevel") {
    NS_ASSIGN_OR_RETURN(bool add_prefix_space, BoolField(spec, "add_prefix_space", true, where));
    NS_ASSIGN_OR_RETURN(bool use_regex, BoolField(spec, "use_regex", true, where));
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(add_prefix_space, use_regex));
  }
  if (type == "Split") {
    NS_ASSIGN_OR_RETURN(Regex regex, PatternField(spec, "pattern", where));
    NS_ASSIGN_OR_RETURN(SplitBehavior behavior,
                        ParseBehavior(spec, where, SplitBehavior::kIsolated));
    NS_ASSIGN_OR_RETURN(bool invert, BoolField(spec, "invert", false, where));
    return std::unique_ptr<PreTokenizer>(new RegexSplit(std::move(regex), behavior, invert));
  }
  if (type == "Whitespace") {
    return std::unique_ptr<PreTokenizer>(
        new RegexSplit(WhitespaceRegex(), SplitBehavior::kRemoved, /*invert=*/true));
  }
  if (type == "Digits") {
    NS_ASSIGN_OR_RETURN(bool individual, BoolField(spec, "individual_digits", false, where));
    return std::unique_ptr<PreTokenizer>(new CharSplit(
        IsNumeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
  }
  if (type == "WhitespaceSplit") {
    return std::unique_ptr<PreTokenizer>(new CharSplit(IsWhiteSpace, SplitBehavior::kRemoved));
  }
  if (type == "Punctuation") {
    NS_ASSIGN_OR_RETURN(SplitBehavior behavior,
                        ParseBehavior(spec, where, SplitBehavior::kIsolated));
    return std::unique_ptr<PreTokenizer>(new CharSplit(IsPunctuation, behavior));
  }
  if (type == "CharDelimiterSplit") {
    NS_ASSIGN_OR_RETURN(std::string delimiter, CharField(spec, "delimiter", where));
    size_t length;
    char32_t cp = DecodeUtf8(delimiter, 0, &length);
    return std::unique_ptr<PreTokenizer>(
        new CharSplit([cp](char32_t c) { return c == cp; }, SplitBehavior::kRemoved));
  }
  return UnsupportedType(where, type);
}

}  // namespace nightshift::tokenizer
