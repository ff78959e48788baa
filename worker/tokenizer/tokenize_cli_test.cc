// Runs the built `nightshift tokenize` against the fixture tokenizers.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string Fixture(const std::string& path) {
  return Env("NIGHTSHIFT_TEST_DATA") + "/tokenizers/" + path;
}

std::string Quote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tokenize_cli_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Outcome Run(const std::vector<std::string>& args) {
    std::string command = Quote(Env("NIGHTSHIFT_BIN_DIR") + "/nightshift") + " tokenize";
    for (const std::string& arg : args) command += " " + Quote(arg);
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    command += " >" + Quote(out) + " 2>" + Quote(err);
    int status = std::system(command.c_str());
    Outcome outcome;
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    outcome.out = Slurp(out);
    outcome.err = Slurp(err);
    return outcome;
  }

  std::string WriteFile(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(TokenizeCli, EncodesToCommaSeparatedIds) {
  Outcome o = Run({"--tokenizer", Fixture("gpt2/tokenizer.json"), "--", "Hello", "world"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "15496,995\n");
}

TEST_F(TokenizeCli, SpecialAddsThePostProcessorTokensAndJsonPrintsAnObject) {
  Outcome plain = Run({"--model-dir", Fixture("mistral7b"), "--json", "--", "Hello world"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "{\"ids\":[22557,1526]}\n");
  Outcome special =
      Run({"--model-dir", Fixture("mistral7b"), "--special", "--json", "--", "Hello world"});
  EXPECT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(special.out, "{\"ids\":[1,22557,1526]}\n");
}

TEST_F(TokenizeCli, FileCarriesTextACommandLineCannot) {
  std::string path = WriteFile("text.txt", std::string("a\0b\r\n", 5));
  Outcome o = Run({"--tokenizer", Fixture("gpt2/tokenizer.json"), "--file", path});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  // a, NUL, b, \r, \n in GPT-2's vocab: "a"=64, "\u0100"=188, "b"=65, "\u010d"=201,
  // "\u010a"=198.
  EXPECT_EQ(o.out, "64,188,65,201,198\n");
}

TEST_F(TokenizeCli, DecodesIds) {
  Outcome o = Run({"--model-dir", Fixture("gpt2"), "--decode", "15496,995"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "Hello world\n");
  Outcome chat = Run({"--model-dir", Fixture("qwen3"), "--decode", "151644,872,198,13048,151645",
                      "--skip-special", "--json"});
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(chat.out, "{\"text\":\"user\\nHi\"}\n");
}

TEST_F(TokenizeCli, UsageErrorsExitTwo) {
  const std::string gpt2 = Fixture("gpt2");
  const std::vector<std::vector<std::string>> cases = {
      {"--", "text"},                                                             // no tokenizer
      {"--model-dir", gpt2, "--tokenizer", gpt2 + "/tokenizer.json", "--", "x"},  // both
      {"--model-dir", gpt2},                                                      // no text
      {"--model-dir", gpt2, "--decode", "1,2", "--", "x"},                        // ids and text
      {"--model-dir", gpt2, "--decode", "1,x"},                                   // bad id
      {"--model-dir", gpt2, "--decode", "-3"},                                    // negative id
      {"--model-dir", gpt2, "--skip-special", "--", "x"},  // decode-only flag
      {"--model-dir", gpt2, "--bogus"},                    // unknown flag
  };
  for (const auto& args : cases) {
    Outcome o = Run(args);
    EXPECT_EQ(o.exit_code, 2) << ::testing::PrintToString(args) << o.out;
    EXPECT_NE(o.err.find("nightshift tokenize"), std::string::npos) << o.err;
  }
}

TEST_F(TokenizeCli, InvalidUtf8IsRefusedWithTheOffset) {
  std::string path = WriteFile("bad.txt", "ok\xC3(");
  Outcome o = Run({"--model-dir", Fixture("gpt2"), "--file", path});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("invalid UTF-8"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("byte 2"), std::string::npos) << o.err;
}

TEST_F(TokenizeCli, FailuresExitOne) {
  Outcome missing_dir = Run({"--model-dir", (dir_ / "nothing").string(), "--", "x"});
  EXPECT_EQ(missing_dir.exit_code, 1);
  EXPECT_NE(missing_dir.err.find("tokenizer.json"), std::string::npos) << missing_dir.err;
  Outcome missing_file = Run({"--model-dir", Fixture("gpt2"), "--file", "/nonexistent/text"});
  EXPECT_EQ(missing_file.exit_code, 1);
  Outcome unknown_id = Run({"--model-dir", Fixture("gpt2"), "--decode", "50257"});
  EXPECT_EQ(unknown_id.exit_code, 1);
  EXPECT_NE(unknown_id.err.find("50257"), std::string::npos) << unknown_id.err;
}

TEST_F(TokenizeCli, HelpDescribesTheFlags) {
  Outcome o = Run({"--help"});
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("--decode"), std::string::npos);
  EXPECT_NE(o.out.find("--file"), std::string::npos);
}

}  // namespace
