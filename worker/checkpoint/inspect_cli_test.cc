// Runs the built `nightshift inspect` on fixtures and corrupted copies and
// checks its output and exit codes.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/checkpoint/test_util.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;
using testing::FixtureDir;
using testing::ReadFileBytes;
using testing::TempDir;

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `nightshift ARGS` with stdout and stderr captured.
CliRun Nightshift(const std::string& args) {
  TempDir tmp;
  const std::string cmd = testutil::BinPath("nightshift") + " " + args + " >" + tmp.file("out") +
                          " 2>" + tmp.file("err");
  const int status = std::system(cmd.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadFileBytes(tmp.file("out"));
  run.err = ReadFileBytes(tmp.file("err"));
  return run;
}

// Sum of the data section sizes of the fixture's safetensors files.
uint64_t DataBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") {
      total += testing::SplitSafetensors(ReadFileBytes(entry.path().string())).data_size;
    }
  }
  return total;
}

TEST(InspectCliTest, JsonDescribesAShardedCheckpoint) {
  const std::string dir = FixtureDir("llama-gqa-sharded");
  const CliRun run = Nightshift("inspect --model-dir " + dir + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const json out = json::parse(run.out);
  EXPECT_EQ(out["dir"], std::filesystem::canonical(dir).string());
  EXPECT_EQ(out["model_type"], "llama");
  EXPECT_EQ(out["architecture"], "LlamaForCausalLM");
  EXPECT_EQ(out["layers"], 2);
  ASSERT_EQ(out["layer_bytes"].size(), 2u);
  EXPECT_EQ(out["layer_bytes"][0], out["layer_bytes"][1]);
  EXPECT_EQ(out["tied_embeddings"], false);
  EXPECT_EQ(out["lm_head"], "lm_head.weight");
  EXPECT_EQ(out["embedding"]["tensors"], json({"model.embed_tokens.weight"}));
  EXPECT_EQ(out["head"]["tensors"], json({"lm_head.weight", "model.norm.weight"}));
  const uint64_t total = DataBytes(dir);
  EXPECT_EQ(out["total_bytes"], total);
  EXPECT_EQ(out["dtypes"], json({{"F32", {{"tensors", 21}, {"bytes", total}}}}));
  EXPECT_EQ(out["tensors"], 21);
  ASSERT_EQ(out["files"].size(), 2u);
  EXPECT_EQ(out["files"][0]["name"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(out["files"][0]["tensors"], 10);
  EXPECT_EQ(out["files"][1]["tensors"], 11);
  const uint64_t layer = out["layer_bytes"][0];
  const uint64_t embedding = out["embedding"]["bytes"];
  const uint64_t head = out["head"]["bytes"];
  EXPECT_EQ(embedding + head + 2 * layer, total);
  EXPECT_EQ(out["largest_group"]["bytes"], std::max({layer, embedding, head}));
}

TEST(InspectCliTest, TextNamesTiedHeadAndIgnoredTensors) {
  const CliRun run = Nightshift("inspect --model-dir " + FixtureDir("llama3-tied-invfreq"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("architecture   llama (LlamaForCausalLM)\n"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("layers         2\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("lm head        tied to the embedding\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("model.layers.1.self_attn.rotary_emb.inv_freq F32 [8]"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("in 22 tensors\n"), std::string::npos) << run.out;
}

TEST(InspectCliTest, QuantizedCheckpointShowsFormatBitsGroupAndStoredBytes) {
  const std::string dir = FixtureDir("awq-int4");
  const CliRun run = Nightshift("inspect --model-dir " + dir + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json out = json::parse(run.out);
  const json& q = out["quantization"];
  EXPECT_EQ(q["format"], "awq");
  EXPECT_EQ(q["bits"], 4);
  EXPECT_EQ(q["group_size"], 32);
  EXPECT_EQ(q["modules"], 14);
  // 2 layers of q, o 128x128, k, v 64x128, gate, up, down 384x128, in BF16.
  EXPECT_EQ(q["bf16_bytes"], 2 * 2 * (2 * 16384 + 2 * 8192 + 3 * 49152));
  const uint64_t total = DataBytes(dir);
  EXPECT_EQ(out["total_bytes"], total);            // as stored
  EXPECT_EQ(out["dtypes"]["I32"]["tensors"], 28);  // qweight and qzeros of each module
  EXPECT_EQ(out["tensors"], 21);
  EXPECT_EQ(out["files"][0]["tensors"], 49);
  const uint64_t layer = out["layer_bytes"][0];
  EXPECT_EQ(uint64_t{out["embedding"]["bytes"]} + uint64_t{out["head"]["bytes"]} + 2 * layer,
            total);

  const CliRun text = Nightshift("inspect --model-dir " + dir);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("quantization   AWQ GEMM int4, group 32 (4 bits): 14 projections"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("    layer 0: 111.5 KiB (114176 bytes, 9 tensors)"), std::string::npos)
      << text.out;
}

TEST(InspectCliTest, UnsupportedQuantizationIsRefusedByName) {
  TempDir tmp;
  const std::string dir = tmp.file("gptq");
  testing::CopyFixture("gptq-int4", dir);
  json config = json::parse(ReadFileBytes(dir + "/config.json"));
  config["quantization_config"]["bits"] = 3;
  testing::WriteFileBytes(dir + "/config.json", config.dump());
  const CliRun run = Nightshift("inspect --model-dir " + dir);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("quantization_config: GPTQ with 3 bits (only 4-bit is read) is not "
                         "supported"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

TEST(InspectCliTest, CorruptCheckpointFailsWithOneLine) {
  TempDir tmp;
  const std::string dir = tmp.file("bad");
  testing::CopyFixture("llama-bf16", dir);
  // Claim one more element for the final norm than its span holds.
  const std::string path = dir + "/model.safetensors";
  const std::string bytes = ReadFileBytes(path);
  const auto split = testing::SplitSafetensors(bytes);
  json header = json::parse(split.header);
  header["model.norm.weight"]["shape"] = {65};
  testing::WriteSafetensors(path, header.dump(), 0);
  testing::WriteFileBytes(path, ReadFileBytes(path) + bytes.substr(bytes.size() - split.data_size));

  for (const char* flags : {"", " --json"}) {
    const CliRun run = Nightshift("inspect --model-dir " + dir + flags);
    EXPECT_EQ(run.exit_code, 1) << flags;
    const std::string expected = "nightshift inspect: " + path +
                                 ": tensor 'model.norm.weight': shape [65] x BF16 is 130 bytes " +
                                 "but span";
    EXPECT_EQ(run.err.rfind(expected, 0), 0u) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    if (*flags != '\0') {
      const json out = json::parse(run.out);
      EXPECT_EQ("nightshift inspect: " + out["error"].get<std::string>() + "\n", run.err);
    } else {
      EXPECT_EQ(run.out, "");
    }
  }
}

TEST(InspectCliTest, PickleOnlyIsRefusedWithTheReason) {
  TempDir tmp;
  testing::CopyFixture("mistral", tmp.file("m"));
  std::filesystem::rename(tmp.file("m/model.safetensors"), tmp.file("m/pytorch_model.bin"));
  const CliRun run = Nightshift("inspect --model-dir " + tmp.file("m"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("reading one layer of a pickle means reading the whole file"),
            std::string::npos)
      << run.err;
}

// Each run of the binary costs about a second (it links libtorch), so the
// flag parser's own cases stay in its unit tests.
TEST(InspectCliTest, UsageErrorAndHelp) {
  EXPECT_EQ(Nightshift("inspect").exit_code, 2);
  const CliRun help = Nightshift("inspect --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* key : {"layer_bytes", "largest_group", "tied_embeddings", "lm_head", "dtypes",
                          "total_bytes", "files"}) {
    EXPECT_NE(help.out.find(key), std::string::npos) << key;
  }
}

}  // namespace
}  // namespace nightshift::checkpoint
