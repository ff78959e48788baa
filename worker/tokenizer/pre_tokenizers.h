// Pre-tokenizers of tokenizer.json (`pre_tokenizer`): split a normalized
// segment into the pieces ("words") the BPE model sees, possibly rewriting
// them. Supported types, with the Rust crate's semantics: ByteLevel, Split,
// Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation,
// CharDelimiterSplit and Sequence. Any other type is refused with
// Unimplemented naming it.
//
// Pre-tokenizers are immutable after parsing and safe to share between
// threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/tokenizer/json_fields.h"
#include "worker/tokenizer/regex.h"

namespace nightshift::tokenizer {

// One piece of text on its way to the model.
struct PreToken {
  std::string text;
  // The piece starts at offset 0 of the original input text (Metaspace's
  // `prepend_scheme: first` prepends only there).
  bool at_start = false;
};

// What Split does with the delimiters it finds (the crate's
// SplitDelimiterBehavior). On "the-final--countdown" split at '-':
//   kRemoved            the | final | countdown
//   kIsolated           the | - | final | - | - | countdown
//   kMergedWithPrevious the- | final- | - | countdown
//   kMergedWithNext     the | -final | - | -countdown
//   kContiguous         the | - | final | -- | countdown
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `piece` around `delimiters` (sorted, non-overlapping ranges of
// piece.text) with `behavior`, appending the non-empty parts to *out. With
// `invert`, the delimiters are the text between the ranges instead.
void SplitPiece(const PreToken& piece, const std::vector<MatchRange>& delimiters,
                SplitBehavior behavior, bool invert, std::vector<PreToken>* out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *pieces by their pre-tokenized parts, in order; empty parts are
  // dropped.
  virtual Status PreTokenize(std::vector<PreToken>* pieces) const = 0;
};

// Builds the pre-tokenizer described by `spec`; nullptr for a JSON null.
// `where` names the spec in error messages ("pre_tokenizer").
StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& spec,
                                                          const std::string& where);

}  // namespace nightshift::tokenizer
