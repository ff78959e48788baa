#include "worker/tokenizer/bpe.h"

#include <cstdio>
#include <mutex>
#include <queue>

#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

constexpr char32_t kSmallCharLimit = 0x800;

std::string ByteToken(unsigned char byte) {
  char buffer[8];
  std::snprintf(buffer, sizeof(buffer), "<0x%02X>", byte);
  return buffer;
}

}  // namespace

void MergeTable::Reserve(size_t count) {
  size_t capacity = 16;
  shift_ = 60;
  while (capacity < count * 2) {
    capacity *= 2;
    --shift_;
  }
  keys_.assign(capacity, kEmpty);
  merges_.assign(capacity, Merge{0, 0});
}

size_t MergeTable::Slot(uint64_t key) const {
  // Fibonacci hashing: the top bits of key * 2^64/phi.
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
}

void MergeTable::Insert(int32_t left, int32_t right, Merge merge) {
  const uint64_t key = PairKey(left, right);
  const size_t mask = keys_.size() - 1;
  size_t slot = Slot(key);
  while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask;
  keys_[slot] = key;
  merges_[slot] = merge;
}

const MergeTable::Merge* MergeTable::Find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  const uint64_t key = PairKey(left, right);
  const size_t mask = keys_.size() - 1;
  for (size_t slot = Slot(key);; slot = (slot + 1) & mask) {
    if (keys_[slot] == key) return &merges_[slot];
    if (keys_[slot] == kEmpty) return nullptr;
  }
}

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& spec, const std::string& where) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  auto dropout = spec.find("dropout");
  if (dropout != spec.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return Unimplemented(where + ": BPE dropout (random encodings) is not supported");
  }
  NS_ASSIGN_OR_RETURN(model->continuing_subword_prefix_,
                      OptionalStringField(spec, "continuing_subword_prefix", "", where));
  NS_ASSIGN_OR_RETURN(model->end_of_word_suffix_,
                      OptionalStringField(spec, "end_of_word_suffix", "", where));
  auto unk = spec.find("unk_token");
  if (unk != spec.end() && !unk->is_null()) {
    NS_ASSIGN_OR_RETURN(model->unk_token_, StringField(spec, "unk_token", where));
  }
  NS_ASSIGN_OR_RETURN(model->fuse_unk_, BoolField(spec, "fuse_unk", false, where));
  NS_ASSIGN_OR_RETURN(model->byte_fallback_, BoolField(spec, "byte_fallback", false, where));
  NS_ASSIGN_OR_RETURN(model->ignore_merges_, BoolField(spec, "ignore_merges", false, where));
  auto vocab = spec.find("vocab");
  if (vocab == spec.end()) return InvalidArgument(where + ": missing field 'vocab'");
  NS_RETURN_IF_ERROR(model->LoadVocab(*vocab, where + ".vocab"));
  auto merges = spec.find("merges");
  if (merges == spec.end()) return InvalidArgument(where + ": missing field 'merges'");
  NS_RETURN_IF_ERROR(model->LoadMerges(*merges, where + ".merges"));
  return model;
}

Status BpeModel::LoadVocab(const Json& vocab, const std::string& where) {
  if (!vocab.is_object()) return InvalidArgument(where + ": expected an object of token -> id");
  vocab_.reserve(vocab.size());
  small_char_ids_.assign(kSmallCharLimit, -1);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() > INT32_MAX) {
      return InvalidArgument(where + ": id of '" + it.key() + "' is not a valid token id");
    }
    int32_t id = static_cast<int32_t>(it.value().get<uint64_t>());
    vocab_[it.key()] = id;
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(id + 1);
      has_id_.resize(id + 1, false);
    }
    id_to_token_[id] = it.key();
    has_id_[id] = true;
    size_t length;
    const std::string& token = it.key();
    if (!token.empty() && token.size() <= 2) {
      char32_t cp = DecodeUtf8(token, 0, &length);
      if (length == token.size() && cp < kSmallCharLimit) small_char_ids_[cp] = id;
    }
  }
  return Status::Ok();
}

Status BpeModel::LoadMerges(const Json& merges, const std::string& where) {
  if (!merges.is_array()) return InvalidArgument(where + ": expected a list");
  merges_.Reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    std::string at = where + "[" + std::to_string(rank) + "]";
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      NS_RETURN_IF_ERROR(AddMerge(merge[0].get<std::string>(), merge[1].get<std::string>(),
                                  static_cast<int32_t>(rank), at));
      continue;
    }
    if (!merge.is_string()) return InvalidArgument(at + ": expected \"a b\" or [\"a\", \"b\"]");
    // "a b": split at the space; when the tokens themselves contain spaces,
    // at the first space that leaves two vocab tokens.
    const std::string& line = merge.get_ref<const std::string&>();
    size_t space = line.find(' ');
    if (space == std::string::npos) return InvalidArgument(at + ": no space in '" + line + "'");
    size_t chosen = space;
    for (size_t s = space; s != std::string::npos; s = line.find(' ', s + 1)) {
      if (vocab_.count(line.substr(0, s)) > 0 && vocab_.count(line.substr(s + 1)) > 0) {
        chosen = s;
        break;
      }
    }
    NS_RETURN_IF_ERROR(
        AddMerge(line.substr(0, chosen), line.substr(chosen + 1), static_cast<int32_t>(rank), at));
  }
  return Status::Ok();
}

Status BpeModel::AddMerge(const std::string& left, const std::string& right, int32_t rank,
                          const std::string& where) {
  std::optional<int32_t> left_id = Lookup(left);
  std::optional<int32_t> right_id = Lookup(right);
  std::string tail = right;
  if (!continuing_subword_prefix_.empty() &&
      tail.compare(0, continuing_subword_prefix_.size(), continuing_subword_prefix_) == 0) {
    tail.erase(0, continuing_subword_prefix_.size());
  }
  std::optional<int32_t> new_id = Lookup(left + tail);
  if (!left_id || !right_id || !new_id) {
    return InvalidArgument(where + ": merge '" + left + "' + '" + right +
                           "' names a token missing from the vocab");
  }
  merges_.Insert(*left_id, *right_id, {rank, *new_id});
  return Status::Ok();
}

std::optional<int32_t> BpeModel::Lookup(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  return Lookup(std::string(token));
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

Status BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* ids) const {
  // A pending run of unknown characters: emitted as one unk (fuse_unk) or
  // one per character, when a known character or the end comes.
  std::optional<int32_t> pending_unk;
  auto flush_unk = [&] {
    if (pending_unk) ids->push_back(*pending_unk);
    pending_unk.reset();
  };
  const bool plain = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  size_t length;
  std::string symbol;
  for (size_t pos = 0; pos < word.size(); pos += length) {
    char32_t cp = DecodeUtf8(word, pos, &length);
    if (plain && cp < kSmallCharLimit && small_char_ids_[cp] >= 0) {
      flush_unk();
      ids->push_back(small_char_ids_[cp]);
      continue;
    }
    symbol.clear();
    if (pos > 0) symbol += continuing_subword_prefix_;
    symbol.append(word.substr(pos, length));
    if (pos + length == word.size()) symbol += end_of_word_suffix_;
    if (std::optional<int32_t> id = Lookup(symbol)) {
      flush_unk();
      ids->push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char byte : symbol) {
        std::optional<int32_t> id = Lookup(ByteToken(byte));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == symbol.size()) {
        // Like the crate, byte tokens go out before a still-pending unk.
        ids->insert(ids->end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_token_) continue;  // no unk: the character is dropped, as in the crate
    std::optional<int32_t> unk_id = Lookup(*unk_token_);
    if (!unk_id) {
      return InvalidArgument("BPE unk_token '" + *unk_token_ + "' is not in the vocab");
    }
    if (!fuse_unk_) flush_unk();
    pending_unk = *unk_id;
  }
  flush_unk();
  return Status::Ok();
}

void BpeModel::MergeAll(std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  // Lowest rank first, then leftmost.
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  const int32_t n = static_cast<int32_t>(ids->size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  auto offer = [&](int32_t left) {
    int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const MergeTable::Merge* merge = merges_.Find(symbols[left].id, symbols[right].id)) {
      queue.push({merge->rank, left, merge->new_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip entries made stale by earlier merges.
    const MergeTable::Merge* merge = merges_.Find(left.id, right.id);
    if (merge == nullptr || merge->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) offer(left.prev);
    offer(top.pos);
  }
  ids->clear();
  for (const Symbol& s : symbols) {
    if (s.alive) ids->push_back(s.id);
  }
}

Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return Status::Ok();
  if (ignore_merges_) {
    if (std::optional<int32_t> id = TokenToId(word)) {
      out->push_back(*id);
      return Status::Ok();
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::shared_lock<std::shared_mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  NS_RETURN_IF_ERROR(InitialSymbols(word, &ids));
  MergeAll(&ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock<std::shared_mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::move(key), std::move(ids));
  }
  return Status::Ok();
}

}  // namespace nightshift::tokenizer
