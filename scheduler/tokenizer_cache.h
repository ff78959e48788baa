// The prompt encoders of the tokenizers workers uploaded, by content hash:
// each is loaded from the store once (and written under `cache_dir`), then
// shared by every submit of every model that uses it.
//
// Thread-safety: every method may be called from any thread (a mutex of its
// own guards the map; loading runs under it, so one tokenizer loads once).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "scheduler/prompt_encoder.h"
#include "scheduler/store.h"

namespace nightshift::scheduler {

class TokenizerCache {
 public:
  // `store` is not owned and must outlive the cache.
  TokenizerCache(Store* store, std::string cache_dir);

  // The encoder of tokenizer `hash` ("" = a model without a tokenizer: token
  // ids only). NotFound when the store holds no such tokenizer (not uploaded
  // yet); the store's errors; PromptEncoder::Create's errors for files that
  // do not load.
  StatusOr<std::shared_ptr<const PromptEncoder>> Get(const std::string& hash);
  // Whether `hash` is loaded already.
  bool Loaded(const std::string& hash);

 private:
  Store* store_;
  const std::string cache_dir_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const PromptEncoder>> encoders_;
};

}  // namespace nightshift::scheduler
