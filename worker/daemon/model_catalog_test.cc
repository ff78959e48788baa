#include "worker/daemon/model_catalog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/disk_bench.h"
#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/daemon/test_util.h"
#include "worker/engine/engine.h"

namespace nightshift::worker {
namespace {

namespace fs = std::filesystem;
using testing::MakeStoriesModel;
using testing::TempDir;

constexpr uint64_t kStoriesTensorBytes = 1040128;          // every tensor of stories260k
constexpr int64_t kStoriesKvPerToken = 2 * 5 * 4 * 8 * 4;  // K,V x layers x kv heads x dim x fp32

CatalogOptions Options(const std::string& root, uint64_t budget) {
  CatalogOptions options;
  options.roots = {root};
  options.read_bytes_per_second = {1e9};
  options.memory_budget_bytes = budget;
  return options;
}

TEST(ResolveModelDirTest, RefusesNamesThatAreNotPlainDirectoryNames) {
  TempDir dir;
  MakeStoriesModel(dir.path(), "m");
  const std::vector<std::string> names = {
      "", ".", "..", "../m", "m/..", "/etc", std::string("m\0x", 3)};
  for (const std::string& name : names) {
    auto resolved = ResolveModelDir(dir.path(), name);
    EXPECT_EQ(resolved.status().code(), StatusCode::kInvalidArgument) << "'" << name << "'";
  }
  EXPECT_EQ(ResolveModelDir(dir.path(), "absent").status().code(), StatusCode::kNotFound);
  auto ok = ResolveModelDir(dir.path(), "m");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, fs::canonical(dir.file("m")).string());
}

TEST(ResolveModelDirTest, RefusesSymlinksEscapingTheRootAndAllowsOnesInside) {
  TempDir outside;
  TempDir root;
  MakeStoriesModel(outside.path(), "elsewhere");
  MakeStoriesModel(root.path(), "real");
  fs::create_directory_symlink(outside.file("elsewhere"), root.file("escape"));
  fs::create_directory_symlink(root.file("real"), root.file("alias"));
  auto escape = ResolveModelDir(root.path(), "escape");
  EXPECT_EQ(escape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(escape.status().message().find("outside the model root"), std::string::npos);
  auto alias = ResolveModelDir(root.path(), "alias");
  ASSERT_TRUE(alias.ok()) << alias.status().ToString();
  EXPECT_EQ(*alias, fs::canonical(root.file("real")).string());
}

TEST(CheckInsideRootTest, FollowsFileSymlinks) {
  TempDir outside;
  TempDir root;
  { std::ofstream(outside.file("secret")) << "x"; }
  fs::create_symlink(outside.file("secret"), root.file("link"));
  { std::ofstream(root.file("plain")) << "x"; }
  EXPECT_EQ(CheckInsideRoot(root.path(), root.file("link")).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckInsideRoot(root.path(), root.file("plain")).ok());
  EXPECT_EQ(CheckInsideRoot(root.path(), root.file("none")).code(), StatusCode::kNotFound);
  // A sibling whose name starts with the root's is not inside it.
  TempDir sibling_parent;
  fs::create_directory(sibling_parent.file("r"));
  fs::create_directory(sibling_parent.file("rr"));
  EXPECT_FALSE(CheckInsideRoot(sibling_parent.file("r"), sibling_parent.file("rr")).ok());
}

TEST(ScanModelRootsTest, AdvertisesValidCheckpointsWithExactFigures) {
  TempDir root;
  MakeStoriesModel(root.path(), "stories");
  MakeStoriesModel(root.path(), "ids-only", /*with_tokenizer=*/false);
  auto catalog = ScanModelRoots(Options(root.path(), 1ull << 30));
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  ASSERT_EQ(catalog->models.size(), 2u);
  EXPECT_TRUE(catalog->skipped.empty());

  const ModelEntry* m = catalog->Find("stories");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->offer.name, "stories");
  EXPECT_EQ(m->offer.kv_bytes_per_token, kStoriesKvPerToken);
  EXPECT_EQ(m->offer.checkpoint_bytes, static_cast<int64_t>(kStoriesTensorBytes));
  EXPECT_DOUBLE_EQ(m->offer.seconds_per_pass, kStoriesTensorBytes / 1e9);
  EXPECT_EQ(m->offer.max_context_tokens, 512);
  EXPECT_TRUE(m->resident);  // fits the budget whole under auto
  ASSERT_NE(m->tokenizer, nullptr);
  EXPECT_EQ(m->tokenizer_files.files.count("tokenizer.json"), 1u);
  EXPECT_EQ(m->tokenizer_files.files.count("tokenizer_config.json"), 1u);
  EXPECT_EQ(m->offer.tokenizer_hash, api::TokenizerHash(m->tokenizer_files));
  EXPECT_EQ(m->dir, fs::canonical(root.file("stories")).string());

  const ModelEntry* ids_only = catalog->Find("ids-only");
  ASSERT_NE(ids_only, nullptr);
  EXPECT_EQ(ids_only->tokenizer, nullptr);
  EXPECT_EQ(ids_only->offer.tokenizer_hash, "");
  // Derived KV budget: what the memory budget leaves after the footprint.
  EXPECT_EQ(catalog->kv_budget_bytes, (1ull << 30) - m->footprint_bytes);
}

// The loader reads one group at a time, so a checkpoint whose groups each
// fit in one read streams at one stream's figure whatever the root's reads
// in flight; one with a larger group at the root's.
TEST(StreamReadBandwidthTest, GroupsThatFitOneReadStreamAtOneStreamsFigure) {
  const uint64_t read = kDefaultReadChunkBytes;
  EXPECT_EQ(StreamReadBandwidth({read / 2, read, 1000}, 2e9, 1.5e9), 1.5e9);
  EXPECT_EQ(StreamReadBandwidth({read / 2, read + 1, 1000}, 2e9, 1.5e9), 2e9);
  EXPECT_EQ(StreamReadBandwidth({read / 2}, 2e9, 0), 2e9);  // unknown: the root's
}

// stories260k's groups are far smaller than a read: its passes are priced
// at the root's one-stream figure when one is given.
TEST(ScanModelRootsTest, ASmallModelIsPricedAtTheRootsOneStreamFigure) {
  TempDir root;
  MakeStoriesModel(root.path(), "stories");
  CatalogOptions options = Options(root.path(), 1ull << 30);
  options.read_bytes_per_second = {2e9};
  options.one_read_bytes_per_second = {5e8};
  auto catalog = ScanModelRoots(options);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  const ModelEntry* m = catalog->Find("stories");
  ASSERT_NE(m, nullptr);
  EXPECT_DOUBLE_EQ(m->offer.seconds_per_pass, kStoriesTensorBytes / 5e8);
  EXPECT_DOUBLE_EQ(m->read_bytes_per_second, 5e8);
  options.one_read_bytes_per_second = {5e8, 5e8};
  EXPECT_EQ(ScanModelRoots(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(PriceComputeTest, AComputeBoundPassIsPricedAsOne) {
  TempDir root;
  MakeStoriesModel(root.path(), "stories");
  auto catalog = ScanModelRoots(Options(root.path(), 1ull << 30));
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  ModelEntry m = catalog->models[0];
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(m.dir);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_DOUBLE_EQ(m.layer_flops_per_token, planner::LayerFlopsPerToken(*ckpt));
  EXPECT_DOUBLE_EQ(m.head_flops_per_row, planner::HeadFlopsPerRow(*ckpt));
  // Sequences at the full context (512 positions) the KV budget holds: 3.
  const uint64_t per_sequence = kStoriesKvPerToken * 512;
  EXPECT_EQ(AdvertPassTokens(m, 3 * per_sequence + 7), 3);
  EXPECT_EQ(AdvertPassTokens(m, 0), 1);  // at least one
  m.offer.pass_token_budget = 2;
  EXPECT_EQ(AdvertPassTokens(m, 3 * per_sequence), 2);  // at most the pass-token budget
  m.offer.pass_token_budget = 0;

  const double read = kStoriesTensorBytes / 1e9;
  const double flops = planner::PassFlops(*ckpt, 3, 3);
  PriceCompute(&m, 3 * per_sequence, flops / read / 4);  // compute takes 4x the read
  EXPECT_EQ(m.advert_pass_tokens, 3);
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass, 4 * read);
  PriceCompute(&m, 3 * per_sequence, flops / read * 2);  // half the read: I/O-bound
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass, read);
  PriceCompute(&m, 3 * per_sequence, 0);  // not measured: the read alone
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass, read);
  EXPECT_EQ(m.compute_flops_per_second, 0);
}

// A mixture of experts is advertised at the bytes a pass of the advert's
// tokens is expected to read (planner::ExpectedStreamedBytesPerPass), and
// PriceCompute reprices it at its tokens. The fixture's experts are tiny:
// at the engine's slice size all 8 of a layer share a slice, which top-2
// routing always reads; with a slice per expert fewer are read.
TEST(ScanModelRootsTest, AMixtureOfExpertsIsPricedAtTheExpertsItsPassTouches) {
  TempDir root;
  fs::copy(testutil::DataPath("models/qwen3-moe"), root.file("moe"), fs::copy_options::recursive);
  CatalogOptions options = Options(root.path(), 1ull << 40);
  options.streaming = planner::StreamingRequest::kAlways;
  auto catalog = ScanModelRoots(options);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  ASSERT_EQ(catalog->models.size(), 1u)
      << (catalog->skipped.empty() ? std::string() : catalog->skipped[0].reason);
  ModelEntry m = catalog->models[0];
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(m.dir);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_TRUE(m.moe.is_moe());
  EXPECT_EQ(m.moe.group_bytes, planner::StreamedGroupBytes(*ckpt));
  const int64_t tokens = AdvertPassTokens(m, catalog->kv_budget_bytes);
  EXPECT_EQ(m.offer.checkpoint_bytes,
            static_cast<int64_t>(planner::ExpectedStreamedBytesPerPass(*ckpt, tokens)));
  EXPECT_EQ(m.offer.checkpoint_bytes, static_cast<int64_t>(ckpt->total_bytes));
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass,
                   planner::PassSeconds(ckpt->total_bytes, m.read_bytes_per_second));
  EXPECT_DOUBLE_EQ(m.layer_flops_per_token, planner::LayerFlopsPerToken(*ckpt));

  // One expert to a slice: a pass of one row reads 2 of 8 experts a layer,
  // more rows read more.
  m.moe = planner::MoeFactsOf(*ckpt, m.moe.largest_expert_bytes);
  m.unread_groups.assign(m.moe.group_bytes.size(), false);
  const uint64_t per_sequence = static_cast<uint64_t>(m.offer.kv_bytes_per_token) *
                                static_cast<uint64_t>(m.offer.max_context_tokens);
  PriceCompute(&m, per_sequence, 0);
  EXPECT_EQ(m.advert_pass_tokens, 1);
  const uint64_t one = planner::ExpectedStreamedBytesPerPass(m.moe, 1);
  EXPECT_EQ(one, m.moe.dense_bytes + 2 * 2 * m.moe.largest_expert_bytes);
  EXPECT_EQ(AdvertPassBytes(m, 1), one);
  EXPECT_EQ(m.offer.checkpoint_bytes, static_cast<int64_t>(one));
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass, planner::PassSeconds(one, m.read_bytes_per_second));
  PriceCompute(&m, 16 * per_sequence, 0);
  EXPECT_EQ(m.advert_pass_tokens, 16);
  EXPECT_EQ(m.offer.checkpoint_bytes,
            static_cast<int64_t>(planner::ExpectedStreamedBytesPerPass(m.moe, 16)));
  EXPECT_GT(m.offer.checkpoint_bytes, static_cast<int64_t>(one));
  EXPECT_LT(m.offer.checkpoint_bytes, static_cast<int64_t>(ckpt->total_bytes));
}

// The scheduler sizes batches with the advertised KV bytes per token; the
// engine admits a sequence by KvBytesFor. They must agree on every device,
// or a GPU worker would be leased other than the jobs its engine takes.
TEST(ScanModelRootsTest, AdvertisedKvBytesPerTokenIsWhatTheEngineCharges) {
  const std::string root = testutil::DataPath("models");
  CatalogOptions gpu_options = Options(root, 1ull << 30);
  gpu_options.device = planner::Device::kGpu;
  auto cpu = ScanModelRoots(Options(root, 1ull << 30));
  auto gpu = ScanModelRoots(gpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  ASSERT_NE(cpu->Find("llama-bf16"), nullptr);  // a checkpoint stored narrower than float32
  ASSERT_NE(cpu->Find("llama-fp16"), nullptr);
  engine::SequenceRequest request;
  request.prompt = {1, 2, 3};
  request.max_new_tokens = 3;  // 3 + 3 - 1 cache positions
  int halved = 0;
  for (const ModelEntry& m : cpu->models) {
    SCOPED_TRACE(m.offer.name);
    engine::EngineOptions options;
    options.threads = 1;
    auto eng = engine::Engine::Open(m.dir, options);
    ASSERT_TRUE(eng.ok()) << eng.status().ToString();
    const uint64_t charged = (*eng)->KvBytesFor(request);
    EXPECT_EQ(charged, 5 * static_cast<uint64_t>(m.offer.kv_bytes_per_token));
    // On a GPU the KV cache is in the projections' 16-bit dtype (BF16/F16
    // weights: half the bytes); the accelerator path run on the CPU resolves
    // --kv-dtype auto the way a CUDA device does.
    options.accelerator_path_on_cpu = true;
    auto accelerated = engine::Engine::Open(m.dir, options);
    ASSERT_TRUE(accelerated.ok()) << accelerated.status().ToString();
    const ModelEntry* on_gpu = gpu->Find(m.offer.name);
    ASSERT_NE(on_gpu, nullptr);
    EXPECT_EQ((*accelerated)->KvBytesFor(request),
              5 * static_cast<uint64_t>(on_gpu->offer.kv_bytes_per_token));
    // 16-bit weights, and quantized ones (they dequantise to F16 there), halve it.
    StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(m.dir);
    ASSERT_TRUE(ckpt.ok());
    const bool sixteen_bit = ckpt->config.value("torch_dtype", "float32") != "float32";
    EXPECT_EQ((sixteen_bit ? 2 : 1) * on_gpu->offer.kv_bytes_per_token, m.offer.kv_bytes_per_token);
    halved += sixteen_bit;
  }
  EXPECT_GE(halved, 6);  // llama-bf16, llama-fp16 and the four quantized fixtures
}

TEST(ScanModelRootsTest, SkipsInvalidAndEscapingCheckpointsWithReasons) {
  TempDir outside;
  TempDir root;
  MakeStoriesModel(root.path(), "good");
  fs::create_directory(root.file("no-config"));
  fs::create_directory(root.file("bad-config"));
  { std::ofstream(root.file("bad-config/config.json")) << "{not json"; }
  MakeStoriesModel(outside.path(), "far");
  fs::create_directory_symlink(outside.file("far"), root.file("escape"));
  // A directory inside the root whose weights file points outside it.
  fs::create_directory(root.file("weights-escape"));
  fs::copy_file(outside.file("far/config.json"), root.file("weights-escape/config.json"));
  fs::create_symlink(outside.file("far/model.safetensors"),
                     root.file("weights-escape/model.safetensors"));
  // Its tokenizer file points outside the root.
  MakeStoriesModel(root.path(), "tokenizer-escape", /*with_tokenizer=*/false);
  fs::create_symlink(outside.file("far/tokenizer.json"),
                     root.file("tokenizer-escape/tokenizer.json"));
  // Its generation_config.json points outside the root.
  MakeStoriesModel(root.path(), "generation-escape");
  { std::ofstream(outside.file("generation_config.json")) << R"({"eos_token_id": 2})"; }
  fs::create_symlink(outside.file("generation_config.json"),
                     root.file("generation-escape/generation_config.json"));
  fs::create_directory(root.file(".hidden"));

  auto catalog = ScanModelRoots(Options(root.path(), 1ull << 30));
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  ASSERT_EQ(catalog->models.size(), 1u);
  EXPECT_EQ(catalog->models[0].offer.name, "good");
  std::map<std::string, std::string> reasons;
  for (const SkippedModel& s : catalog->skipped) reasons[s.name] = s.reason;
  ASSERT_EQ(reasons.size(), 6u);
  EXPECT_NE(reasons["no-config"].find("config.json"), std::string::npos) << reasons["no-config"];
  EXPECT_NE(reasons["bad-config"].find("config.json"), std::string::npos) << reasons["bad-config"];
  EXPECT_NE(reasons["escape"].find("outside the model root"), std::string::npos);
  EXPECT_NE(reasons["tokenizer-escape"].find("outside the model root"), std::string::npos)
      << reasons["tokenizer-escape"];
  EXPECT_NE(reasons["generation-escape"].find("outside the model root"), std::string::npos)
      << reasons["generation-escape"];
  // The metadata reader already refuses a weights file linking out of its directory.
  EXPECT_NE(reasons["weights-escape"].find("outside the checkpoint directory"), std::string::npos)
      << reasons["weights-escape"];
}

TEST(ScanModelRootsTest, StreamingPolicyPlacesOrRefusesModels) {
  TempDir root;
  MakeStoriesModel(root.path(), "m");
  // Generous budget: auto keeps it resident, always streams it.
  CatalogOptions options = Options(root.path(), 1ull << 30);
  options.streaming = planner::StreamingRequest::kAlways;
  auto always = ScanModelRoots(options);
  ASSERT_TRUE(always.ok());
  ASSERT_EQ(always->models.size(), 1u);
  EXPECT_FALSE(always->models[0].resident);
  EXPECT_LT(always->models[0].footprint_bytes,
            ScanModelRoots(Options(root.path(), 1ull << 30))->models[0].footprint_bytes);

  // A budget between the streamed and the whole footprint.
  const uint64_t streamed = always->models[0].footprint_bytes;
  options.memory_budget_bytes = streamed + kStoriesTensorBytes / 2;
  options.streaming = planner::StreamingRequest::kAuto;
  auto tight_auto = ScanModelRoots(options);
  ASSERT_TRUE(tight_auto.ok());
  ASSERT_EQ(tight_auto->models.size(), 1u);
  EXPECT_FALSE(tight_auto->models[0].resident);  // does not fit whole: streamed
  options.streaming = planner::StreamingRequest::kNever;
  auto never = ScanModelRoots(options);
  ASSERT_TRUE(never.ok());
  EXPECT_TRUE(never->models.empty());
  ASSERT_EQ(never->skipped.size(), 1u);
  EXPECT_NE(never->skipped[0].reason.find("streaming is off"), std::string::npos)
      << never->skipped[0].reason;

  // Nothing left for the KV cache even streamed.
  options.streaming = planner::StreamingRequest::kAuto;
  options.memory_budget_bytes = streamed;
  auto none = ScanModelRoots(options);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->models.empty());
}

TEST(ScanModelRootsTest, FirstRootWinsAndArgumentsAreChecked) {
  TempDir a;
  TempDir b;
  MakeStoriesModel(a.path(), "m");
  MakeStoriesModel(b.path(), "m");
  CatalogOptions options = Options(a.path(), 1ull << 30);
  options.roots.push_back(b.path());
  options.read_bytes_per_second.push_back(2e9);
  auto catalog = ScanModelRoots(options);
  ASSERT_TRUE(catalog.ok());
  ASSERT_EQ(catalog->models.size(), 1u);
  EXPECT_EQ(catalog->models[0].root, fs::canonical(a.path()).string());
  ASSERT_EQ(catalog->skipped.size(), 1u);

  options.read_bytes_per_second.pop_back();
  EXPECT_EQ(ScanModelRoots(options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ScanModelRoots(Options(a.file("absent"), 1)).status().code(), StatusCode::kNotFound);
  CatalogOptions fixed_kv = Options(a.path(), 1ull << 30);
  fixed_kv.kv_budget_bytes = 12345;
  EXPECT_EQ(ScanModelRoots(fixed_kv)->kv_budget_bytes, 12345u);
}

// With a KV budget, a model that does not fit whole pins what the memory
// budget leaves after its working set (the engine's figures), and its advert
// prices only the streamed rest; `always` and a KV budget that takes it all
// pin nothing.
TEST(ScanModelRootsTest, AStreamedModelWithAKvBudgetPinsWhatFitsAndAdvertisesTheRest) {
  TempDir root;
  MakeStoriesModel(root.path(), "m");
  const uint64_t kv = 1 << 20;
  CatalogOptions whole = Options(root.path(), 1ull << 40);
  whole.kv_budget_bytes = kv;
  auto resident = ScanModelRoots(whole);
  ASSERT_TRUE(resident.ok() && resident->models.size() == 1u);
  ASSERT_TRUE(resident->models[0].resident);
  EXPECT_EQ(resident->models[0].pinned_bytes, 0u);  // resident: the engine keeps it all anyway

  // One byte short of resident: streamed, and pinned where it fits.
  CatalogOptions partial = whole;
  partial.memory_budget_bytes = resident->models[0].footprint_bytes - 1;
  auto catalog = ScanModelRoots(partial);
  ASSERT_TRUE(catalog.ok() && catalog->models.size() == 1u) << catalog.status().ToString();
  const ModelEntry& m = catalog->models[0];
  ASSERT_FALSE(m.resident);
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(m.dir);
  ASSERT_TRUE(ckpt.ok());
  const std::vector<uint64_t> groups = planner::StreamedGroupBytes(*ckpt);
  StatusOr<checkpoint::ModelConfig> config = checkpoint::ParseModelConfig(ckpt->config);
  ASSERT_TRUE(config.ok());
  const uint64_t pin_budget = planner::PinBudgetBytes(
      partial.memory_budget_bytes, planner::StreamBufferBytes(groups, {}, true),
      planner::ActivationWorkingSetBytes(*config, 0), kv);
  EXPECT_GT(m.pinned_bytes, 0u);
  EXPECT_EQ(m.pinned_bytes,
            planner::PinnedBytes(groups, planner::ChoosePinnedGroups(groups, pin_budget)));
  EXPECT_EQ(m.memory_budget_bytes, partial.memory_budget_bytes);
  EXPECT_FALSE(m.adaptive_split);  // the KV budget named fixes the split
  const uint64_t streamed = planner::StreamedBytesPerPass(*ckpt, m.pinned_bytes);
  EXPECT_LT(streamed, ckpt->total_bytes);
  EXPECT_EQ(m.offer.checkpoint_bytes, static_cast<int64_t>(streamed));
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass, planner::PassSeconds(streamed, 1e9));

  CatalogOptions always = partial;
  always.streaming = planner::StreamingRequest::kAlways;
  auto streamed_all = ScanModelRoots(always);
  ASSERT_TRUE(streamed_all.ok() && streamed_all->models.size() == 1u);
  EXPECT_EQ(streamed_all->models[0].pinned_bytes, 0u);
  EXPECT_EQ(streamed_all->models[0].memory_budget_bytes, 0u);
  EXPECT_FALSE(streamed_all->models[0].adaptive_split);
  EXPECT_EQ(streamed_all->models[0].offer.checkpoint_bytes,
            static_cast<int64_t>(ckpt->total_bytes));

  CatalogOptions all_kv = partial;
  all_kv.kv_budget_bytes = partial.memory_budget_bytes;
  auto no_room = ScanModelRoots(all_kv);
  ASSERT_TRUE(no_room.ok() && no_room->models.size() == 1u);
  EXPECT_EQ(no_room->models[0].pinned_bytes, 0u);

  // No KV budget named: the engine splits the memory budget as the jobs in
  // flight leave room, and the advert prices a full batch's split (nothing pinned).
  CatalogOptions adaptive = partial;
  adaptive.kv_budget_bytes = 0;
  auto follows = ScanModelRoots(adaptive);
  ASSERT_TRUE(follows.ok() && follows->models.size() == 1u);
  EXPECT_TRUE(follows->models[0].adaptive_split);
  EXPECT_EQ(follows->models[0].memory_budget_bytes, partial.memory_budget_bytes);
  EXPECT_EQ(follows->models[0].pinned_bytes, 0u);
  EXPECT_EQ(follows->models[0].offer.checkpoint_bytes, static_cast<int64_t>(ckpt->total_bytes));
  EXPECT_FALSE(resident->models[0].adaptive_split);
}

// On a GPU, --host-memory-budget keeps in host memory what the device does
// not: the advert's streamed bytes and seconds per pass leave both out, with
// the engine's choice (planner::ChooseHostTierGroups). The CPU has no such
// tier.
TEST(ScanModelRootsTest, OnAGpuTheHostTierKeepsWhatTheDeviceDoesNotAndTheAdvertLeavesItOut) {
  TempDir root;
  MakeStoriesModel(root.path(), "m");
  CatalogOptions gpu = Options(root.path(), 1ull << 40);
  gpu.device = planner::Device::kGpu;
  gpu.streaming = planner::StreamingRequest::kAuto;
  auto resident = ScanModelRoots(gpu);
  ASSERT_TRUE(resident.ok() && resident->models.size() == 1u);
  gpu.memory_budget_bytes = resident->models[0].footprint_bytes - 1;  // streamed
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(resident->models[0].dir);
  ASSERT_TRUE(ckpt.ok());
  const std::vector<uint64_t> groups = planner::StreamedGroupBytes(*ckpt);
  uint64_t all = 0;
  for (uint64_t g : groups) all += g;
  gpu.host_memory_budget_bytes = planner::StreamBufferBytes(groups, {}, true) + all / 2;

  auto catalog = ScanModelRoots(gpu);
  ASSERT_TRUE(catalog.ok() && catalog->models.size() == 1u) << catalog.status().ToString();
  const ModelEntry& m = catalog->models[0];
  ASSERT_FALSE(m.resident);
  EXPECT_EQ(m.pinned_bytes, 0u);  // no KV budget named: the device pins nothing
  EXPECT_GT(m.host_pinned_bytes, 0u);
  EXPECT_LE(m.host_pinned_bytes, all / 2);
  EXPECT_EQ(m.host_pinned_bytes,
            planner::PinnedBytes(groups, planner::ChooseHostTierGroups(
                                             groups, {}, gpu.host_memory_budget_bytes, true)));
  EXPECT_EQ(m.host_memory_budget_bytes, gpu.host_memory_budget_bytes);
  const uint64_t streamed = planner::StreamedBytesPerPass(*ckpt, m.host_pinned_bytes);
  EXPECT_EQ(m.offer.checkpoint_bytes, static_cast<int64_t>(streamed));
  EXPECT_DOUBLE_EQ(m.offer.seconds_per_pass, planner::PassSeconds(streamed, 1e9));

  CatalogOptions cpu = gpu;
  cpu.device = planner::Device::kCpu;
  auto on_cpu = ScanModelRoots(cpu);
  ASSERT_TRUE(on_cpu.ok() && on_cpu->models.size() == 1u);
  EXPECT_EQ(on_cpu->models[0].host_pinned_bytes, 0u);
}

}  // namespace
}  // namespace nightshift::worker
