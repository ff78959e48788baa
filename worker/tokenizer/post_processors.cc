#include "worker/tokenizer/post_processors.h"

#include <utility>

namespace nightshift::tokenizer {
namespace {

// A list of pieces: fixed special-token ids, or the encoded sequence itself.
class TemplatePostProcessor : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence = false;
    std::vector<int32_t> ids;  // when !is_sequence
  };
  explicit TemplatePostProcessor(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  void Process(std::vector<int32_t>* ids) const override {
    std::vector<int32_t> out;
    for (const Piece& piece : pieces_) {
      const std::vector<int32_t>& part = piece.is_sequence ? *ids : piece.ids;
      out.insert(out.end(), part.begin(), part.end());
    }
    *ids = std::move(out);
  }

 private:
  std::vector<Piece> pieces_;
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>* ids) const override {
    for (const auto& step : steps_) step->Process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> Around(std::vector<int32_t> before, std::vector<int32_t> after) {
  std::vector<TemplatePostProcessor::Piece> pieces(3);
  pieces[0].ids = std::move(before);
  pieces[1].is_sequence = true;
  pieces[2].ids = std::move(after);
  return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(pieces)));
}

// `"cls": ["<s>", 0]`: the id of a (token, id) pair.
StatusOr<int32_t> TokenPairId(const Json& spec, const char* key, const std::string& where) {
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_unsigned()) {
    return InvalidArgument(where + "." + key + ": expected [token, id]");
  }
  return (*it)[1].get<int32_t>();
}

StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const Json& spec, const std::string& where) {
  auto single = spec.find("single");
  if (single == spec.end() || !single->is_array()) {
    return InvalidArgument(where + ".single: expected a list");
  }
  auto specials = spec.find("special_tokens");
  std::vector<TemplatePostProcessor::Piece> pieces;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    std::string at = where + ".single[" + std::to_string(i) + "]";
    TemplatePostProcessor::Piece piece;
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "") != "A") {
        return InvalidArgument(at + ": a single-sequence template can only use sequence A");
      }
      piece.is_sequence = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
               item["SpecialToken"]["id"].is_string()) {
      std::string name = item["SpecialToken"]["id"].get<std::string>();
      if (specials == spec.end() || !specials->contains(name) ||
          !(*specials)[name].contains("ids") || !(*specials)[name]["ids"].is_array()) {
        return InvalidArgument(at + ": special token '" + name +
                               "' is not in special_tokens with its ids");
      }
      for (const Json& id : (*specials)[name]["ids"]) {
        if (!id.is_number_unsigned()) return InvalidArgument(at + ": bad id for '" + name + "'");
        piece.ids.push_back(id.get<int32_t>());
      }
    } else {
      return InvalidArgument(at + ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    pieces.push_back(std::move(piece));
  }
  return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(pieces)));
}

StatusOr<std::unique_ptr<PostProcessor>> ParseSequence(const Json& spec, const std::string& where) {
  auto it = spec.find("processors");
  if (it == spec.end() || !it->is_array()) {
    return InvalidArgument(where + ".processors: expected a list");
  }
  std::vector<std::unique_ptr<PostProcessor>> steps;
  for (size_t i = 0; i < it->size(); ++i) {
    std::string at = where + ".processors[" + std::to_string(i) + "]";
    if ((*it)[i].is_null()) return InvalidArgument(at + ": expected an object");
    NS_ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> step, ParsePostProcessor((*it)[i], at));
    steps.push_back(std::move(step));
  }
  return std::unique_ptr<PostProcessor>(new SequencePostProcessor(std::move(steps)));
}

}  // namespace

StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const Json& spec,
                                                            const std::string& where) {
  if (spec.is_null()) return std::unique_ptr<PostProcessor>();
  NS_ASSIGN_OR_RETURN(std::string type, TypeField(spec, where));
  if (type == "ByteLevel") return Around({}, {});
  if (type == "TemplateProcessing") return ParseTemplate(spec, where);
  if (type == "Sequence") return ParseSequence(spec, where);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    NS_ASSIGN_OR_RETURN(int32_t cls, TokenPairId(spec, "cls", where));
    NS_ASSIGN_OR_RETURN(int32_t sep, TokenPairId(spec, "sep", where));
    return Around({cls}, {sep});
  }
  return UnsupportedType(where, type);
}

}  // namespace nightshift::tokenizer
