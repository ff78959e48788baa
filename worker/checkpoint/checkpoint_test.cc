#include "worker/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
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
using testing::TempDir;
using testing::WriteFileBytes;
using testing::WriteSafetensors;

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
  EXPECT_EQ(FixtureNames(), (std::vector<std::string>{
                                "awq-int4", "ct-fp8-channel", "fp8-block", "gemma", "gpt-neox",
                                "gptq-int4", "llama-bf16", "llama-fp16", "llama-gqa-sharded",
                                "llama3-tied-invfreq", "mistral", "mixtral", "phi3", "qwen2-bias",
                                "qwen2-moe", "qwen3-moe", "qwen3-qknorm", "stories260k"}));
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
  // A quantized module's stored tensors are its folded tensor's parts.
  const bool quantized = config.contains("quantization_config");
  EXPECT_EQ(ckpt.quantization.format != QuantFormat::kNone, quantized);
  std::vector<const TensorInfo*> stored;
  std::set<const TensorInfo*> part_of;
  for (const TensorInfo& t : ckpt.tensors) {
    if (!t.quant) {
      stored.push_back(&t);
      continue;
    }
    uint64_t parts = 0;
    for (const TensorInfo& p : t.quant->parts) {
      stored.push_back(&p);
      part_of.insert(&p);
      parts += p.size;
    }
    EXPECT_EQ(t.size, parts) << t.name;
  }
  EXPECT_EQ(stored.size(), e.tensors);
  EXPECT_EQ(ckpt.total_bytes, e.data_bytes);  // fixtures pack spans with no gaps
  EXPECT_EQ(ckpt.layers.size(), config["num_hidden_layers"].get<size_t>());
  EXPECT_EQ(ckpt.tied_embeddings, !e.has_lm_head);
  if (e.has_lm_head) {
    const std::string& lm_head = ckpt.tensors.at(ckpt.lm_head).name;
    EXPECT_TRUE(lm_head == "lm_head.weight" || lm_head == "embed_out.weight") << lm_head;
  } else {
    EXPECT_EQ(ckpt.lm_head, -1);
  }
  EXPECT_EQ(ckpt.tied_embeddings, config["tie_word_embeddings"].get<bool>());
  if (!quantized) {
    EXPECT_EQ(e.dtypes, std::set<std::string>{TorchDTypeToSafetensors(config["torch_dtype"])});
  }
  EXPECT_TRUE(ckpt.generation_config.is_null());

  for (const TensorInfo* stored_tensor : stored) {
    const TensorInfo& t = *stored_tensor;
    ASSERT_EQ(e.spans.count(t.name), 1u) << t.name;
    EXPECT_EQ(t.offset, e.spans.at(t.name).first) << t.name;
    EXPECT_EQ(t.offset + t.size, e.spans.at(t.name).second) << t.name;
    EXPECT_EQ(static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype), t.size) << t.name;
    if (!part_of.count(&t)) {
      EXPECT_EQ(ckpt.Find(t.name), &t);
    }
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
    // Every layer of a dense fixture holds the same tensors (bar the
    // index); a mixture of experts' dense and sparse layers differ.
    const std::string type = ckpt.ModelType();
    if (type != "qwen2_moe" && type != "qwen3_moe") {
      EXPECT_EQ(ckpt.layers[i].tensors.size(), ckpt.layers[0].tensors.size());
      EXPECT_EQ(ckpt.layers[i].bytes, ckpt.layers[0].bytes);
    }
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

// A checkpoint with the given tensors (name -> {"dtype", "shape"}), packed
// into one model.safetensors, written into `dir`.
void WriteSynthetic(const std::string& dir, const json& tensors) {
  uint64_t data_size = 0;
  const std::string header = testing::PackedHeader(tensors, &data_size);
  WriteFileBytes(dir + "/config.json", R"({"model_type": "synthetic"})");
  WriteSafetensors(dir + "/model.safetensors", header, data_size);
}

json F32(std::vector<int64_t> shape) { return {{"dtype", "F32"}, {"shape", shape}}; }

std::vector<std::string> Names(const Checkpoint& ckpt, const TensorGroup& g) {
  std::vector<std::string> names;
  for (int i : g.tensors) names.push_back(ckpt.tensors[i].name);
  return names;
}

TEST(GroupingTest, Gpt2Names) {
  TempDir tmp;
  WriteSynthetic(tmp.path(), {{"transformer.wte.weight", F32({16, 4})},
                              {"transformer.wpe.weight", F32({8, 4})},
                              {"transformer.h.0.attn.c_attn.weight", F32({4, 12})},
                              {"transformer.h.0.ln_1.weight", F32({4})},
                              {"transformer.h.1.attn.c_attn.weight", F32({4, 12})},
                              {"transformer.h.1.ln_1.weight", F32({4})},
                              {"transformer.ln_f.weight", F32({4})},
                              {"transformer.ln_f.bias", F32({4})}});
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(Names(*ckpt, ckpt->embedding),
            (std::vector<std::string>{"transformer.wpe.weight", "transformer.wte.weight"}));
  EXPECT_EQ(ckpt->embedding.bytes, (16 * 4 + 8 * 4) * 4u);
  ASSERT_EQ(ckpt->layers.size(), 2u);
  EXPECT_EQ(Names(*ckpt, ckpt->layers[1]),
            (std::vector<std::string>{"transformer.h.1.attn.c_attn.weight",
                                      "transformer.h.1.ln_1.weight"}));
  EXPECT_EQ(ckpt->layers[1].bytes, (4 * 12 + 4) * 4u);
  EXPECT_EQ(Names(*ckpt, ckpt->head),
            (std::vector<std::string>{"transformer.ln_f.bias", "transformer.ln_f.weight"}));
  EXPECT_TRUE(ckpt->tied_embeddings);
  EXPECT_TRUE(ckpt->other.tensors.empty());
  EXPECT_EQ(ckpt->LargestGroupBytes(), ckpt->embedding.bytes);
}

TEST(GroupingTest, BareGpt2NamesAndUnknownTensors) {
  TempDir tmp;
  WriteSynthetic(tmp.path(), {{"wte.weight", F32({16, 4})},
                              {"h.0.attn.bias", F32({1, 1, 8, 8})},
                              {"h.0.mlp.c_fc.weight", F32({4, 16})},
                              {"ln_f.weight", F32({4})},
                              {"lm_head.weight", F32({16, 4})},
                              {"model.rotary_emb.inv_freq", F32({2})},
                              {"score.weight", F32({2, 4})}});
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(Names(*ckpt, ckpt->embedding), (std::vector<std::string>{"wte.weight"}));
  ASSERT_EQ(ckpt->layers.size(), 1u);
  EXPECT_EQ(Names(*ckpt, ckpt->layers[0]),
            (std::vector<std::string>{"h.0.attn.bias", "h.0.mlp.c_fc.weight"}));
  EXPECT_EQ(Names(*ckpt, ckpt->head), (std::vector<std::string>{"lm_head.weight", "ln_f.weight"}));
  EXPECT_FALSE(ckpt->tied_embeddings);
  EXPECT_EQ(ckpt->tensors[ckpt->lm_head].name, "lm_head.weight");
  EXPECT_EQ(Names(*ckpt, ckpt->other),
            (std::vector<std::string>{"model.rotary_emb.inv_freq", "score.weight"}));
  EXPECT_EQ(ckpt->total_bytes, (64 + 64 + 64 + 4 + 64 + 2 + 8) * 4u);
}

TEST(CheckpointTest, SymlinksInsideTheDirectoryAreFollowed) {
  TempDir tmp;
  testing::CopyFixture("llama-gqa-sharded", tmp.file("m"));
  std::filesystem::create_directory(tmp.file("m/blobs"));
  std::filesystem::rename(tmp.file("m/" + std::string("model-00001-of-00002.safetensors")),
                          tmp.file("m/blobs/abc"));
  std::filesystem::create_symlink("blobs/abc", tmp.file("m/model-00001-of-00002.safetensors"));
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(tmp.file("m"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->files[0].name, "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt->files[0].path, ckpt->dir + "/blobs/abc");
}

TEST(GroupingTest, ReadsGenerationConfig) {
  TempDir tmp;
  WriteSynthetic(tmp.path(), {{"model.layers.0.w", F32({2})}});
  WriteFileBytes(tmp.file("generation_config.json"), R"({"eos_token_id": [1, 2]})");
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->generation_config["eos_token_id"], json({1, 2}));
  EXPECT_EQ(ckpt->ModelType(), "synthetic");
}

// ---------------------------------------------------------------------------
// ParseSafetensorsHeader on its own.

TEST(HeaderTest, SortsByOffsetAndAllowsEmptyTensorsAndGaps) {
  const std::string header = R"({
    "__metadata__": {"format": "pt"},
    "b": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [16, 28]},
    "a": {"dtype": "I64", "shape": [], "data_offsets": [-0, 8]},
    "empty1": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]},
    "empty2": {"dtype": "F16", "shape": [0], "data_offsets": [4, 4]}
  })";
  StatusOr<std::vector<TensorInfo>> tensors = ParseSafetensorsHeader(header, 40, "f");
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 4u);
  EXPECT_EQ((*tensors)[0].name, "a");
  EXPECT_EQ((*tensors)[0].numel(), 1);
  EXPECT_EQ((*tensors)[0].dtype, DType::kI64);
  EXPECT_EQ((*tensors)[3].name, "b");
  EXPECT_EQ((*tensors)[3].offset, 16u);
  EXPECT_EQ((*tensors)[3].size, 12u);
  EXPECT_EQ((*tensors)[3].shape, (std::vector<int64_t>{2, 3}));
}

TEST(HeaderTest, EveryDTypeRoundTrips) {
  for (DType d :
       {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
        DType::kI64, DType::kI32, DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
    StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << DTypeName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(ParseDType("F4").status().message(), "unsupported dtype 'F4'");
}

TEST(HeaderTest, NestedDuplicateKeysAreNotTopLevelDuplicates) {
  const std::string header =
      R"({"__metadata__": {"k": "1"}, "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1],
          "extra": {"k": 1, "k": 2}}})";
  StatusOr<std::vector<TensorInfo>> tensors = ParseSafetensorsHeader(header, 1, "f");
  EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
}

TEST(HeaderTest, NamesAreQuotedOnOneLine) {
  const std::string header =
      "{\"bad\\nname\": {\"dtype\": \"F4\", \"shape\": [1], "
      "\"data_offsets\": [0, 1]}}";
  StatusOr<std::vector<TensorInfo>> tensors = ParseSafetensorsHeader(header, 1, "f.safetensors");
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().message(),
            "f.safetensors: tensor 'bad\\x0aname': unsupported dtype 'F4'");
}

// ---------------------------------------------------------------------------
// Corrupted copies: each validation rule gives its own error.

// Rewrites the header of the safetensors file at `path` through `edit`,
// keeping its data section.
template <typename Edit>
void EditHeaderText(const std::string& path, Edit edit) {
  const std::string bytes = ReadFileBytes(path);
  testing::SplitFile split = SplitSafetensors(bytes);
  edit(split.header);
  const std::string data = bytes.substr(bytes.size() - split.data_size);
  WriteSafetensors(path, split.header, 0);
  WriteFileBytes(path, ReadFileBytes(path) + data);
}

template <typename Edit>
void EditHeader(const std::string& path, Edit edit) {
  EditHeaderText(path, [&](std::string& text) {
    json header = json::parse(text);
    edit(header);
    text = header.dump();
  });
}

// Sets one field of one tensor of the single-file fixture copy in `dir`.
void SetField(const std::string& dir, const std::string& tensor, const std::string& field,
              const json& value) {
  EditHeader(dir + "/model.safetensors", [&](json& h) { h[tensor][field] = value; });
}

template <typename Edit>
void EditIndex(const std::string& dir, Edit edit) {
  const std::string path = dir + "/model.safetensors.index.json";
  json index = json::parse(ReadFileBytes(path));
  edit(index["weight_map"]);
  WriteFileBytes(path, index.dump());
}

constexpr char kSingle[] = "llama-bf16";
constexpr char kSharded[] = "llama-gqa-sharded";
constexpr char kNorm[] = "model.norm.weight";  // BF16 [64] in llama-bf16
constexpr char kShard2[] = "model-00002-of-00002.safetensors";

struct Corruption {
  const char* name;
  const char* fixture;  // copied into the temp dir first; "" for none
  std::function<void(const std::string& dir)> corrupt;
  const char* expect;  // a substring only this case's message has
  StatusCode code = StatusCode::kDataLoss;
  const char* names_file = "";    // file the message must name, if any
  const char* names_tensor = "";  // tensor the message must name, if any
  ReadOptions options = {};
};

void PrintTo(const Corruption& c, std::ostream* out) { *out << c.name; }

std::vector<Corruption> Corruptions() {
  auto shard_header = [](auto edit) {
    return [edit](const std::string& dir) { EditHeader(dir + "/" + kShard2, edit); };
  };
  ReadOptions small_cap;
  small_cap.max_header_bytes = 1000;
  return {
      {"missing_directory", "", [](const std::string& dir) { std::filesystem::remove_all(dir); },
       "no such directory", StatusCode::kNotFound},
      {"no_config", kSingle,
       [](const std::string& dir) { std::filesystem::remove(dir + "/config.json"); },
       "config.json: no such file", StatusCode::kNotFound, "config.json"},
      {"config_not_json", kSingle,
       [](const std::string& dir) { WriteFileBytes(dir + "/config.json", "{\"model_type\": "); },
       "/config.json: not valid JSON", StatusCode::kDataLoss, "config.json"},
      {"config_not_object", kSingle,
       [](const std::string& dir) { WriteFileBytes(dir + "/config.json", "[1, 2]"); },
       "/config.json: not a JSON object", StatusCode::kDataLoss, "config.json"},
      {"generation_config_not_object", kSingle,
       [](const std::string& dir) { WriteFileBytes(dir + "/generation_config.json", "3"); },
       "generation_config.json: not a JSON object", StatusCode::kDataLoss,
       "generation_config.json"},
      {"pickle_only", kSingle,
       [](const std::string& dir) {
         std::filesystem::rename(dir + "/model.safetensors", dir + "/pytorch_model.bin");
       },
       "reading one layer of a pickle means reading the whole file", StatusCode::kUnimplemented},
      {"no_weights", kSingle,
       [](const std::string& dir) { std::filesystem::remove(dir + "/model.safetensors"); },
       "no model.safetensors or model.safetensors.index.json", StatusCode::kNotFound},
      {"index_without_weight_map", kSharded,
       [](const std::string& dir) {
         WriteFileBytes(dir + "/model.safetensors.index.json", R"({"metadata": {}})");
       },
       "no weight_map object", StatusCode::kDataLoss, "model.safetensors.index.json"},
      {"index_entry_not_string", kSharded,
       [](const std::string& dir) { EditIndex(dir, [](json& m) { m[kNorm] = 7; }); },
       "weight_map entry is not a string", StatusCode::kDataLoss, "model.safetensors.index.json",
       kNorm},
      {"index_dotdot", kSharded,
       [](const std::string& dir) {
         EditIndex(dir, [](json& m) { m[kNorm] = "../model-00002-of-00002.safetensors"; });
       },
       "climbs out of the directory", StatusCode::kDataLoss, "model.safetensors.index.json"},
      {"index_absolute", kSharded,
       [](const std::string& dir) {
         EditIndex(dir, [&](json& m) { m[kNorm] = dir + "/" + kShard2; });
       },
       "is not a relative path", StatusCode::kDataLoss, "model.safetensors.index.json"},
      {"index_symlink_escape", kSharded,
       [](const std::string& dir) {
         // A link inside the directory to a file outside it.
         const std::string outside = dir + "-outside.safetensors";
         std::filesystem::rename(dir + "/" + kShard2, outside);
         std::filesystem::create_symlink(outside, dir + "/" + kShard2);
       },
       "outside the checkpoint directory", StatusCode::kDataLoss, "model.safetensors.index.json"},
      {"index_missing_file", kSharded,
       [](const std::string& dir) { std::filesystem::remove(dir + "/" + kShard2); },
       "which does not exist", StatusCode::kNotFound, kShard2},
      {"weights_not_a_file", kSingle,
       [](const std::string& dir) {
         std::filesystem::remove(dir + "/model.safetensors");
         ASSERT_EQ(mkfifo((dir + "/model.safetensors").c_str(), 0600), 0);
       },
       "not a regular file", StatusCode::kDataLoss, "model.safetensors"},
      {"file_too_short", kSingle,
       [](const std::string& dir) { WriteFileBytes(dir + "/model.safetensors", "abc"); },
       "too short for a safetensors header", StatusCode::kDataLoss, "model.safetensors"},
      {"header_past_file", kSingle,
       [](const std::string& dir) {
         WriteFileBytes(dir + "/model.safetensors", std::string("\x00\x01\0\0\0\0\0\0{}", 10));
       },
       "runs past the end of the file", StatusCode::kDataLoss, "model.safetensors"},
      {"header_over_cap", kSingle, [](const std::string&) {}, "over the cap of 1000",
       StatusCode::kDataLoss, "model.safetensors", "", small_cap},
      {"header_not_json", kSingle,
       [](const std::string& dir) {
         EditHeaderText(dir + "/model.safetensors", [](std::string& h) { h.insert(1, "#"); });
       },
       "header is not valid JSON (syntax error at byte", StatusCode::kDataLoss,
       "model.safetensors"},
      {"header_not_object", kSingle,
       [](const std::string& dir) {
         EditHeaderText(dir + "/model.safetensors", [](std::string& h) { h = "[1, 2, 3]"; });
       },
       "header is not a JSON object", StatusCode::kDataLoss, "model.safetensors"},
      {"duplicate_tensor", kSingle,
       [](const std::string& dir) {
         EditHeaderText(dir + "/model.safetensors", [](std::string& h) {
           h.insert(
               1,
               R"("model.norm.weight": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}, )");
         });
       },
       "'model.norm.weight' appears twice", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"metadata_not_strings", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) { h["__metadata__"]["n"] = 1; });
       },
       "__metadata__ 'n' is not a string", StatusCode::kDataLoss, "model.safetensors"},
      {"entry_not_object", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) { h[kNorm] = "x"; });
       },
       "entry is not an object", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"no_dtype", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) { h[kNorm].erase("dtype"); });
       },
       "no dtype", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"dtype_not_string", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "dtype", 16); }, "dtype is not a string",
       StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"unknown_dtype", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "dtype", "F4"); },
       "unsupported dtype 'F4'", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"no_shape", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) { h[kNorm].erase("shape"); });
       },
       "no shape", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"shape_not_array", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "shape", 64); }, "shape is not an array",
       StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"negative_shape", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "shape", {-64}); }, "shape[0] is negative",
       StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"fractional_shape", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "shape", {64.5}); },
       "shape[0] is not an integer", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"huge_dimension", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "shape", {1ull << 63}); },
       "shape[0] 9223372036854775808 is too large", StatusCode::kDataLoss, "model.safetensors",
       kNorm},
      {"overflowing_shape", kSingle,
       [](const std::string& dir) {
         SetField(dir, kNorm, "shape", {1ll << 32, 1ll << 31});  // x 2 bytes = 2^64
       },
       "shape overflows 64 bits at shape[1]", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"no_offsets", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) { h[kNorm].erase("data_offsets"); });
       },
       "no data_offsets", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"offsets_not_pair", kSingle,
       [](const std::string& dir) {
         SetField(dir, kNorm, "data_offsets", {0, 128, 256});
       },
       "data_offsets is not [begin, end]", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"negative_offset", kSingle,
       [](const std::string& dir) {
         SetField(dir, kNorm, "data_offsets", {-128, 0});
       },
       "data_offsets begin is negative", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"end_before_begin", kSingle,
       [](const std::string& dir) {
         SetField(dir, kNorm, "data_offsets", {128, 0});
       },
       "end before begin", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"span_size_mismatch", kSingle,
       [](const std::string& dir) { SetField(dir, kNorm, "shape", {63}); },
       "shape [63] x BF16 is 126 bytes but span", StatusCode::kDataLoss, "model.safetensors",
       kNorm},
      {"span_past_data", kSingle,
       [](const std::string& dir) {
         SetField(dir, kNorm, "data_offsets", {283264 - 64, 283264 + 64});
       },
       "runs past the data section (283264 bytes)", StatusCode::kDataLoss, "model.safetensors",
       kNorm},
      {"overlap", kSingle,
       [](const std::string& dir) {
         SetField(dir, kNorm, "data_offsets", {64, 192});
       },
       "overlaps", StatusCode::kDataLoss, "model.safetensors", kNorm},
      {"index_lists_absent_tensor", kSharded,
       [](const std::string& dir) {
         EditIndex(dir, [](json& m) { m["model.extra.weight"] = kShard2; });
       },
       "'model.extra.weight' is listed under 'model-00002-of-00002.safetensors', which does not "
       "hold it",
       StatusCode::kDataLoss, "model.safetensors.index.json", "model.extra.weight"},
      {"file_holds_unlisted_tensor", kSharded,
       [](const std::string& dir) { EditIndex(dir, [](json& m) { m.erase(kNorm); }); },
       "'model.norm.weight' is not listed in model.safetensors.index.json", StatusCode::kDataLoss,
       kShard2, kNorm},
      {"tensor_in_wrong_file", kSharded,
       [](const std::string& dir) {
         EditIndex(dir, [](json& m) { m[kNorm] = "model-00001-of-00002.safetensors"; });
       },
       "is listed in model.safetensors.index.json under 'model-00001-of-00002.safetensors'",
       StatusCode::kDataLoss, kShard2, kNorm},
      {"tensor_in_two_files", kSharded, shard_header([](json& h) {
         h["model.embed_tokens.weight"] = {
             {"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
       }),
       "is in both 'model-00001-of-00002.safetensors' and 'model-00002-of-00002.safetensors'",
       StatusCode::kDataLoss, "", "model.embed_tokens.weight"},
      {"layer_gap", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) {
           for (const char* suffix :
                {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
             h[std::string("model.layers.3.") + suffix] =
                 h[std::string("model.layers.1.") + suffix];
             h.erase(std::string("model.layers.1.") + suffix);
           }
         });
       },
       "decoder layer 2 has no tensors, but layer 3 has", StatusCode::kDataLoss},
      {"layer_index_too_large", kSingle,
       [](const std::string& dir) {
         EditHeader(dir + "/model.safetensors", [](json& h) {
           h["model.layers.12345678901.w"] = h[kNorm];
           h.erase(kNorm);
         });
       },
       "layer index too large", StatusCode::kDataLoss, "", "model.layers.12345678901.w"},
  };
}

class CorruptionTest : public ::testing::TestWithParam<Corruption> {};

StatusOr<Checkpoint> ReadCorrupted(const Corruption& c, const TempDir& tmp) {
  const std::string dir = tmp.file("model");
  if (*c.fixture != '\0') testing::CopyFixture(c.fixture, dir);
  c.corrupt(dir);
  return ReadCheckpoint(dir, c.options);
}

TEST_P(CorruptionTest, GivesItsOwnOneLineError) {
  const Corruption& c = GetParam();
  TempDir tmp;
  StatusOr<Checkpoint> read = ReadCorrupted(c, tmp);
  ASSERT_FALSE(read.ok());
  const std::string& message = read.status().message();
  EXPECT_NE(message.find(c.expect), std::string::npos) << message;
  EXPECT_EQ(read.status().code(), c.code) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind(tmp.file("model"), 0), 0u) << message;  // names the checkpoint
  EXPECT_NE(message.find(c.names_file), std::string::npos) << message;
  if (*c.names_tensor != '\0') {
    EXPECT_NE(message.find("tensor '" + std::string(c.names_tensor) + "'"), std::string::npos)
        << message;
  }
}

TEST(CorruptionTest, EveryRuleHasADistinctMessage) {
  std::vector<std::string> messages;
  for (const Corruption& c : Corruptions()) {
    TempDir tmp;
    StatusOr<Checkpoint> read = ReadCorrupted(c, tmp);
    ASSERT_FALSE(read.ok()) << c.name;
    messages.push_back(read.status().message());
  }
  const std::vector<Corruption> cases = Corruptions();
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t j = 0; j < cases.size(); ++j) {
      if (i == j) continue;
      EXPECT_EQ(messages[j].find(cases[i].expect), std::string::npos)
          << cases[i].name << "'s text also appears for " << cases[j].name << ": " << messages[j];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, CorruptionTest, ::testing::ValuesIn(Corruptions()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace nightshift::checkpoint
