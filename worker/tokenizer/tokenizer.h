// HuggingFace `tokenizer.json` in C++: encode text to token ids and decode ids
// back to text exactly as the Rust `tokenizers` crate does, for the two BPE
// families nearly every open model uses (byte-level BPE: GPT-2, Llama 3,
// Qwen; SentencePiece-style BPE with byte fallback: Llama 2, Mistral).
//
// The pipeline is the crate's: split the raw text on added tokens (longest
// match first), normalize each remaining segment, split it again on the
// added tokens that match normalized text, pre-tokenize, run the BPE model on
// every pre-token, then (when asked) let the post-processor add its special
// tokens. Decoding maps ids to token strings and runs the decoder chain.
//
// Every component type that `tokenizer.json` names is either implemented with
// the crate's semantics or refused at load time with an error naming it (the
// model types Unigram/WordPiece/WordLevel, BertNormalizer, Precompiled,
// UnicodeScripts, ...). The known residual differences are small and listed
// where they live: regex.h (PCRE2 vs Oniguruma) and unicode.h (Lowercase).
// `truncation` and `padding` in the file are ignored on purpose: the system
// never truncates a prompt silently (it refuses over-long ones).
//
// Thread-safety: a Tokenizer is immutable after loading except for an
// internal, synchronised per-word cache; every const method may be called
// from any number of threads at once. IncrementalDecoder and
// StopStringMatcher (stop_strings.h) are per-stream objects, not synchronised.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nightshift::tokenizer {

class Tokenizer {
 public:
  // Loads a `tokenizer.json`. Fails with NotFound when the file cannot be
  // read, InvalidArgument when it is not valid JSON or a field is malformed,
  // and Unimplemented naming the component (e.g. "model type 'Unigram'") when
  // it uses one this implementation does not support. The result has no
  // EOS ids and no bos/eos token strings (those live in the other files; see
  // FromModelDir).
  static StatusOr<Tokenizer> FromFile(const std::string& tokenizer_json_path);

  // Same as FromFile, from the file's text (tests, embedded tokenizers).
  static StatusOr<Tokenizer> FromJson(std::string_view tokenizer_json);

  // Loads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json`
  // (the bos/eos/pad/unk token strings). EOS ids for generation come from
  // the first of these that names any: `generation_config.json`
  // `eos_token_id`, then `config.json` `eos_token_id` (each an integer or a
  // list), then `tokenizer_config.json` `eos_token` looked up in the vocab.
  // Errors as FromFile, plus InvalidArgument for a malformed optional file.
  static StatusOr<Tokenizer> FromModelDir(const std::string& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes `text` (must be valid UTF-8; invalid input is InvalidArgument
  // naming the byte offset). Added tokens written literally in the text,
  // special or not, are matched and get their ids. With
  // `add_special_tokens` the post-processor runs (e.g. Mistral's `<s>` in
  // front); without it nothing is added. This signature is stable.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;

  // Decodes `ids` through the decoder chain, like the Rust crate's
  // `decode(ids, skip_special_tokens)` (no clean-up of tokenization spaces).
  // Byte sequences that are not valid UTF-8 come back as U+FFFD, so the
  // result is always valid UTF-8. An id outside the vocabulary is
  // OutOfRange naming it (the crate silently drops such ids).
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  // The id of a token string (added tokens first, then the model's vocab);
  // nullopt when there is none. The string is the vocab spelling ("Ġthe").
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocab spelling of an id; nullopt when the id is unknown.
  std::optional<std::string> IdToToken(int32_t id) const;
  // True when `id` is an added token marked `special`.
  bool IsSpecial(int32_t id) const;

  // One past the largest id of the model vocab and the added tokens: the
  // number of rows an embedding for this tokenizer must have at least.
  int32_t vocab_size() const;

  // Ids that end generation (see FromModelDir); empty when none is known.
  const std::vector<int32_t>& eos_ids() const;

  // Special token strings from tokenizer_config.json (`bos_token`,
  // `eos_token`, `pad_token`, `unk_token`, as chat templates see them);
  // nullopt when the config does not set them (or was not read).
  const std::optional<std::string>& bos_token() const;
  const std::optional<std::string>& eos_token() const;
  const std::optional<std::string>& pad_token() const;
  const std::optional<std::string>& unk_token() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of generated ids into text pieces as they become final, so
// that the concatenation of everything Add() and Finish() return equals
// Decode(all ids) and no piece ever ends in the middle of a UTF-8 character.
// Text is held back while the decoded window ends in U+FFFD (an incomplete
// character, or a genuine U+FFFD that the next token or Finish() releases).
//
// The Tokenizer must outlive the decoder. Not thread-safe: one per stream.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Adds one id and returns the text that became final (often empty).
  // Errors: OutOfRange for an unknown id (the id is not kept), Internal if the
  // decoder chain is not prefix-stable (no supported decoder is).
  StatusOr<std::string> Add(int32_t id);

  // Returns whatever is still held back (with U+FFFD for an incomplete
  // character at the very end) and starts a fresh stream.
  StatusOr<std::string> Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // ids whose text is (partly) emitted
  size_t emitted_ids_ = 0;       // window_[0, emitted_ids_) produced `emitted_text_`
  std::string emitted_text_;     // Decode(window_[0, emitted_ids_))
};

}  // namespace nightshift::tokenizer
