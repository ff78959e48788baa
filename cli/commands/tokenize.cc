// `nightshift tokenize`: encode text to token ids, or decode ids to text, with
// a checkpoint's own tokenizer.json, exactly as HuggingFace does.
//
//   nightshift tokenize (--model-dir DIR | --tokenizer FILE) [--special] [--json]
//                       (--file PATH | -- TEXT...)
//   nightshift tokenize (--model-dir DIR | --tokenizer FILE) --decode 1,2,3
//                       [--skip-special] [--json]
//
// Plain output is the ids separated by commas (the form --decode reads) or
// the decoded text, each followed by a newline; --json prints {"ids": [...]}
// or {"text": "..."}.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/command_line.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift::cli {
namespace {

struct TokenizeFlags {
  std::string model_dir;
  std::string tokenizer;
  std::string file;
  std::string decode;
  bool special = false;
  bool skip_special = false;
  bool json = false;
};

Status CheckFlags(const CommandLine& flags, const TokenizeFlags& f) {
  if (flags.Seen("model-dir") == flags.Seen("tokenizer")) {
    return InvalidArgument("give exactly one of --model-dir and --tokenizer");
  }
  bool has_text = flags.Seen("file") || !flags.positional().empty();
  if (flags.Seen("decode")) {
    if (has_text) return InvalidArgument("--decode takes ids, not text");
    if (f.special) return InvalidArgument("--special applies to encoding; see --skip-special");
    return Status::Ok();
  }
  if (f.skip_special) return InvalidArgument("--skip-special applies to --decode");
  if (flags.Seen("file") && !flags.positional().empty()) {
    return InvalidArgument("give the text either with --file or after --, not both");
  }
  if (!has_text) return InvalidArgument("no text: give --file PATH or -- TEXT");
  return Status::Ok();
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string JoinedPositional(const std::vector<std::string>& words) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) text += (i > 0 ? " " : "") + words[i];
  return text;
}

StatusOr<std::vector<int32_t>> ParseIds(const std::string& list) {
  NS_ASSIGN_OR_RETURN(std::vector<int64_t> values, ParseIntList(list, "--decode"));
  std::vector<int32_t> ids;
  for (int64_t value : values) {
    if (value < 0 || value > INT32_MAX) {
      return InvalidArgument("--decode: " + std::to_string(value) + " is not a token id");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

Status Encode(const tokenizer::Tokenizer& tok, const CommandLine& flags, const TokenizeFlags& f) {
  std::string text = JoinedPositional(flags.positional());
  if (flags.Seen("file")) {
    NS_ASSIGN_OR_RETURN(text, ReadText(f.file));
  }
  NS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, f.special));
  if (f.json) {
    std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    return Status::Ok();
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i > 0 ? "," : "") << ids[i];
  std::cout << "\n";
  return Status::Ok();
}

Status Decode(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids,
              const TokenizeFlags& f) {
  NS_ASSIGN_OR_RETURN(std::string text, tok.Decode(ids, f.skip_special));
  if (f.json) {
    std::cout << nlohmann::json{{"text", text}}.dump() << "\n";
  } else {
    std::cout << text << "\n";
  }
  return Status::Ok();
}

int RunTokenize(int argc, char** argv) {
  TokenizeFlags f;
  CommandLine flags(
      "nightshift tokenize (--model-dir DIR | --tokenizer FILE) [--special] [--json] "
      "(--file PATH | -- TEXT)\n"
      "       nightshift tokenize (--model-dir DIR | --tokenizer FILE) --decode 1,2,3 "
      "[--skip-special] [--json]",
      "Encodes text to token ids (comma-separated) or decodes ids to text with a checkpoint's\n"
      "tokenizer.json, exactly as HuggingFace's tokenizers do. Words after -- are joined with\n"
      "single spaces; --file reads the text byte for byte.");
  flags.String("model-dir", &f.model_dir,
               "checkpoint directory (tokenizer.json, tokenizer_config.json)", "DIR");
  flags.String("tokenizer", &f.tokenizer, "a tokenizer.json file", "FILE");
  flags.String("file", &f.file, "read the text to encode from this file", "PATH");
  flags.String("decode", &f.decode, "decode these comma-separated ids instead", "IDS");
  flags.Bool("special", &f.special, "add the post-processor's special tokens (e.g. a leading <s>)");
  flags.Bool("skip-special", &f.skip_special, "with --decode: leave special tokens out");
  flags.Bool("json", &f.json, "print {\"ids\": [...]} or {\"text\": \"...\"}");
  int parsed = ParseOrExit(flags, argc, argv);
  if (parsed >= 0) return parsed;
  if (Status st = CheckFlags(flags, f); !st.ok()) return Fail("tokenize", st);
  std::vector<int32_t> ids;  // checked before the (slow) tokenizer load
  if (flags.Seen("decode")) {
    StatusOr<std::vector<int32_t>> parsed_ids = ParseIds(f.decode);
    if (!parsed_ids.ok()) return Fail("tokenize", parsed_ids.status());
    ids = std::move(parsed_ids).value();
  }

  StatusOr<tokenizer::Tokenizer> tok = flags.Seen("model-dir")
                                           ? tokenizer::Tokenizer::FromModelDir(f.model_dir)
                                           : tokenizer::Tokenizer::FromFile(f.tokenizer);
  if (!tok.ok()) return Fail("tokenize", tok.status());
  Status st = flags.Seen("decode") ? Decode(*tok, ids, f) : Encode(*tok, flags, f);
  if (!st.ok()) return Fail("tokenize", st);
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("tokenize", "encode text to token ids or decode ids, with a model's tokenizer",
                    RunTokenize);

}  // namespace nightshift::cli
