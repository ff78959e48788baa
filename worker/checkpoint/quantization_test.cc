// Quantized checkpoints: the four fixtures read as their formats, each
// module folded with its parts; every unsupported variant refused by name;
// malformed modules refused with one-line errors; the F8_E4M3 table.
#include "worker/checkpoint/quantization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/test_util.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;
using testing::CopyFixture;
using testing::FixtureDir;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

// A writable copy of fixture `name` whose config.json `edit` changed.
std::string EditedCopy(TempDir& tmp, const std::string& name,
                       const std::function<void(json&)>& edit) {
  const std::string dir = tmp.file(name);
  CopyFixture(name, dir);
  json config = json::parse(ReadFileBytes(dir + "/config.json"));
  edit(config);
  WriteFileBytes(dir + "/config.json", config.dump(2));
  return dir;
}

// Rewrites the safetensors header of `file`: `edit` changes the JSON; the
// data section is kept and `extra` bytes appended to it.
void EditHeader(const std::string& file, const std::function<void(json&)>& edit,
                const std::string& extra = "") {
  const std::string bytes = ReadFileBytes(file);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  json header = json::parse(bytes.substr(8, length));
  edit(header);
  const std::string text = header.dump();
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  WriteFileBytes(file, out + text + bytes.substr(8 + length) + extra);
}

uint64_t DataSize(const std::string& file) {
  const std::string bytes = ReadFileBytes(file);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  return bytes.size() - 8 - length;
}

void ExpectError(const std::string& dir, StatusCode code, const std::string& needle) {
  StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_FALSE(read.ok()) << dir;
  EXPECT_EQ(read.status().code(), code) << read.status().ToString();
  EXPECT_NE(read.status().message().find(needle), std::string::npos) << read.status().ToString();
  EXPECT_EQ(read.status().message().find('\n'), std::string::npos);
}

TEST(QuantizationTest, FixturesReadAsTheirFormats) {
  struct Case {
    const char* fixture;
    QuantFormat format;
    int bits;
    const char* described;
    size_t parts;
  };
  for (const Case& c :
       {Case{"awq-int4", QuantFormat::kAwq, 4, "AWQ GEMM int4, group 32", 3},
        Case{"gptq-int4", QuantFormat::kGptq, 4, "GPTQ int4, group 32, asymmetric", 4},
        Case{"ct-fp8-channel", QuantFormat::kFp8Channel, 8,
             "compressed-tensors FP8 E4M3, per channel", 2},
        Case{"fp8-block", QuantFormat::kFp8Block, 8, "FP8 E4M3, block 128x128", 2}}) {
    StatusOr<Checkpoint> read = ReadCheckpoint(FixtureDir(c.fixture));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->quantization.format, c.format) << c.fixture;
    EXPECT_EQ(read->quantization.bits, c.bits) << c.fixture;
    EXPECT_EQ(read->quantization.Describe(), c.described);
    int quantized = 0;
    for (const TensorInfo& t : read->tensors) {
      if (!t.quant) continue;
      ++quantized;
      EXPECT_EQ(t.quant->parts.size(), c.parts) << t.name;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{t.quant->out, t.quant->in})) << t.name;
      EXPECT_EQ(t.quant->part_offsets[0], 0u);
    }
    EXPECT_EQ(quantized, 14) << c.fixture;  // 2 layers x q k v o gate up down
    // The LM head and embeddings stay unquantized.
    EXPECT_FALSE(read->tensors[read->lm_head].quant);
  }
}

TEST(QuantizationTest, AwqModuleIsFoldedWithItsPartsAndShape) {
  StatusOr<Checkpoint> read = ReadCheckpoint(FixtureDir("awq-int4"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  const TensorInfo* down = read->Find("model.layers.1.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  ASSERT_TRUE(down->quant);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{128, 384}));
  const QuantizedTensor& q = *down->quant;
  EXPECT_EQ(q.parts[0].name, "model.layers.1.mlp.down_proj.qweight");
  EXPECT_EQ(q.parts[0].shape, (std::vector<int64_t>{384, 16}));
  EXPECT_EQ(q.parts[1].name, "model.layers.1.mlp.down_proj.qzeros");
  EXPECT_EQ(q.parts[2].name, "model.layers.1.mlp.down_proj.scales");
  EXPECT_EQ(q.groups, 12);
  EXPECT_EQ(down->size, q.parts[0].size + q.parts[1].size + q.parts[2].size);
  EXPECT_EQ(read->Find("model.layers.1.mlp.down_proj.qweight"), nullptr);
}

TEST(QuantizationTest, GptqSettingsComeFromQuantizeConfigWhenConfigHasNone) {
  TempDir tmp;
  const std::string dir =
      EditedCopy(tmp, "gptq-int4", [](json& c) { c.erase("quantization_config"); });
  StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->quantization.format, QuantFormat::kGptq);
  EXPECT_EQ(read->quantization.group_size, 32);
}

struct Refusal {
  const char* name;
  const char* fixture;
  std::function<void(json&)> edit;
  const char* needle;
};

class RefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusalTest, IsRefusedByName) {
  TempDir tmp;
  const Refusal& r = GetParam();
  const std::string dir = EditedCopy(tmp, r.fixture, r.edit);
  ExpectError(dir, StatusCode::kUnimplemented, r.needle);
}

json& Q(json& c) { return c["quantization_config"]; }

INSTANTIATE_TEST_SUITE_P(
    Variants, RefusalTest,
    ::testing::Values(
        Refusal{
            "bitsandbytes", "awq-int4",
            [](json& c) {
              c["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
            },
            "quant_method 'bitsandbytes' is not supported"},
        Refusal{"exl2", "awq-int4",
                [](json& c) {
                  Q(c) = {{"quant_method", "exl2"}};
                },
                "quant_method 'exl2'"},
        Refusal{"awq_gemv", "awq-int4",
                [](json& c) {
                  Q(c)["version"] = "gemv";
                },
                "AWQ version 'gemv'"},
        Refusal{"awq_gemv_fast", "awq-int4",
                [](json& c) {
                  Q(c)["version"] = "gemv_fast";
                },
                "AWQ version 'gemv_fast'"},
        Refusal{"awq_marlin", "awq-int4",
                [](json& c) {
                  Q(c)["version"] = "marlin";
                },
                "AWQ version 'marlin'"},
        Refusal{"awq_exllama", "awq-int4",
                [](json& c) {
                  Q(c)["version"] = "exllama";
                },
                "AWQ version 'exllama'"},
        Refusal{"awq_3bit", "awq-int4",
                [](json& c) {
                  Q(c)["bits"] = 3;
                },
                "AWQ with 3 bits"},
        Refusal{"gptq_3bit", "gptq-int4",
                [](json& c) {
                  Q(c)["bits"] = 3;
                },
                "GPTQ with 3 bits"},
        Refusal{"gptq_8bit", "gptq-int4",
                [](json& c) {
                  Q(c)["bits"] = 8;
                },
                "GPTQ with 8 bits"},
        Refusal{"gptq_v2", "gptq-int4",
                [](json& c) {
                  Q(c)["checkpoint_format"] = "gptq_v2";
                },
                "GPTQ checkpoint_format 'gptq_v2'"},
        Refusal{"gptq_marlin", "gptq-int4",
                [](json& c) {
                  Q(c)["checkpoint_format"] = "marlin";
                },
                "GPTQ checkpoint_format 'marlin'"},
        Refusal{"gptq_int16_pack", "gptq-int4",
                [](json& c) {
                  Q(c)["pack_dtype"] = "int16";
                },
                "GPTQ pack_dtype 'int16'"},
        Refusal{"fp8_static_activations", "fp8-block",
                [](json& c) {
                  Q(c)["activation_scheme"] = "static";
                },
                "static activation scales (activation_scheme 'static')"},
        Refusal{"fp8_e5m2", "fp8-block",
                [](json& c) {
                  Q(c)["fmt"] = "e5m2";
                },
                "fp8 fmt 'e5m2'"},
        Refusal{"fp8_per_tensor", "fp8-block", [](json& c) { Q(c).erase("weight_block_size"); },
                "fp8 without weight_block_size"},
        Refusal{"ct_static_activations", "ct-fp8-channel",
                [](json& c) {
                  Q(c)["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
                },
                "static activation scales"},
        Refusal{"ct_int4_pack_quantized", "ct-fp8-channel",
                [](json& c) {
                  Q(c)["format"] = "pack-quantized";
                  Q(c)["config_groups"]["group_0"]["format"] = "pack-quantized";
                },
                "compressed-tensors format 'pack-quantized'"},
        Refusal{"ct_kv_cache_scales", "ct-fp8-channel",
                [](json& c) {
                  Q(c)["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
                },
                "KV-cache quantization"},
        Refusal{"ct_tensor_strategy", "ct-fp8-channel",
                [](json& c) {
                  Q(c)["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
                },
                "weight strategy 'tensor'"}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return std::string(info.param.name); });

TEST(QuantizationTest, InputScaleTensorsAreRefused) {
  TempDir tmp;
  const std::string dir = tmp.file("fp8");
  CopyFixture("fp8-block", dir);
  const std::string file = dir + "/model.safetensors";
  const uint64_t end = DataSize(file);
  EditHeader(
      file,
      [end](json& h) {
        h["model.layers.0.self_attn.q_proj.input_scale"] = {
            {"dtype", "F32"}, {"shape", json::array({1})}, {"data_offsets", {end, end + 4}}};
      },
      std::string("\0\0\x80\x3f", 4));
  ExpectError(dir, StatusCode::kUnimplemented,
              "'model.layers.0.self_attn.q_proj.input_scale': static activation");
}

// A mixture of experts without a config family (mixtral, qwen2_moe and
// qwen3_moe have one).
TEST(QuantizationTest, UnsupportedMixtureOfExpertsConfigIsRefused) {
  TempDir tmp;
  const std::string dir =
      EditedCopy(tmp, "awq-int4", [](json& c) { c["model_type"] = "deepseek_v3"; });
  StatusOr<Checkpoint> read = ReadCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status().ToString();  // the tensors are fine; the family is not
  StatusOr<ModelConfig> config = ParseModelConfig(read->config);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(config.status().message().find("mixture-of-experts"), std::string::npos);
}

TEST(QuantizationTest, IncompleteModuleIsOneLineDataLoss) {
  TempDir tmp;
  const std::string dir = tmp.file("awq");
  CopyFixture("awq-int4", dir);
  EditHeader(dir + "/model.safetensors", [](json& h) {
    h["model.layers.0.mlp.up_proj.qzeros_moved"] = h["model.layers.0.mlp.up_proj.qzeros"];
    h.erase("model.layers.0.mlp.up_proj.qzeros");
  });
  ExpectError(dir, StatusCode::kDataLoss,
              "AWQ module 'model.layers.0.mlp.up_proj' has no tensor "
              "'model.layers.0.mlp.up_proj.qzeros'");
}

TEST(QuantizationTest, OrphanScalesAreDataLoss) {
  TempDir tmp;
  const std::string dir = tmp.file("gptq");
  CopyFixture("gptq-int4", dir);
  EditHeader(dir + "/model.safetensors", [](json& h) {
    h["model.layers.0.mlp.up_proj.qweight_moved"] = h["model.layers.0.mlp.up_proj.qweight"];
    h.erase("model.layers.0.mlp.up_proj.qweight");
  });
  ExpectError(dir, StatusCode::kDataLoss,
              "'model.layers.0.mlp.up_proj.g_idx' belongs to no quantized module");
}

TEST(QuantizationTest, GroupSizeThatDisagreesWithTheScalesIsDataLoss) {
  TempDir tmp;
  const std::string dir =
      EditedCopy(tmp, "awq-int4", [](json& c) { c["quantization_config"]["group_size"] = 64; });
  ExpectError(dir, StatusCode::kDataLoss,
              "'model.layers.0.mlp.down_proj.qzeros' has shape [12, 16], expected [6, 16] (AWQ "
              "group 64 of 384 x 128)");
}

TEST(QuantizationTest, BlockSizeThatDisagreesWithTheScalesIsDataLoss) {
  TempDir tmp;
  const std::string dir = EditedCopy(tmp, "fp8-block", [](json& c) {
    c["quantization_config"]["weight_block_size"] = {64, 64};
  });
  ExpectError(dir, StatusCode::kDataLoss,
              "down_proj.weight_scale_inv' has shape [2, 3], expected [4, 6] (blocks of 64 x 64");
}

TEST(QuantizationTest, ScaleOfAnIntegerDtypeIsDataLoss) {
  TempDir tmp;
  const std::string dir = tmp.file("ct");
  CopyFixture("ct-fp8-channel", dir);
  EditHeader(dir + "/model.safetensors",
             [](json& h) { h["model.layers.1.self_attn.o_proj.weight_scale"]["dtype"] = "I16"; });
  ExpectError(dir, StatusCode::kDataLoss, "has dtype I16, expected F32, F16 or BF16");
}

TEST(QuantizationTest, Fp8E4M3TableIsExact) {
  const float* t = Fp8E4M3Table();
  EXPECT_EQ(t[0x00], 0.0f);
  EXPECT_TRUE(std::signbit(t[0x80]));
  EXPECT_EQ(t[0x01], std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(t[0x07], 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(t[0x08], std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(t[0x38], 1.0f);
  EXPECT_EQ(t[0x39], 1.125f);
  EXPECT_EQ(t[0xb8], -1.0f);
  EXPECT_EQ(t[0x40], 2.0f);
  EXPECT_EQ(t[0x7e], 448.0f);  // largest finite
  EXPECT_EQ(t[0xfe], -448.0f);
  EXPECT_TRUE(std::isnan(t[0x7f]));
  EXPECT_TRUE(std::isnan(t[0xff]));
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(t[b]) ? 1 : 0;
  EXPECT_EQ(nans, 2);  // no infinities, two NaNs
}

}  // namespace
}  // namespace nightshift::checkpoint
