// Added tokens (`added_tokens` in tokenizer.json): found in the text before
// the model runs, as the Rust crate's AddedVocabulary finds them.
//
// A matcher holds one set of patterns and splits text into runs of plain text
// and matched tokens: leftmost match first, the longest pattern at that
// position wins, matches do not overlap. Per token:
//   single_word  the match is dropped unless it has no word character
//                (regex \w) right before and right after it;
//   lstrip       the match takes in the white space before it;
//   rstrip       the match takes in the white space after it.
// The tokenizer builds two matchers: one for tokens with `normalized: false`
// run on the raw text, one for the others run on each normalized segment
// with every pattern normalized the same way.
//
// Immutable after Build(); safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nightshift::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// One run of the split text: [begin, end) of the input, with `token` set to
// the matched token (nullptr for plain text).
struct AddedTokenSpan {
  size_t begin;
  size_t end;
  const AddedToken* token;
};

class AddedTokenMatcher {
 public:
  // Adds `pattern` (non-empty) as the text that stands for `token`, which
  // must outlive the matcher. A pattern added twice keeps its first token.
  void Add(std::string pattern, const AddedToken* token);

  bool empty() const { return patterns_ == 0; }

  // Splits `text` (valid UTF-8) into plain and token spans that cover it in
  // order; empty spans are left out.
  std::vector<AddedTokenSpan> Split(std::string_view text) const;

 private:
  struct Match {
    size_t begin;
    size_t end;
    const AddedToken* token;
  };
  // Longest pattern starting at `pos`; token nullptr when none does.
  Match LongestAt(std::string_view text, size_t pos) const;

  // Trie over pattern bytes: node 0 is the root; children keyed by
  // (node << 8 | byte).
  std::unordered_map<uint64_t, uint32_t> children_;
  std::vector<const AddedToken*> terminal_{nullptr};  // per node
  bool first_byte_[256] = {};
  size_t patterns_ = 0;
};

}  // namespace nightshift::tokenizer
