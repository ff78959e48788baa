#include "worker/tokenizer/added_tokens.h"

#include <algorithm>

#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

// The character that ends at `end` (valid UTF-8, end > 0).
char32_t CharBefore(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t length;
  return DecodeUtf8(text, start, &length);
}

bool WordCharBefore(std::string_view text, size_t pos) {
  return pos > 0 && IsWordChar(CharBefore(text, pos));
}

bool WordCharAfter(std::string_view text, size_t pos) {
  size_t length;
  return pos < text.size() && IsWordChar(DecodeUtf8(text, pos, &length));
}

// Start of the run of white space that ends at `pos`.
size_t SpaceRunStart(std::string_view text, size_t pos) {
  while (pos > 0) {
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t length;
    if (!IsWhiteSpace(DecodeUtf8(text, start, &length))) break;
    pos = start;
  }
  return pos;
}

// End of the run of white space that starts at `pos`.
size_t SpaceRunEnd(std::string_view text, size_t pos) {
  size_t length;
  while (pos < text.size() && IsWhiteSpace(DecodeUtf8(text, pos, &length))) pos += length;
  return pos;
}

}  // namespace

void AddedTokenMatcher::Add(std::string pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  uint32_t node = 0;
  for (unsigned char byte : pattern) {
    uint64_t key = (uint64_t{node} << 8) | byte;
    auto it = children_.find(key);
    if (it == children_.end()) {
      uint32_t child = static_cast<uint32_t>(terminal_.size());
      terminal_.push_back(nullptr);
      it = children_.emplace(key, child).first;
    }
    node = it->second;
  }
  if (terminal_[node] == nullptr) {
    terminal_[node] = token;
    ++patterns_;
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

AddedTokenMatcher::Match AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  Match best{pos, pos, nullptr};
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = children_.find((uint64_t{node} << 8) | static_cast<unsigned char>(text[i]));
    if (it == children_.end()) break;
    node = it->second;
    if (terminal_[node] != nullptr) best = {pos, i + 1, terminal_[node]};
  }
  return best;
}

std::vector<AddedTokenSpan> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<AddedTokenSpan> spans;
  size_t plain_from = 0;  // where the current plain run starts
  for (size_t pos = 0; patterns_ > 0 && pos < text.size();) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    Match match = LongestAt(text, pos);
    if (match.token == nullptr) {
      ++pos;
      continue;
    }
    pos = match.end;  // the search resumes after the raw match, whatever happens to it
    const AddedToken& token = *match.token;
    if (token.single_word &&
        (WordCharBefore(text, match.begin) || WordCharAfter(text, match.end))) {
      continue;
    }
    size_t begin = match.begin, end = match.end;
    if (token.lstrip) begin = std::max(SpaceRunStart(text, begin), plain_from);
    if (token.rstrip) end = SpaceRunEnd(text, end);
    if (begin < plain_from) continue;  // overlaps what an rstrip already took
    if (plain_from < begin) spans.push_back({plain_from, begin, nullptr});
    spans.push_back({begin, end, &token});
    plain_from = end;
  }
  if (plain_from < text.size()) spans.push_back({plain_from, text.size(), nullptr});
  return spans;
}

}  // namespace nightshift::tokenizer
