// Post-processors of tokenizer.json (`post_processor`): what "add special
// tokens" adds around one encoded sequence. Supported types: ByteLevel
// (adds nothing; its options only move offsets), TemplateProcessing (its
// `single` template), RobertaProcessing (`cls A sep`), BertProcessing
// (`cls A sep`) and Sequence. Any other type is refused with Unimplemented
// naming it.
//
// Immutable after parsing; safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/tokenizer/json_fields.h"

namespace nightshift::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one encoded sequence.
  virtual void Process(std::vector<int32_t>* ids) const = 0;
};

// Builds the post-processor described by `spec`; nullptr for a JSON null.
// `where` names the spec in error messages ("post_processor").
StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const Json& spec,
                                                            const std::string& where);

}  // namespace nightshift::tokenizer
