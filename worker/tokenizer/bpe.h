// The BPE model of tokenizer.json (`"model": {"type": "BPE", ...}`), with
// the Rust crate's semantics:
//   - a word starts as one symbol per character (with
//     `continuing_subword_prefix` on all but the first and
//     `end_of_word_suffix` on the last); a character missing from the vocab
//     becomes one `<0xXX>` token per UTF-8 byte with `byte_fallback`, else
//     the `unk_token` (consecutive ones fused into one with `fuse_unk`), else
//     nothing;
//   - merges apply lowest rank first, equal ranks left to right, using a
//     heap over a linked list of symbols (O(n log n) in the word length);
//   - with `ignore_merges`, a word that is itself in the vocab is one token;
//   - merges come as "a b" strings or ["a", "b"] pairs.
// `dropout` other than null/0 (random encodings) is refused as Unimplemented.
//
// Results for words shorter than 256 bytes are cached. A BpeModel is
// immutable apart from that cache, which is synchronised: Tokenize may be
// called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "worker/tokenizer/json_fields.h"

namespace nightshift::tokenizer {

// An open-addressing hash table from a (left id, right id) pair to the
// merge of that pair: the hot lookup of BPE, kept flat for the cache.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  // Sizes the table for `count` pairs; call before the first Insert.
  void Reserve(size_t count);
  // Adds or replaces the merge of (left, right).
  void Insert(int32_t left, int32_t right, Merge merge);
  // The merge of (left, right), or nullptr.
  const Merge* Find(int32_t left, int32_t right) const;

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31: never a key
  size_t Slot(uint64_t key) const;
  std::vector<uint64_t> keys_;
  std::vector<Merge> merges_;
  int shift_ = 64;
};

class BpeModel {
 public:
  // Builds the model from the `model` object of tokenizer.json. Merges that
  // name tokens missing from the vocab, a vocab that is not an object of
  // string -> id, or malformed fields are InvalidArgument.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& spec, const std::string& where);

  // Appends the ids of one pre-tokenized word. Fails (InvalidArgument) only
  // when the word needs the unk token and the vocab lacks it.
  Status Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocab spelling of `id`, or nullptr when the vocab has no such id.
  const std::string* IdToToken(int32_t id) const;
  // Largest id in the vocab, -1 when it is empty.
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  BpeModel() = default;
  Status LoadVocab(const Json& vocab, const std::string& where);
  Status LoadMerges(const Json& merges, const std::string& where);
  Status AddMerge(const std::string& left, const std::string& right, int32_t rank,
                  const std::string& where);
  // The initial symbols of `word`, before merging.
  Status InitialSymbols(std::string_view word, std::vector<int32_t>* ids) const;
  // Applies the merges to `ids` in place.
  void MergeAll(std::vector<int32_t>* ids) const;
  std::optional<int32_t> Lookup(const std::string& token) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" for ids the vocab skips
  std::vector<bool> has_id_;
  MergeTable merges_;
  // Ids of single-character tokens below U+0800 (all of the byte-level
  // alphabet), -1 where there is none: the initial symbols of most words.
  std::vector<int32_t> small_char_ids_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::optional<std::string> unk_token_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace nightshift::tokenizer
