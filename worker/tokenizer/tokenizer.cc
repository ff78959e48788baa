#include "worker/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "worker/tokenizer/added_tokens.h"
#include "worker/tokenizer/bpe.h"
#include "worker/tokenizer/decoders.h"
#include "worker/tokenizer/json_fields.h"
#include "worker/tokenizer/normalizers.h"
#include "worker/tokenizer/post_processors.h"
#include "worker/tokenizer/pre_tokenizers.h"
#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;

  std::vector<AddedToken> added_tokens;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_map<int32_t, const AddedToken*> added_by_id;
  AddedTokenMatcher raw_matcher;         // normalized: false, on the raw text
  AddedTokenMatcher normalized_matcher;  // normalized: true, on normalized segments

  std::vector<int32_t> eos_ids;
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;

  Status LoadAddedTokens(const Json& list);
  Status BuildMatchers();
  // Encodes one segment of text that holds no added token of the raw pass.
  Status EncodeSegment(std::string segment, bool at_start, std::vector<int32_t>* ids) const;
  Status EncodeWords(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;
};

namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return DataLoss(path + ": read failed");
  return text.str();
}

StatusOr<Json> ParseJson(std::string_view text, const std::string& what) {
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidArgument(what + ": not valid JSON");
  return parsed;
}

// Reads an optional JSON file of a model directory; a null Json when absent.
StatusOr<Json> ReadOptionalJson(const std::string& path) {
  std::ifstream probe(path);
  if (!probe) return Json();
  NS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJson(text, path);
}

// `eos_token_id` of generation_config.json / config.json: an id or a list.
StatusOr<std::vector<int32_t>> EosIdsField(const Json& config, const std::string& where) {
  std::vector<int32_t> ids;
  if (!config.is_object()) return ids;
  auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return ids;
  Json list = it->is_array() ? *it : Json::array({*it});
  for (const Json& id : list) {
    if (!id.is_number_unsigned()) {
      return InvalidArgument(where + ": eos_token_id must be an id or a list of ids");
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// A special token in tokenizer_config.json: a string, null, or an
// AddedToken object with "content".
StatusOr<std::optional<std::string>> SpecialTokenField(const Json& config, const char* key,
                                                       const std::string& where) {
  if (!config.is_object()) return std::optional<std::string>();
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return InvalidArgument(where + "." + key + ": expected a string or {\"content\": ...}");
}

}  // namespace

Status Tokenizer::Impl::LoadAddedTokens(const Json& list) {
  if (list.is_null()) return Status::Ok();
  if (!list.is_array()) return InvalidArgument("added_tokens: expected a list");
  added_tokens.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& spec = list[i];
    std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!spec.is_object() || !spec.contains("id") || !spec["id"].is_number_unsigned()) {
      return InvalidArgument(where + ": expected an object with an id");
    }
    AddedToken token;
    token.id = spec["id"].get<int32_t>();
    NS_ASSIGN_OR_RETURN(token.content, StringField(spec, "content", where));
    NS_ASSIGN_OR_RETURN(token.single_word, BoolField(spec, "single_word", false, where));
    NS_ASSIGN_OR_RETURN(token.lstrip, BoolField(spec, "lstrip", false, where));
    NS_ASSIGN_OR_RETURN(token.rstrip, BoolField(spec, "rstrip", false, where));
    NS_ASSIGN_OR_RETURN(token.special, BoolField(spec, "special", false, where));
    NS_ASSIGN_OR_RETURN(token.normalized, BoolField(spec, "normalized", !token.special, where));
    NS_RETURN_IF_ERROR(ValidateUtf8(token.content).Prefixed(where));
    added_tokens.push_back(std::move(token));
  }
  for (const AddedToken& token : added_tokens) {
    added_by_content.emplace(token.content, token.id);
    added_by_id[token.id] = &token;
  }
  return Status::Ok();
}

Status Tokenizer::Impl::BuildMatchers() {
  // The crate matches special tokens first, then the others, in file order.
  for (bool special : {true, false}) {
    for (const AddedToken& token : added_tokens) {
      if (token.special != special) continue;
      if (!token.normalized) {
        raw_matcher.Add(token.content, &token);
        continue;
      }
      std::string pattern = token.content;
      if (normalizer) NS_RETURN_IF_ERROR(normalizer->Normalize(&pattern));
      normalized_matcher.Add(std::move(pattern), &token);
    }
  }
  return Status::Ok();
}

Status Tokenizer::Impl::EncodeWords(std::string_view text, bool at_start,
                                    std::vector<int32_t>* ids) const {
  std::vector<PreToken> words{{std::string(text), at_start}};
  if (pre_tokenizer) NS_RETURN_IF_ERROR(pre_tokenizer->PreTokenize(&words));
  for (const PreToken& word : words) NS_RETURN_IF_ERROR(model->Tokenize(word.text, ids));
  return Status::Ok();
}

Status Tokenizer::Impl::EncodeSegment(std::string segment, bool at_start,
                                      std::vector<int32_t>* ids) const {
  if (normalizer) NS_RETURN_IF_ERROR(normalizer->Normalize(&segment));
  if (normalized_matcher.empty()) return EncodeWords(segment, at_start, ids);
  std::string_view view = segment;
  for (const AddedTokenSpan& span : normalized_matcher.Split(view)) {
    if (span.token != nullptr) {
      ids->push_back(span.token->id);
    } else {
      NS_RETURN_IF_ERROR(EncodeWords(view.substr(span.begin, span.end - span.begin),
                                     at_start && span.begin == 0, ids));
    }
  }
  return Status::Ok();
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

StatusOr<Tokenizer> Tokenizer::FromJson(std::string_view tokenizer_json) {
  NS_ASSIGN_OR_RETURN(Json spec, ParseJson(tokenizer_json, "tokenizer.json"));
  if (!spec.is_object()) return InvalidArgument("tokenizer.json: expected an object");
  auto impl = std::make_unique<Impl>();

  auto model = spec.find("model");
  if (model == spec.end() || !model->is_object()) {
    return InvalidArgument("model: missing or not an object");
  }
  // Old files leave out the BPE model's type; its merges identify it.
  std::string type = model->value("type", model->contains("merges") ? "BPE" : "");
  if (type != "BPE") return UnsupportedType("model", type.empty() ? "(none)" : type);
  NS_ASSIGN_OR_RETURN(impl->model, BpeModel::FromJson(*model, "model"));

  const Json null;
  auto field = [&](const char* key) -> const Json& {
    auto it = spec.find(key);
    return it == spec.end() ? null : *it;
  };
  NS_ASSIGN_OR_RETURN(impl->normalizer, ParseNormalizer(field("normalizer"), "normalizer"));
  NS_ASSIGN_OR_RETURN(impl->pre_tokenizer,
                      ParsePreTokenizer(field("pre_tokenizer"), "pre_tokenizer"));
  NS_ASSIGN_OR_RETURN(impl->post_processor,
                      ParsePostProcessor(field("post_processor"), "post_processor"));
  NS_ASSIGN_OR_RETURN(impl->decoder, ParseDecoder(field("decoder"), "decoder"));
  NS_RETURN_IF_ERROR(impl->LoadAddedTokens(field("added_tokens")));
  NS_RETURN_IF_ERROR(impl->BuildMatchers());
  return Tokenizer(std::move(impl));
}

StatusOr<Tokenizer> Tokenizer::FromFile(const std::string& tokenizer_json_path) {
  NS_ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_json_path));
  StatusOr<Tokenizer> tokenizer = FromJson(text);
  if (!tokenizer.ok()) return tokenizer.status().Prefixed(tokenizer_json_path);
  return tokenizer;
}

StatusOr<Tokenizer> Tokenizer::FromModelDir(const std::string& dir) {
  NS_ASSIGN_OR_RETURN(Tokenizer tokenizer, FromFile(dir + "/tokenizer.json"));
  Impl& impl = *tokenizer.impl_;
  const std::string config_path = dir + "/tokenizer_config.json";
  NS_ASSIGN_OR_RETURN(Json config, ReadOptionalJson(config_path));
  NS_ASSIGN_OR_RETURN(impl.bos_token, SpecialTokenField(config, "bos_token", config_path));
  NS_ASSIGN_OR_RETURN(impl.eos_token, SpecialTokenField(config, "eos_token", config_path));
  NS_ASSIGN_OR_RETURN(impl.pad_token, SpecialTokenField(config, "pad_token", config_path));
  NS_ASSIGN_OR_RETURN(impl.unk_token, SpecialTokenField(config, "unk_token", config_path));

  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = dir + "/" + name;
    NS_ASSIGN_OR_RETURN(Json json, ReadOptionalJson(path));
    NS_ASSIGN_OR_RETURN(impl.eos_ids, EosIdsField(json, path));
    if (!impl.eos_ids.empty()) break;
  }
  if (impl.eos_ids.empty() && impl.eos_token) {
    std::optional<int32_t> id = tokenizer.TokenToId(*impl.eos_token);
    if (!id) {
      return InvalidArgument(config_path + ": eos_token '" + *impl.eos_token +
                             "' is not in the vocabulary");
    }
    impl.eos_ids.push_back(*id);
  }
  return tokenizer;
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 bool add_special_tokens) const {
  NS_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  for (const AddedTokenSpan& span : impl_->raw_matcher.Split(text)) {
    if (span.token != nullptr) {
      ids.push_back(span.token->id);
      continue;
    }
    NS_RETURN_IF_ERROR(impl_->EncodeSegment(
        std::string(text.substr(span.begin, span.end - span.begin)), span.begin == 0, &ids));
  }
  if (add_special_tokens && impl_->post_processor) impl_->post_processor->Process(&ids);
  return ids;
}

StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                        bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    auto added = impl_->added_by_id.find(id);
    if (added != impl_->added_by_id.end()) {
      if (!(skip_special_tokens && added->second->special)) {
        tokens.push_back(added->second->content);
      }
      continue;
    }
    const std::string* token = impl_->model->IdToToken(id);
    if (token == nullptr)
      return OutOfRange("token id " + std::to_string(id) + " is not in the vocabulary");
    tokens.push_back(*token);
  }
  std::string text;
  if (impl_->decoder) {
    NS_RETURN_IF_ERROR(impl_->decoder->DecodeChain(&tokens));
    for (const std::string& piece : tokens) text += piece;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i > 0 ? " " : "") + tokens[i];
  }
  return Utf8Lossy(text);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = impl_->added_by_content.find(std::string(token));
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  auto added = impl_->added_by_id.find(id);
  if (added != impl_->added_by_id.end()) return added->second->content;
  const std::string* token = impl_->model->IdToToken(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  auto added = impl_->added_by_id.find(id);
  return added != impl_->added_by_id.end() && added->second->special;
}

int32_t Tokenizer::vocab_size() const {
  int32_t max_id = impl_->model->max_id();
  for (const AddedToken& token : impl_->added_tokens) max_id = std::max(max_id, token.id);
  return max_id + 1;
}

const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos_ids; }
const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->eos_token; }
const std::optional<std::string>& Tokenizer::pad_token() const { return impl_->pad_token; }
const std::optional<std::string>& Tokenizer::unk_token() const { return impl_->unk_token; }

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

StatusOr<std::string> IncrementalDecoder::Add(int32_t id) {
  if (!tokenizer_.IdToToken(id)) {
    return OutOfRange("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  window_.push_back(id);
  NS_ASSIGN_OR_RETURN(std::string text, tokenizer_.Decode(window_, skip_special_tokens_));
  if (text.size() <= emitted_text_.size() || EndsWithReplacementChar(text)) return std::string();
  if (text.compare(0, emitted_text_.size(), emitted_text_) != 0) {
    return Internal("incremental decode: the decoder rewrote text it had already produced");
  }
  std::string fresh = text.substr(emitted_text_.size());
  // The ids that produced `fresh` stay as context for the next step, so that
  // decoders that treat the first token specially see the same first token.
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(emitted_ids_));
  emitted_ids_ = window_.size();
  NS_ASSIGN_OR_RETURN(emitted_text_, tokenizer_.Decode(window_, skip_special_tokens_));
  return fresh;
}

StatusOr<std::string> IncrementalDecoder::Finish() {
  std::string rest;
  if (window_.size() > emitted_ids_) {
    NS_ASSIGN_OR_RETURN(std::string text, tokenizer_.Decode(window_, skip_special_tokens_));
    if (text.compare(0, emitted_text_.size(), emitted_text_) != 0) {
      return Internal("incremental decode: the decoder rewrote text it had already produced");
    }
    rest = text.substr(emitted_text_.size());
  }
  window_.clear();
  emitted_ids_ = 0;
  emitted_text_.clear();
  return rest;
}

}  // namespace nightshift::tokenizer
