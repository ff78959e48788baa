// Turns a job's prompt (text, chat messages or token ids) and its labels into
// the token ids the model runs, with the model's own tokenizer files as a
// worker sent them. Prompt lengths are therefore exact at submit.
//
//   - text (/v1/completions): encoded with the tokenizer's special tokens
//     (e.g. BOS), as HuggingFace and vLLM do for completions;
//   - chat messages: rendered with the model's chat template
//     (add_generation_prompt), then encoded without adding special tokens
//     (the template writes them), by the chat-template library
//     (worker/chat); a model without a chat template refuses chat prompts
//     with Unimplemented;
//   - token ids: taken as they are, checked against the vocabulary;
//   - labels: each encoded as the continuation of the prompt text (so a label
//     gets the leading-space token the tokenizer would produce after the
//     prompt), falling back to the label alone when the prompt's tokens are
//     not a prefix of prompt + label.
//
// The files are written once to `cache_dir/<hash>/` and loaded from there
// with the tokenizer's and chat library's own directory loaders, so the
// scheduler reads them exactly as a worker reads its checkpoint directory.
//
// Thread-safety: immutable after Create; Encode may run on many threads.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

class PromptEncoder {
 public:
  // Errors: InvalidArgument for a file name that is not a plain name or a
  // tokenizer/template that does not load (the libraries' messages);
  // Unavailable when the cache directory cannot be written. A bundle
  // without tokenizer.json gives an encoder that takes token-id prompts only.
  static StatusOr<std::shared_ptr<const PromptEncoder>> Create(const TokenizerFiles& files,
                                                               const std::string& cache_dir);
  ~PromptEncoder();

  // The job's prompt and label token ids. Errors: InvalidArgument for input
  // the tokenizer refuses (invalid UTF-8, an id outside the vocabulary, a
  // label that encodes to nothing) or a template error (its own
  // raise_exception message); Unimplemented for chat prompts when the chat
  // library is not built in, or when the model has no tokenizer/template.
  StatusOr<TokenisedPrompt> Encode(const JobSpec& spec) const;

 private:
  struct Impl;
  explicit PromptEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nightshift::scheduler
