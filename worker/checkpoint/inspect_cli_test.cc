// Runs the built `nightshift inspect` on fixtures and corrupted copies and
// checks its output and exit codes.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/model_config.h"
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
  // A dense model: every parameter is active. All F32, none outside the groups.
  EXPECT_EQ(out["moe"], nullptr);
  EXPECT_EQ(out["parameters"], total / 4);
  EXPECT_EQ(out["active_parameters"], out["parameters"]);
}

// What a mixture of experts holds, computed here from the fixture's tensors:
// the experts each layer stores (by ExpertIndex), the dense rest, one
// expert, the widest expert slice (a layer's experts all fit in one at the
// default 256 MiB), and the parameters a token uses.
TEST(InspectCliTest, MixtureOfExpertsReportsExpertsDensePartSliceAndActiveParameters) {
  for (const char* fixture : {"qwen3-moe", "qwen2-moe", "mixtral"}) {
    SCOPED_TRACE(fixture);
    const std::string dir = FixtureDir(fixture);
    StatusOr<Checkpoint> ckpt = ReadCheckpoint(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    StatusOr<ModelConfig> config = ParseModelConfig(ckpt->config);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    const int64_t top_k = config->moe.top_k;

    std::vector<int64_t> sparse, experts_per_layer;
    std::vector<uint64_t> dense_per_layer;
    uint64_t dense = 0, largest_dense = 0, one_expert = 0, widest = 0;
    int64_t expert_parameters = 0, largest_dense_layer = 0, slice_layer = -1;
    int64_t parameters = 0, inactive = 0;
    for (const TensorGroup* group : {&ckpt->embedding, &ckpt->head}) {
      for (int i : group->tensors) parameters += ckpt->tensors[static_cast<size_t>(i)].numel();
    }
    for (const TensorGroup& layer : ckpt->layers) {
      std::map<int, std::pair<uint64_t, int64_t>> experts;  // index -> bytes, parameters
      uint64_t rest = 0;
      for (int i : layer.tensors) {
        const TensorInfo& t = ckpt->tensors[static_cast<size_t>(i)];
        parameters += t.numel();
        const int e = ExpertIndex(t.name);
        if (e < 0) {
          rest += t.size;
        } else {
          experts[e].first += t.size;
          experts[e].second += t.numel();
        }
      }
      experts_per_layer.push_back(static_cast<int64_t>(experts.size()));
      if (!experts.empty()) sparse.push_back(layer.layer);
      dense_per_layer.push_back(rest);
      dense += rest;
      if (rest > largest_dense) {
        largest_dense = rest;
        largest_dense_layer = layer.layer;
      }
      uint64_t all_experts = 0;
      for (const auto& [e, totals] : experts) {
        EXPECT_EQ(totals.first, experts.begin()->second.first) << "experts of one size";
        one_expert = std::max(one_expert, totals.first);
        expert_parameters = std::max(expert_parameters, totals.second);
        all_experts += totals.first;
      }
      if (!experts.empty()) {
        inactive += (static_cast<int64_t>(experts.size()) - top_k) * experts.begin()->second.second;
      }
      if (all_experts > widest) {
        widest = all_experts;
        slice_layer = layer.layer;
      }
    }
    ASSERT_LT(widest, uint64_t{256} << 20);  // so the layer's experts are one slice

    const CliRun run = Nightshift("inspect --model-dir " + dir + " --json");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const json out = json::parse(run.out);
    const json& moe = out["moe"];
    ASSERT_TRUE(moe.is_object()) << run.out;
    EXPECT_EQ(moe["experts"], config->moe.num_experts);
    EXPECT_EQ(moe["top_k"], top_k);
    EXPECT_EQ(moe["norm_topk_prob"], config->moe.norm_topk_prob);
    EXPECT_EQ(moe["shared_expert_intermediate_size"], config->moe.shared_expert_intermediate_size);
    EXPECT_EQ(moe["sparse_layers"], json(sparse));
    EXPECT_EQ(moe["experts_per_layer"], json(experts_per_layer));
    EXPECT_EQ(moe["dense_bytes"], dense);
    EXPECT_EQ(moe["dense_layer_bytes"], json(dense_per_layer));
    EXPECT_EQ(moe["largest_dense_layer"],
              json({{"layer", largest_dense_layer}, {"bytes", largest_dense}}));
    EXPECT_EQ(moe["expert_bytes"], one_expert);
    EXPECT_EQ(moe["expert_parameters"], expert_parameters);
    EXPECT_EQ(moe["expert_slice"], json({{"limit_bytes", uint64_t{256} << 20},
                                         {"layer", slice_layer},
                                         {"first", 0},
                                         {"end", config->moe.num_experts},
                                         {"bytes", widest},
                                         {"slices", 1}}));
    EXPECT_EQ(out["parameters"], parameters);
    EXPECT_EQ(out["active_parameters"], parameters - inactive);
    // The dense part and the experts make up the layers.
    uint64_t layers = 0;
    for (const json& bytes : out["layer_bytes"]) layers += bytes.get<uint64_t>();
    EXPECT_EQ(layers,
              dense + static_cast<uint64_t>(config->moe.num_experts) * one_expert * sparse.size());

    if (std::string(fixture) != "qwen3-moe") continue;
    // The fixture as its README describes it: layers 1 and 3 sparse, 8
    // experts of 3 F32 matrices [32, 64] / [64, 32] each, top 2.
    EXPECT_EQ(sparse, (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(experts_per_layer, (std::vector<int64_t>{0, 8, 0, 8}));
    EXPECT_EQ(expert_parameters, 3 * 32 * 64);
    EXPECT_EQ(one_expert, 3u * 32 * 64 * 4);
    EXPECT_EQ(inactive, 2 * (8 - 2) * 3 * 32 * 64);

    const CliRun text = Nightshift("inspect --model-dir " + dir);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("experts        8 per sparse layer, top 2 renormalised; sparse "
                            "layers 1, 3 of 4\n"),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find("    one expert: 24.0 KiB (24576 bytes, 6144 parameters)\n"),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find("    widest slice at 256.0 MiB: experts 0-7 of layer 1, 192.0 KiB "
                            "(196608 bytes); 1 slice in that layer\n"),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find("(" + std::to_string(parameters - inactive) + ") active per token"),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find("    layer 1: "), std::string::npos);
    EXPECT_NE(text.out.find(" tensors; 8 experts, dense "), std::string::npos) << text.out;
  }
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

// make-checkpoint's expert flags end to end: what inspect reads back from a
// generated Qwen2-MoE is what was asked.
TEST(InspectCliTest, GeneratedMixtureOfExpertsReadsBackAsAsked) {
  TempDir tmp;
  const std::string dir = tmp.file("moe");
  const CliRun made = Nightshift(
      "make-checkpoint --arch qwen2_moe --hidden 64 --layers 3 --heads 4 --kv-heads 2 "
      "--intermediate 96 --vocab 128 --experts 4 --top-k 2 --moe-intermediate 32 "
      "--shared-expert-intermediate 64 --mlp-only-layers 1 --norm-topk-prob --dtype f32 "
      "--seed 3 --quiet --out " +
      dir);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const CliRun run = Nightshift("inspect --model-dir " + dir + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json out = json::parse(run.out);
  const json& moe = out["moe"];
  EXPECT_EQ(moe["experts"], 4);
  EXPECT_EQ(moe["top_k"], 2);
  EXPECT_EQ(moe["norm_topk_prob"], true);
  EXPECT_EQ(moe["shared_expert_intermediate_size"], 64);
  EXPECT_EQ(moe["sparse_layers"], json({0, 2}));
  EXPECT_EQ(moe["experts_per_layer"], json({4, 0, 4}));
  const int64_t expert = 3 * 32 * 64;
  EXPECT_EQ(moe["expert_parameters"], expert);
  EXPECT_EQ(moe["expert_bytes"], 4 * expert);
  EXPECT_EQ(out["parameters"], out["total_bytes"].get<int64_t>() / 4);
  EXPECT_EQ(out["active_parameters"], out["parameters"].get<int64_t>() - 2 * (4 - 2) * expert);

  const CliRun refused = Nightshift(
      "make-checkpoint --arch mixtral --hidden 64 --layers 2 --heads 4 --intermediate 96 "
      "--vocab 128 --experts 4 --top-k 2 --shared-expert-intermediate 32 --seed 3 --out " +
      tmp.file("mixtral"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("model_type 'mixtral' cannot store --shared-expert-intermediate"),
            std::string::npos)
      << refused.err;
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
                          "total_bytes", "files", "active_parameters", "expert_slice"}) {
    EXPECT_NE(help.out.find(key), std::string::npos) << key;
  }
}

}  // namespace
}  // namespace nightshift::checkpoint
