#include "scheduler/tokenizer_cache.h"

#include <utility>

namespace nightshift::scheduler {

TokenizerCache::TokenizerCache(Store* store, std::string cache_dir)
    : store_(store), cache_dir_(std::move(cache_dir)) {}

StatusOr<std::shared_ptr<const PromptEncoder>> TokenizerCache::Get(const std::string& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  auto cached = encoders_.find(hash);
  if (cached != encoders_.end()) return cached->second;
  TokenizerFiles files;
  if (!hash.empty()) {
    NS_ASSIGN_OR_RETURN(files, store_->GetTokenizer(hash));
  }
  auto encoder = PromptEncoder::Create(files, cache_dir_);
  if (encoder.status().code() == StatusCode::kNotFound) {
    // NotFound means "not uploaded yet" to callers; files that were uploaded
    // but do not load are bad input.
    return InvalidArgument(encoder.status().message());
  }
  if (!encoder.ok()) return encoder.status();
  encoders_[hash] = *encoder;
  return encoder;
}

bool TokenizerCache::Loaded(const std::string& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  return encoders_.count(hash) != 0;
}

}  // namespace nightshift::scheduler
