#include "scheduler/prompt_encoder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>

#include "scheduler/disk_full.h"
#include "worker/chat/chat_template.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift::scheduler {

struct PromptEncoder::Impl {
  std::optional<tokenizer::Tokenizer> tokenizer;
  std::optional<chat::ModelChatTemplate> chat_template;
  Status chat_status;  // why there is no template, when there is none
};

namespace {

// Writes `content` to `path` whole, or removes what it wrote: a full disk
// leaves no half-written file behind.
Status WriteWhole(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create " + path, errno);
  const char* data = content.data();
  size_t left = content.size();
  Status status;
  while (left > 0 && status.ok()) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = FileError("cannot write " + path, errno);
    } else {
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (status.ok() && ::fsync(fd) != 0) status = FileError("cannot write " + path, errno);
  if (::close(fd) != 0 && status.ok()) status = FileError("cannot write " + path, errno);
  if (!status.ok()) ::unlink(path.c_str());
  return status;
}

Status WriteBundle(const TokenizerFiles& files, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return FileError("cannot create " + dir, error.value());
  for (const auto& [name, content] : files.files) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return InvalidArgument("tokenizer file name '" + name + "' is not a plain file name");
    }
    const std::string path = dir + "/" + name;
    const std::string temp = path + ".tmp";
    NS_RETURN_IF_ERROR(WriteWhole(temp, content));
    std::filesystem::rename(temp, path, error);
    if (error) {
      const Status renamed = FileError("cannot rename " + temp, error.value());
      std::filesystem::remove(temp, error);
      return renamed;
    }
  }
  return Status::Ok();
}

// Label ids as the continuation of `prompt_text`.
StatusOr<std::vector<int32_t>> EncodeLabel(const tokenizer::Tokenizer& tok,
                                           const std::string& prompt_text, bool special,
                                           const std::vector<int32_t>& prompt_ids,
                                           const std::string& label) {
  NS_ASSIGN_OR_RETURN(std::vector<int32_t> full, tok.Encode(prompt_text + label, special));
  std::vector<int32_t> ids;
  if (full.size() > prompt_ids.size() &&
      std::equal(prompt_ids.begin(), prompt_ids.end(), full.begin())) {
    ids.assign(full.begin() + static_cast<std::ptrdiff_t>(prompt_ids.size()), full.end());
  } else {
    NS_ASSIGN_OR_RETURN(ids, tok.Encode(label, false));
  }
  if (ids.empty()) return InvalidArgument("label '" + label + "' encodes to no tokens");
  return ids;
}

}  // namespace

PromptEncoder::PromptEncoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PromptEncoder::~PromptEncoder() = default;

StatusOr<std::shared_ptr<const PromptEncoder>> PromptEncoder::Create(const TokenizerFiles& files,
                                                                     const std::string& cache_dir) {
  auto impl = std::make_unique<Impl>();
  const std::string dir = cache_dir + "/" + TokenizerHash(files);
  NS_RETURN_IF_ERROR(WriteBundle(files, dir));
  if (files.files.count("tokenizer.json") != 0) {
    auto tok = tokenizer::Tokenizer::FromModelDir(dir);
    if (!tok.ok()) return tok.status();
    impl->tokenizer.emplace(std::move(tok).value());
  }
  auto chat_template = chat::LoadModelChatTemplate(dir);
  if (chat_template.ok()) {
    impl->chat_template.emplace(std::move(chat_template).value());
  } else if (chat_template.status().code() == StatusCode::kNotFound) {
    impl->chat_status = Unimplemented("the model has no chat template");
  } else {
    return chat_template.status();
  }
  return std::shared_ptr<const PromptEncoder>(new PromptEncoder(std::move(impl)));
}

StatusOr<TokenisedPrompt> PromptEncoder::Encode(const JobSpec& spec) const {
  TokenisedPrompt out;
  std::string prompt_text;  // what labels continue
  bool special = false;     // whether prompt_text was encoded with special tokens
  const tokenizer::Tokenizer* tok = impl_->tokenizer ? &*impl_->tokenizer : nullptr;
  switch (spec.prompt_kind) {
    case PromptKind::kTokenIds: {
      out.prompt = spec.prompt_token_ids;
      if (tok != nullptr) {
        for (int32_t id : out.prompt) {
          if (id >= tok->vocab_size()) {
            return InvalidArgument("token id " + std::to_string(id) +
                                   " is outside the vocabulary of " +
                                   std::to_string(tok->vocab_size()));
          }
        }
        if (!spec.labels.empty()) {
          NS_ASSIGN_OR_RETURN(prompt_text, tok->Decode(out.prompt, false));
          NS_ASSIGN_OR_RETURN(std::vector<int32_t> reencoded, tok->Encode(prompt_text, false));
          if (reencoded != out.prompt) prompt_text.clear();  // no text the labels can continue
        }
      }
      break;
    }
    case PromptKind::kText: {
      if (tok == nullptr) return Unimplemented("the model has no tokenizer.json: send token ids");
      prompt_text = spec.prompt_text;
      special = true;
      NS_ASSIGN_OR_RETURN(out.prompt, tok->Encode(prompt_text, special));
      break;
    }
    case PromptKind::kChat: {
      if (tok == nullptr) return Unimplemented("the model has no tokenizer.json: send token ids");
      if (!impl_->chat_template) return impl_->chat_status;
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      for (const ChatMessage& m : spec.messages) {
        messages.push_back({{"role", m.role}, {"content", m.content}});
      }
      NS_ASSIGN_OR_RETURN(prompt_text, impl_->chat_template->chat_template.Render(
                                           messages, true, impl_->chat_template->special_tokens));
      NS_ASSIGN_OR_RETURN(out.prompt, tok->Encode(prompt_text, false));
      break;
    }
  }
  if (!spec.labels.empty() && tok == nullptr) {
    return Unimplemented("labels need the model's tokenizer.json");
  }
  // prompt_text, when set, encodes (with `special`) to exactly out.prompt.
  const std::vector<int32_t> base = prompt_text.empty() ? std::vector<int32_t>() : out.prompt;
  for (const std::string& label : spec.labels) {
    NS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                        EncodeLabel(*tok, prompt_text, special, base, label));
    out.labels.push_back(std::move(ids));
  }
  return out;
}

}  // namespace nightshift::scheduler
