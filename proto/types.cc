#include "proto/types.h"

#include <openssl/evp.h>

#include <cstdio>

namespace nightshift::api {

const char* EndpointUrl(Endpoint endpoint) {
  return endpoint == Endpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
}

StatusOr<Endpoint> ParseEndpointUrl(std::string_view url) {
  if (url == "/v1/completions") return Endpoint::kCompletions;
  if (url == "/v1/chat/completions") return Endpoint::kChatCompletions;
  return InvalidArgument("unsupported url '" + std::string(url) +
                         "' (/v1/completions or /v1/chat/completions)");
}

std::string TokenizerHash(const TokenizerFiles& tokenizer) {
  // Each part is length-prefixed so that no two different inputs hash the same bytes.
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  auto add = [&](const std::string& part) {
    const uint64_t size = part.size();
    EVP_DigestUpdate(ctx, &size, sizeof(size));
    EVP_DigestUpdate(ctx, part.data(), part.size());
  };
  add(std::to_string(tokenizer.files.size()));
  for (const auto& [name, content] : tokenizer.files) {
    add(name);
    add(content);
  }
  for (int32_t id : tokenizer.eos_ids) add(std::to_string(id));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

const ModelOffer* FindModel(const WorkerInfo& worker, std::string_view model) {
  for (const auto& offer : worker.models) {
    if (offer.name == model) return &offer;
  }
  return nullptr;
}

}  // namespace nightshift::api
