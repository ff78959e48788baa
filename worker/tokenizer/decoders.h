// Decoders of tokenizer.json (`decoder`): turn the token strings of decoded
// ids into text. Like the Rust crate, each decoder maps a list of token
// strings to a new list (decode_chain) and the result is their
// concatenation. Supported types: ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, BPEDecoder and Sequence. Any other type is
// refused with Unimplemented naming it.
//
// Decoders are immutable after parsing and safe to share between threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/tokenizer/json_fields.h"

namespace nightshift::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the list of token strings (the crate's decode_chain).
  virtual Status DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// Builds the decoder described by `spec`; nullptr for a JSON null (tokens
// are then joined with spaces, as the crate does). `where` names the spec
// in error messages ("decoder").
StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& spec, const std::string& where);

}  // namespace nightshift::tokenizer
