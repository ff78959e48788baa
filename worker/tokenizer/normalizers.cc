#include "worker/tokenizer/normalizers.h"

#include <utility>
#include <vector>

#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

class NormalFormNormalizer : public Normalizer {
 public:
  explicit NormalFormNormalizer(NormalForm form) : form_(form) {}
  Status Normalize(std::string* text) const override {
    NS_ASSIGN_OR_RETURN(*text, ToNormalForm(*text, form_));
    return Status::Ok();
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    *text = ToLowercase(*text);
    return Status::Ok();
  }
};

// Strip: removes leading and/or trailing white space.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* text) const override {
    std::string_view view = *text;
    size_t length;
    size_t begin = 0;
    while (left_ && begin < view.size() && IsWhiteSpace(DecodeUtf8(view, begin, &length))) {
      begin += length;
    }
    size_t end = view.size();
    while (right_ && end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(view[start]) & 0xC0) == 0x80) --start;
      if (!IsWhiteSpace(DecodeUtf8(view, start, &length))) break;
      end = start;
    }
    *text = std::string(view.substr(begin, end - begin));
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

// StripAccents: removes combining marks (meant to follow NFD/NFKD).
class StripAccentsNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    size_t length;
    for (size_t pos = 0; pos < text->size(); pos += length) {
      char32_t cp = DecodeUtf8(*text, pos, &length);
      if (!IsMark(cp)) out.append(*text, pos, length);
    }
    *text = std::move(out);
    return Status::Ok();
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Normalize(std::string* text) const override {
    NS_ASSIGN_OR_RETURN(*text, ReplaceAll(pattern_, content_, *text));
    return Status::Ok();
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Prepend: puts a string in front of non-empty text.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
    return Status::Ok();
  }

 private:
  std::string prefix_;
};

// ByteLevel: every byte spelled with GPT-2's byte-level alphabet.
class ByteLevelNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    const auto& alphabet = ByteToUnicode();
    std::string out;
    out.reserve(text->size() * 2);
    for (unsigned char byte : *text) out += alphabet[byte];
    *text = std::move(out);
    return Status::Ok();
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) NS_RETURN_IF_ERROR(step->Normalize(text));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

StatusOr<std::unique_ptr<Normalizer>> ParseSequence(const Json& spec, const std::string& where) {
  auto it = spec.find("normalizers");
  if (it == spec.end() || !it->is_array()) {
    return InvalidArgument(where + ".normalizers: expected a list");
  }
  std::vector<std::unique_ptr<Normalizer>> steps;
  for (size_t i = 0; i < it->size(); ++i) {
    std::string at = where + ".normalizers[" + std::to_string(i) + "]";
    if ((*it)[i].is_null()) return InvalidArgument(at + ": expected an object");
    NS_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> step, ParseNormalizer((*it)[i], at));
    steps.push_back(std::move(step));
  }
  return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
}

}  // namespace

StatusOr<std::string> ReplaceAll(const Regex& pattern, const std::string& content,
                                 std::string_view text) {
  std::vector<MatchRange> matches;
  NS_RETURN_IF_ERROR(pattern.FindAll(text, &matches));
  std::string out;
  out.reserve(text.size());
  size_t copied = 0;
  for (const MatchRange& m : matches) {
    out.append(text.substr(copied, m.begin - copied));
    out.append(content);
    copied = m.end;
  }
  out.append(text.substr(copied));
  return out;
}

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  NS_ASSIGN_OR_RETURN(std::string type, TypeField(spec, where));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new NormalFormNormalizer(NormalForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new NormalFormNormalizer(NormalForm::kNFD));
  if (type == "NFKC") {
    return std::unique_ptr<Normalizer>(new NormalFormNormalizer(NormalForm::kNFKC));
  }
  if (type == "NFKD") {
    return std::unique_ptr<Normalizer>(new NormalFormNormalizer(NormalForm::kNFKD));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new ByteLevelNormalizer());
  if (type == "Strip") {
    NS_ASSIGN_OR_RETURN(bool left, BoolField(spec, "strip_left", true, where));
    NS_ASSIGN_OR_RETURN(bool right, BoolField(spec, "strip_right", true, where));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Replace") {
    NS_ASSIGN_OR_RETURN(Regex pattern, PatternField(spec, "pattern", where));
    NS_ASSIGN_OR_RETURN(std::string content, StringField(spec, "content", where));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), content));
  }
  if (type == "Prepend") {
    NS_ASSIGN_OR_RETURN(std::string prefix, StringField(spec, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(prefix));
  }
  if (type == "Sequence") return ParseSequence(spec, where);
  return UnsupportedType(where, type);
}

}  // namespace nightshift::tokenizer
