#include "worker/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "worker/checkpoint/test_util.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;
using testing::FixtureDir;
using testing::FixtureNames;
using testing::ReadFileBytes;
using testing::SplitSafetensors;

// What the test computes itself from a fixture's files, without the reader.
struct Expected {
  size_t tensors = 0;
  uint64_t data_bytes = 0;  // sum over files of the data section sizes
  std::set<std::string> dtypes;
  bool has_lm_head = false;
  std::map<std::string, std::pair<uint64_t, uint64_t>> spans;  // name -> absolute [begin, end)
};

Expected Independently(const std::string& dir, const std::vector<std::string>& files) {
  Expected e;
  for (const std::string& f : files) {
    const std::string bytes = ReadFileBytes(dir + "/" + f);
    const auto split = SplitSafetensors(bytes);
    const uint64_t base = 8 + split.header.size();
    e.data_bytes += split.data_size;
    const json header = json::parse(split.header);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      ++e.tensors;
      e.dtypes.insert(entry["dtype"].get<std::string>());
      e.spans[name] = {base + entry["data_offsets"][0].get<uint64_t>(),
                       base + entry["data_offsets"][1].get<uint64_t>()};
      if (name == "lm_head.weight" || name == "embed_out.weight") e.has_lm_head = true;
    }
  }
  return e;
}

const char* TorchDTypeToSafetensors(const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return "BF16";
  if (torch_dtype == "float16") return "F16";
  return "F32";
}

TEST(CheckpointTest, FixturesAreAllPresent) {
  EXPECT_EQ(FixtureNames(),
            (std::vector<std::string>{"gemma", "gpt-neox", "llama-bf16", "llama-fp16",
                                      "llama-gqa-sharded", "llama3-tied-invfreq", "mistral", "phi3",
                                      "qwen2-bias", "qwen3-qknorm", "stories260k"}));
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, ReadsWhatTheFilesHold) {
  const std::string dir = FixtureDir(GetParam());
  StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  const Checkpoint& ckpt = *read;

  std::vector<std::string> names;
  for (const FileInfo& f : ckpt.files) names.push_back(f.name);
  const Expected e = Independently(dir, names);
  const json config = json::parse(ReadFileBytes(dir + "/config.json"));

  EXPECT_EQ(ckpt.ModelType(), config["model_type"].get<std::string>());
  EXPECT_EQ(ckpt.tensors.size(), e.tensors);
  EXPECT_EQ(ckpt.total_bytes, e.data_bytes);  // fixtures pack spans with no gaps
  EXPECT_EQ(ckpt.layers.size(), config["num_hidden_layers"].get<size_t>());
  EXPECT_EQ(ckpt.tied_embeddings, !e.has_lm_head);
  EXPECT_EQ(ckpt.tied_embeddings, config["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(e.dtypes, std::set<std::string>{TorchDTypeToSafetensors(config["torch_dtype"])});
  EXPECT_TRUE(ckpt.generation_config.is_null());

  for (const TensorInfo& t : ckpt.tensors) {
    ASSERT_EQ(e.spans.count(t.name), 1u) << t.name;
    EXPECT_EQ(t.offset, e.spans.at(t.name).first) << t.name;
    EXPECT_EQ(t.offset + t.size, e.spans.at(t.name).second) << t.name;
    EXPECT_EQ(static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype), t.size) << t.name;
    EXPECT_EQ(ckpt.Find(t.name), &t);
    EXPECT_GE(t.offset, ckpt.files[t.file].data_offset);
    EXPECT_LE(t.offset + t.size, ckpt.files[t.file].size);
  }
  EXPECT_EQ(ckpt.Find("no.such.tensor"), nullptr);
}

TEST_P(FixtureTest, GroupsPartitionTheTensors) {
  StatusOr<Checkpoint> read = ReadCheckpoint(FixtureDir(GetParam()));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  const Checkpoint& ckpt = *read;

  std::vector<int> seen(ckpt.tensors.size(), 0);
  uint64_t grouped_bytes = 0;
  auto visit = [&](const TensorGroup& g) {
    uint64_t bytes = 0;
    for (int i : g.tensors) {
      ++seen[i];
      bytes += ckpt.tensors[i].size;
    }
    EXPECT_EQ(g.bytes, bytes);
    EXPECT_TRUE(std::is_sorted(g.tensors.begin(), g.tensors.end()));
    grouped_bytes += bytes;
  };
  visit(ckpt.embedding);
  visit(ckpt.head);
  visit(ckpt.other);
  uint64_t largest = std::max(ckpt.embedding.bytes, ckpt.head.bytes);
  for (size_t i = 0; i < ckpt.layers.size(); ++i) {
    EXPECT_EQ(ckpt.layers[i].layer, static_cast<int>(i));
    EXPECT_EQ(ckpt.layers[i].kind, TensorGroup::Kind::kLayer);
    // Every layer of these fixtures holds the same tensors (bar the index).
    EXPECT_EQ(ckpt.layers[i].tensors.size(), ckpt.layers[0].tensors.size());
    EXPECT_EQ(ckpt.layers[i].bytes, ckpt.layers[0].bytes);
    visit(ckpt.layers[i]);
    largest = std::max(largest, ckpt.layers[i].bytes);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size()));
  EXPECT_EQ(grouped_bytes, ckpt.total_bytes);
  EXPECT_EQ(ckpt.LargestGroupBytes(), largest);
  EXPECT_EQ(ckpt.embedding.tensors.size(), 1u);
  // Final norm (weight, plus bias for LayerNorm), plus the LM head if untied.
  const bool layer_norm = ckpt.ModelType() == "gpt_neox";
  EXPECT_EQ(ckpt.head.tensors.size(), (layer_norm ? 2u : 1u) + (ckpt.tied_embeddings ? 0u : 1u));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest, ::testing::ValuesIn(FixtureNames()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(CheckpointTest, ShardedFixtureHasTwoFilesInOrder) {
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(FixtureDir("llama-gqa-sharded"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ(ckpt->files.size(), 2u);
  EXPECT_EQ(ckpt->files[0].name, "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt->files[1].name, "model-00002-of-00002.safetensors");
  EXPECT_EQ(ckpt->files[1].path, ckpt->dir + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(ckpt->Find("lm_head.weight")->file, 1);
  EXPECT_EQ(ckpt->Find("model.embed_tokens.weight")->file, 0);
}

TEST(CheckpointTest, RotaryTablesGoToOther) {
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(FixtureDir("llama3-tied-invfreq"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ(ckpt->other.tensors.size(), 2u);
  EXPECT_EQ(ckpt->tensors[ckpt->other.tensors[0]].name,
            "model.layers.0.self_attn.rotary_emb.inv_freq");
  EXPECT_EQ(ckpt->tensors[ckpt->other.tensors[1]].name,
            "model.layers.1.self_attn.rotary_emb.inv_freq");
  EXPECT_TRUE(ckpt->tied_embeddings);
}

TEST(CheckpointTest, GptNeoxNames) {
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(FixtureDir("gpt-neox"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->tensors[ckpt->embedding.tensors[0]].name, "gpt_neox.embed_in.weight");
  std::set<std::string> head;
  for (int i : ckpt->head.tensors) head.insert(ckpt->tensors[i].name);
  EXPECT_EQ(head, (std::set<std::string>{"embed_out.weight", "gpt_neox.final_layer_norm.bias",
                                         "gpt_neox.final_layer_norm.weight"}));
  EXPECT_FALSE(ckpt->tied_embeddings);
}

}  // namespace
}  // namespace nightshift::checkpoint
