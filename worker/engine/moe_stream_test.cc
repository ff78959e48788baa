// Mixtures of experts streamed from generated checkpoints: a pass reads the
// experts its rows route to and no others (a decode pass of one sequence
// little more than the dense part and k experts a layer; a long prompt every
// expert once), with the tokens of reading them all; and a layer of experts
// larger than twice a memory cgroup runs inside it (expert slices).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/paths.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"
#include "worker/generator/generator.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::ReadFileBytes;
using checkpoint::testing::TempDir;
using testing::Drain;
using testing::GreedyRequest;
using testing::OpenEngine;

generator::CheckpointSpec Qwen3Moe(int64_t hidden, int64_t layers, int64_t experts,
                                   int64_t expert_width) {
  generator::CheckpointSpec spec;
  spec.arch = "qwen3_moe";
  spec.hidden = hidden;
  spec.layers = layers;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.intermediate = 2 * expert_width;
  spec.vocab = 512;
  spec.experts = experts;
  spec.top_k = 8;
  spec.moe_intermediate = expert_width;
  spec.norm_topk_prob = true;
  spec.dtype = checkpoint::DType::kBF16;
  spec.seed = 5;
  return spec;
}

checkpoint::Checkpoint Write(const generator::CheckpointSpec& spec, const std::string& dir) {
  StatusOr<generator::WriteReport> wrote = generator::WriteCheckpoint(spec, dir);
  EXPECT_TRUE(wrote.ok()) << wrote.status().ToString();
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  return ckpt.ok() ? std::move(ckpt).value() : checkpoint::Checkpoint();
}

struct Bytes {
  uint64_t dense = 0;   // every tensor but the experts and the embedding
  uint64_t expert = 0;  // one expert (the largest)
  uint64_t embedding_row = 0;
  int64_t sparse_layers = 0;
};

Bytes BytesOf(const checkpoint::Checkpoint& ckpt) {
  Bytes b;
  for (const checkpoint::TensorGroup& layer : ckpt.layers) {
    std::map<int, uint64_t> experts;
    for (int t : layer.tensors) {
      const checkpoint::TensorInfo& info = ckpt.tensors[static_cast<size_t>(t)];
      const int e = checkpoint::ExpertIndex(info.name);
      if (e < 0) {
        b.dense += info.size;
      } else {
        experts[e] += info.size;
      }
    }
    for (const auto& [e, bytes] : experts) b.expert = std::max(b.expert, bytes);
    b.sparse_layers += !experts.empty();
  }
  b.dense += ckpt.head.bytes;
  const checkpoint::TensorInfo* embedding = ckpt.Find("model.embed_tokens.weight");
  b.embedding_row = embedding->size / static_cast<uint64_t>(embedding->shape[0]);
  return b;
}

class MoeReadsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    // 64 experts of 256 (top 8) in each of 3 layers: 24 MB of experts a layer.
    ckpt_ = new checkpoint::Checkpoint(Write(Qwen3Moe(256, 3, 64, 256), tmp_->file("moe")));
  }
  static void TearDownTestSuite() {
    delete ckpt_;
    delete tmp_;
  }

  static std::vector<PassStats> Run(const EngineOptions& options, int64_t prompt_tokens,
                                    int64_t new_tokens, std::vector<SequenceResult>* results) {
    EngineOptions o = options;
    o.threads = 1;
    std::unique_ptr<Engine> engine = OpenEngine(tmp_->file("moe"), o);
    std::vector<PassStats> passes;
    if (engine == nullptr) return passes;
    std::vector<TokenId> prompt;
    for (int64_t t = 0; t < prompt_tokens; ++t) prompt.push_back(1 + (t * 37) % 500);
    EXPECT_TRUE(engine->Add(GreedyRequest(prompt, new_tokens)).ok());
    *results = Drain(*engine, &passes);
    return passes;
  }

  static TempDir* tmp_;
  static checkpoint::Checkpoint* ckpt_;
};
TempDir* MoeReadsTest::tmp_ = nullptr;
checkpoint::Checkpoint* MoeReadsTest::ckpt_ = nullptr;

// One sequence: each decode pass reads the dense part, the 8 routed experts of
// each layer and its token's embedding row (at most 1.25 x that), not the 64;
// the tokens are those of reading every expert every pass.
TEST_F(MoeReadsTest, ADecodePassOfOneSequenceReadsItsRoutedExpertsOnly) {
  const Bytes b = BytesOf(*ckpt_);
  ASSERT_EQ(b.sparse_layers, 3);
  std::vector<SequenceResult> routed, all;
  std::vector<PassStats> passes = Run(EngineOptions(), 4, 4, &routed);
  EngineOptions every;
  every.expert_reads = ExpertReads::kAll;
  std::vector<PassStats> every_passes = Run(every, 4, 4, &all);
  ASSERT_EQ(passes.size(), 4u);
  ASSERT_EQ(routed.size(), 1u);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(routed[0].generated, all[0].generated);
  EXPECT_EQ(routed[0].last_logits, all[0].last_logits);
  const double bound = 1.25 * static_cast<double>(b.dense + b.embedding_row + 3 * 8 * b.expert);
  for (size_t p = 1; p < passes.size(); ++p) {
    EXPECT_LE(static_cast<double>(passes[p].bytes_read), bound) << "pass " << p;
    EXPECT_EQ(passes[p].experts_routed, 3 * 8) << "pass " << p;
    EXPECT_EQ(passes[p].experts_read, 3 * 8) << "pass " << p;
    EXPECT_EQ(passes[p].experts_total, 3 * 64) << "pass " << p;
    // Reading every expert: the whole layer each pass.
    EXPECT_EQ(every_passes[p].experts_read, 3 * 64) << "pass " << p;
    EXPECT_GT(every_passes[p].bytes_read, 3 * 60 * b.expert) << "pass " << p;
  }
}

// A pass of 256 prompt tokens routes to every expert and reads each once:
// the whole checkpoint but the embedding's other rows, not once per row.
TEST_F(MoeReadsTest, APassOf256PromptTokensReadsEveryExpertOnce) {
  std::vector<SequenceResult> results;
  std::vector<PassStats> passes = Run(EngineOptions(), 256, 1, &results);
  ASSERT_EQ(passes.size(), 1u);
  const checkpoint::TensorInfo* embedding = ckpt_->Find("model.embed_tokens.weight");
  const uint64_t row = embedding->size / static_cast<uint64_t>(embedding->shape[0]);
  EXPECT_EQ(passes[0].experts_routed, 3 * 64);
  EXPECT_EQ(passes[0].experts_read, 3 * 64);
  EXPECT_EQ(passes[0].bytes_read, ckpt_->total_bytes - embedding->size + 256 * row);
}

// cgroup v1's memory controller, as bench/engine_bench uses it (root).
constexpr char kCgroup[] = "/sys/fs/cgroup/memory/nightshift-moe-test-";

bool WriteCgroup(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  return static_cast<bool>(out.flush());
}

// A layer of experts (64 of 17 MB, 1.1 GB) larger than twice a memory cgroup
// of 512 MiB: streamed in expert slices of 64 MiB inside it, with the tokens
// of the uncapped run. 1.2 GB written; root (cgroup v1) runs it capped, else
// the test says so and checks the tokens only.
TEST(MoeCgroupTest, ALayerOfExpertsLargerThanTwiceTheCgroupRunsInsideIt) {
  TempDir tmp;
  generator::CheckpointSpec spec = Qwen3Moe(1024, 2, 64, 2816);
  spec.decoder_sparse_step = 2;  // layer 1 sparse, layer 0 dense
  spec.vocab = 8192;
  const checkpoint::Checkpoint ckpt = Write(spec, tmp.file("moe"));
  const Bytes b = BytesOf(ckpt);
  const uint64_t cap = 512ull << 20;
  ASSERT_EQ(b.sparse_layers, 1);
  ASSERT_GT(64 * b.expert, 2 * cap);
  const std::string args = testutil::BinPath("engine-stream-run") + " --model-dir " +
                           tmp.file("moe") + " --batch 4 --prompt-tokens 16 --max-new-tokens 3" +
                           " --expert-slice 64M --threads 2";
  auto run = [&](const std::string& prefix) {
    const std::string out = tmp.file("out.json");
    const int status = std::system((prefix + args + " >" + out).c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << prefix << args;
    const std::string text = ReadFileBytes(out);
    return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
  };
  const nlohmann::json uncapped = run("");
  const std::string cgroup = kCgroup + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::create_directories(cgroup, ec);
  if (ec || !WriteCgroup(cgroup + "/memory.limit_in_bytes", std::to_string(cap))) {
    std::cout << "[ note ] no cgroup v1 memory controller to write at " << cgroup
              << " (root needed): the capped run is not checked\n";
    return;
  }
  const nlohmann::json capped =
      run("timeout 600 sh -c 'echo $$ > " + cgroup + "/tasks && exec \"$0\" \"$@\"' ");
  std::ifstream peak_file(cgroup + "/memory.max_usage_in_bytes");
  uint64_t peak = 0;
  peak_file >> peak;
  std::cout << "[ note ] cgroup cap " << cap << " bytes, peak usage " << peak
            << "; a layer's experts " << 64 * b.expert << " bytes\n";
  rmdir(cgroup.c_str());
  ASSERT_TRUE(capped.is_object() && uncapped.is_object()) << "killed by the cgroup's cap?";
  EXPECT_LE(peak, cap);
  EXPECT_EQ(capped["generated"], uncapped["generated"]);
  EXPECT_EQ(capped["generated"].size(), 4u);
}

}  // namespace
}  // namespace nightshift::engine
