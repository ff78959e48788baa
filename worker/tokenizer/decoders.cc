#include "worker/tokenizer/decoders.h"

#include <utility>

#include "worker/tokenizer/normalizers.h"
#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

// ByteLevel: the byte-level alphabet back to bytes, then UTF-8 (lossy). A
// token with a character outside the alphabet (an added token such as
// "<|im_start|>" written with other characters) contributes its own bytes.
class ByteLevelDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& token : *tokens) {
      size_t mark = bytes.size();
      size_t length;
      for (size_t pos = 0; pos < token.size(); pos += length) {
        int byte = UnicodeToByte(DecodeUtf8(token, pos, &length));
        if (byte < 0) {
          bytes.resize(mark);
          bytes += token;
          break;
        }
        bytes.push_back(static_cast<char>(byte));
      }
    }
    *tokens = {Utf8Lossy(bytes)};
    return Status::Ok();
  }
};

// Metaspace: the replacement character becomes a space, except in the first
// token when the pre-tokenizer prepends one (there it is dropped).
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      std::string out;
      out.reserve(token.size());
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && drop_in_first_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(token[pos++]);
        }
      }
      token = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      NS_ASSIGN_OR_RETURN(token, ReplaceAll(pattern_, content_, token));
    }
    return Status::Ok();
  }

 private:
  Regex pattern_;
  std::string content_;
};

// ByteFallback: runs of `<0xXX>` tokens become the text of their bytes, or
// one U+FFFD per byte when the run is not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (ValidateUtf8(run).ok()) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (std::string& token : *tokens) {
      int byte = ByteTokenValue(token);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
    return Status::Ok();
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // The byte of a "<0xXX>" token, -1 for any other token.
  static int ByteTokenValue(const std::string& token) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
    int high = HexDigit(token[3]), low = HexDigit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
};

class FuseDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string joined;
    for (const std::string& token : *tokens) joined += token;
    *tokens = {std::move(joined)};
    return Status::Ok();
  }
};

// Strip: removes up to `start` leading and `stop` trailing copies of one
// character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      std::vector<std::pair<size_t, size_t>> chars;  // (offset, length)
      size_t length;
      for (size_t pos = 0; pos < token.size(); pos += length) {
        DecodeUtf8(token, pos, &length);
        chars.emplace_back(pos, length);
      }
      auto is_content = [&](size_t i) {
        size_t unused;
        return DecodeUtf8(token, chars[i].first, &unused) == content_;
      };
      size_t begin = 0;
      while (begin < start_ && begin < chars.size() && is_content(begin)) ++begin;
      size_t end = chars.size();
      for (size_t i = 0; i < stop_ && end > begin && is_content(end - 1); ++i) --end;
      size_t from = begin < chars.size() ? chars[begin].first : token.size();
      size_t to = end < chars.size() ? chars[end].first : token.size();
      token = token.substr(from, to - from);
    }
    return Status::Ok();
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

// BPEDecoder: the end-of-word suffix becomes a space (nothing in the last
// token).
class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    if (suffix_.empty()) return Status::Ok();
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      const std::string replacement = i + 1 == tokens->size() ? "" : " ";
      for (size_t pos = token.find(suffix_); pos != std::string::npos;
           pos = token.find(suffix_, pos + replacement.size())) {
        token.replace(pos, suffix_.size(), replacement);
      }
    }
    return Status::Ok();
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) NS_RETURN_IF_ERROR(step->DecodeChain(tokens));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

StatusOr<std::unique_ptr<Decoder>> ParseSequence(const Json& spec, const std::string& where) {
  auto it = spec.find("decoders");
  if (it == spec.end() || !it->is_array()) {
    return InvalidArgument(where + ".decoders: expected a list");
  }
  std::vector<std::unique_ptr<Decoder>> steps;
  for (size_t i = 0; i < it->size(); ++i) {
    std::string at = where + ".decoders[" + std::to_string(i) + "]";
    if ((*it)[i].is_null()) return InvalidArgument(at + ": expected an object");
    NS_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> step, ParseDecoder((*it)[i], at));
    steps.push_back(std::move(step));
  }
  return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
}

StatusOr<std::unique_ptr<Decoder>> ParseMetaspace(const Json& spec, const std::string& where) {
  NS_ASSIGN_OR_RETURN(std::string replacement, CharField(spec, "replacement", where));
  bool prepends;
  auto scheme = spec.find("prepend_scheme");
  if (scheme != spec.end() && !scheme->is_null()) {
    NS_ASSIGN_OR_RETURN(std::string name, StringField(spec, "prepend_scheme", where));
    if (name != "always" && name != "first" && name != "never") {
      return InvalidArgument(where + ".prepend_scheme: unknown scheme '" + name + "'");
    }
    prepends = name != "never";
  } else {
    NS_ASSIGN_OR_RETURN(prepends, BoolField(spec, "add_prefix_space", true, where));
  }
  return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, prepends));
}

StatusOr<std::unique_ptr<Decoder>> ParseStrip(const Json& spec, const std::string& where) {
  NS_ASSIGN_OR_RETURN(std::string content, CharField(spec, "content", where));
  NS_ASSIGN_OR_RETURN(int64_t start, CountField(spec, "start", 0, where));
  NS_ASSIGN_OR_RETURN(int64_t stop, CountField(spec, "stop", 0, where));
  size_t length;
  return std::unique_ptr<Decoder>(new StripDecoder(
      DecodeUtf8(content, 0, &length), static_cast<size_t>(start), static_cast<size_t>(stop)));
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& spec, const std::string& where) {
  if (spec.is_null()) return std::unique_ptr<Decoder>();
  NS_ASSIGN_OR_RETURN(std::string type, TypeField(spec, where));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Sequence") return ParseSequence(spec, where);
  if (type == "Metaspace") return ParseMetaspace(spec, where);
  if (type == "Strip") return ParseStrip(spec, where);
  if (type == "Replace") {
    NS_ASSIGN_OR_RETURN(Regex pattern, PatternField(spec, "pattern", where));
    NS_ASSIGN_OR_RETURN(std::string content, StringField(spec, "content", where));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern), content));
  }
  if (type == "BPEDecoder") {
    NS_ASSIGN_OR_RETURN(std::string suffix, OptionalStringField(spec, "suffix", "</w>", where));
    return std::unique_ptr<Decoder>(new BpeSuffixDecoder(suffix));
  }
  return UnsupportedType(where, type);
}

}  // namespace nightshift::tokenizer
