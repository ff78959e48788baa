// The accelerator path (what a CUDA device runs), checked on the CPU: the
// stager's copies, layers resident on the device, classification, the pass
// figures and BF16 projections. The golden and engine tests run their cases
// on this path too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"
#include "worker/engine/device_stager.h"
#include "worker/engine/engine.h"
#include "worker/engine/test_fixtures.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::FixtureDir;
using testing::Drain;
using testing::Golden;
using testing::GreedyRequest;
using testing::LoadGolden;
using testing::MaxAbsDiff;
using testing::OpenEngine;

constexpr char kFixture[] = "llama-gqa-sharded";  // float32

EngineOptions AcceleratorOptions(Residency residency = Residency::kStream) {
  EngineOptions options;
  options.threads = 1;
  options.accelerator_path_on_cpu = true;
  options.residency = residency;
  return options;
}

std::vector<unsigned char> Pattern(size_t bytes, unsigned char seed) {
  std::vector<unsigned char> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(seed + 7 * i);
  return out;
}

TEST(DeviceStagerTest, StagesBytesIntoItsSlotsAndRefusesMoreThanASlotHolds) {
  DeviceStager stager(c10::Device(c10::kCPU), {64, 32});
  const std::vector<unsigned char> a = Pattern(64, 1), b = Pattern(32, 2);
  const DeviceStager::Staged staged = stager.Stage(0, a.data(), a.size());
  const unsigned char* slot0 = staged.data;
  const unsigned char* slot1 = stager.Stage(1, b.data(), b.size()).data;
  EXPECT_GE(staged.copy_seconds, 0);
  EXPECT_EQ(staged.slot_wait_seconds, 0);  // nothing to wait for on the CPU
  EXPECT_NE(slot0, a.data());              // a copy, not the host memory
  EXPECT_NE(slot0, slot1);
  EXPECT_EQ(std::memcmp(slot0, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(slot1, b.data(), b.size()), 0);
  stager.Release(0);
  // A slot is reused, not reallocated.
  EXPECT_EQ(stager.Stage(0, b.data(), b.size()).data, slot0);
  EXPECT_EQ(std::memcmp(slot0, b.data(), b.size()), 0);
  EXPECT_THROW(stager.Stage(1, a.data(), a.size()), std::invalid_argument);
  EXPECT_THROW(stager.Stage(2, a.data(), 1), std::out_of_range);
}

TEST(DeviceStagerTest, PinnedMemoryIsAlignedAndNeedsCuda) {
  if (!CudaAvailable()) {
    EXPECT_ANY_THROW(PinnedBuffer(4096));
    return;
  }
  std::shared_ptr<unsigned char> buffer = PinnedBuffer(10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.get()) % 4096, 0u);
  std::memset(buffer.get(), 1, 10000);
}

TEST(AcceleratorPathTest, ResidentStagesEachLayerOnceAndGivesTheStreamedResults) {
  const Golden golden = LoadGolden(kFixture);
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(kFixture));
  ASSERT_TRUE(ckpt.ok());
  const checkpoint::TensorInfo* embedding = ckpt->Find("model.embed_tokens.weight");
  ASSERT_NE(embedding, nullptr);
  const uint64_t row = embedding->size / static_cast<uint64_t>(embedding->shape[0]);
  const uint64_t streamed = ckpt->total_bytes - embedding->size;  // untied

  std::vector<std::vector<SequenceResult>> results;
  std::vector<std::vector<PassStats>> passes(2);
  for (Residency residency : {Residency::kStream, Residency::kResident}) {
    std::unique_ptr<Engine> engine =
        OpenEngine(FixtureDir(kFixture), AcceleratorOptions(residency));
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->Add(GreedyRequest(golden.prompts[2], 4)).ok());
    ASSERT_TRUE(engine->Add(GreedyRequest(golden.prompts[1], 4)).ok());
    results.push_back(Drain(*engine, &passes[results.size()]));
  }
  const std::vector<PassStats>& resident = passes[1];
  ASSERT_EQ(resident.size(), 4u);
  const uint64_t prompt_tokens = golden.prompts[2].size() + golden.prompts[1].size();
  EXPECT_EQ(resident[0].bytes_read, streamed + prompt_tokens * row);
  for (size_t i = 1; i < resident.size(); ++i) {
    EXPECT_EQ(resident[i].bytes_read, 2 * row) << "pass " << i;  // the embedding rows only
    EXPECT_EQ(passes[0][i].bytes_read, streamed + 2 * row) << "pass " << i;
    EXPECT_EQ(resident[i].residency, Residency::kResident);
  }
  ASSERT_EQ(results[0].size(), 2u);
  ASSERT_EQ(results[1].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(results[1][i].generated, results[0][i].generated);
    EXPECT_EQ(results[1][i].last_logits, results[0][i].last_logits);
    const std::vector<TokenId>& greedy = golden.greedy[i == 0 ? 2 : 1];
    EXPECT_EQ(results[1][i].generated, std::vector<TokenId>(greedy.begin(), greedy.begin() + 4));
  }
}

TEST(AcceleratorPathTest, ComputeIsThePassTimeNotSpentWaitingForWeights) {
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(kFixture), AcceleratorOptions());
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Add(GreedyRequest({1, 2, 3}, 3)).ok());
  std::vector<PassStats> passes;
  Drain(*engine, &passes);
  ASSERT_EQ(passes.size(), 3u);
  for (const PassStats& p : passes) {
    EXPECT_GT(p.io_seconds, 0);
    EXPECT_NEAR(p.compute_seconds, p.seconds - p.io_seconds, 1e-9);
  }
}

TEST(AcceleratorPathTest, ClassificationScoresAreTheCpuPaths) {
  SequenceRequest request;
  request.prompt = {5, 9, 2, 7};
  request.labels = {{3}, {11, 4}, {11, 6, 8}};
  std::vector<SequenceResult> results;
  for (bool accelerator : {false, true}) {
    EngineOptions options = AcceleratorOptions();
    options.accelerator_path_on_cpu = accelerator;
    std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(kFixture), options);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->Add(request).ok());
    std::vector<SequenceResult> out = Drain(*engine);
    ASSERT_EQ(out.size(), 1u);
    results.push_back(std::move(out[0]));
  }
  ASSERT_EQ(results[1].labels.size(), 3u);
  EXPECT_EQ(results[1].best_label, results[0].best_label);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_NEAR(results[1].labels[j].logprob, results[0].labels[j].logprob, 1e-4) << j;
  }
}

TEST(AcceleratorPathTest, Bf16WeightsAreMultipliedInBf16) {
  // The CPU path computes in float32 to the reference's float32 tolerance;
  // the accelerator path rounds each projection's input to BF16 and lands
  // further away, within a few BF16 steps.
  const Golden golden = LoadGolden("llama-bf16");
  std::vector<std::vector<float>> logits;
  for (bool accelerator : {false, true}) {
    EngineOptions options = AcceleratorOptions();
    options.accelerator_path_on_cpu = accelerator;
    std::unique_ptr<Engine> engine = OpenEngine(FixtureDir("llama-bf16"), options);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->Add(GreedyRequest(golden.prompts[0], 1)).ok());
    std::vector<SequenceResult> out = Drain(*engine);
    ASSERT_EQ(out.size(), 1u);
    logits.push_back(out[0].last_logits);
  }
  EXPECT_LE(MaxAbsDiff(logits[0], golden.last_logits[0]), golden.atol);
  EXPECT_GT(MaxAbsDiff(logits[1], golden.last_logits[0]), golden.atol);
  EXPECT_LE(MaxAbsDiff(logits[1], golden.last_logits[0]), testing::Bf16ProjectionAtol(golden));
}

// The loader's groups of kFixture (planner::StreamedGroupBytes); empty when
// it cannot be read.
std::vector<uint64_t> FixtureGroupBytes() {
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(FixtureDir(kFixture));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  return ckpt.ok() ? planner::StreamedGroupBytes(*ckpt) : std::vector<uint64_t>();
}

// Partial residency on both paths: a sweep of memory budgets pins more
// groups as the budget grows (on the accelerator path they stay in device
// memory); every pass after the first reads the streamed pass less the
// pinned bytes, and the tokens and logits are the fully streamed run's.
// Two of `golden`'s prompts, 4 greedy tokens each, through an engine opened
// with `options`: the results and every pass's figures; no results when a
// pass was refused for its memory plan (ResourceExhausted, expected).
std::vector<SequenceResult> RunTwoPrompts(const Golden& golden, const EngineOptions& options,
                                          std::vector<PassStats>* passes) {
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(kFixture), options);
  EXPECT_NE(engine, nullptr);
  std::vector<SequenceResult> out;
  if (engine == nullptr) return out;
  EXPECT_TRUE(engine->Add(GreedyRequest(golden.prompts[0], 4)).ok());
  EXPECT_TRUE(engine->Add(GreedyRequest(golden.prompts[1], 4)).ok());
  while (engine->active() > 0) {
    StatusOr<PassStats> stats = engine->Step();
    if (!stats.ok()) {
      EXPECT_EQ(stats.status().code(), StatusCode::kResourceExhausted) << stats.status().ToString();
      return std::vector<SequenceResult>();
    }
    passes->push_back(*stats);
    for (SequenceResult& r : engine->TakeFinished()) out.push_back(std::move(r));
  }
  return out;
}

TEST(AcceleratorPathTest, AMemoryBudgetPinsGroupsAndKeepsTheResults) {
  const Golden golden = LoadGolden(kFixture);
  const std::vector<uint64_t> groups = FixtureGroupBytes();
  ASSERT_FALSE(groups.empty());
  const uint64_t all = std::accumulate(groups.begin(), groups.end(), uint64_t{0});
  for (bool accelerator : {false, true}) {
    SCOPED_TRACE(accelerator ? "accelerator path" : "cpu path");
    auto run = [&](uint64_t budget, std::vector<PassStats>* passes) {
      EngineOptions options = accelerator ? AcceleratorOptions() : EngineOptions{};
      options.threads = 1;
      options.memory_budget_bytes = budget;
      return RunTwoPrompts(golden, options, passes);
    };
    std::vector<PassStats> streamed_passes;
    const std::vector<SequenceResult> streamed = run(0, &streamed_passes);
    ASSERT_EQ(streamed.size(), 2u);
    uint64_t last = 0;
    int partial = 0, whole = 0, refused = 0;
    for (uint64_t budget = all / 4; budget <= 4 * all; budget += all / 4) {
      std::vector<PassStats> passes;
      const std::vector<SequenceResult> results = run(budget, &passes);
      if (results.empty()) {  // the working set alone exceeds the budget
        ++refused;
        continue;
      }
      ASSERT_EQ(passes.size(), streamed_passes.size());
      const uint64_t pinned = passes[0].pinned_bytes;
      EXPECT_GE(pinned, last) << budget;  // more budget, never fewer pinned bytes
      last = pinned;
      partial += pinned > 0 && pinned < all;
      whole += pinned == all;
      for (size_t p = 1; p < passes.size(); ++p) {
        EXPECT_EQ(passes[p].bytes_read, streamed_passes[p].bytes_read - pinned) << budget;
        EXPECT_EQ(passes[p].pinned_bytes, pinned);
      }
      for (size_t i = 0; i < results.size(); ++i) {
        EXPECT_EQ(results[i].generated, streamed[i].generated) << budget;
      }
    }
    EXPECT_GT(refused, 0);  // the sweep starts below the working set
    EXPECT_GT(partial, 0);
    EXPECT_GT(whole, 0);
  }
}

// The host tier: groups the device does not keep stay in host memory after
// their first read (beyond the loader's stream buffers), so later passes
// read neither them nor the device's from disk; tokens are the streamed
// run's. With a device budget too, the two tiers are disjoint.
TEST(AcceleratorPathTest, AHostMemoryBudgetKeepsWhatTheDeviceDoesNot) {
  const Golden golden = LoadGolden(kFixture);
  const std::vector<uint64_t> groups = FixtureGroupBytes();
  ASSERT_FALSE(groups.empty());
  const uint64_t all = std::accumulate(groups.begin(), groups.end(), uint64_t{0});
  const uint64_t buffers = planner::StreamBufferBytes(groups, {}, /*prefetch=*/true);

  std::vector<PassStats> streamed_passes;
  const std::vector<SequenceResult> streamed =
      RunTwoPrompts(golden, AcceleratorOptions(), &streamed_passes);
  ASSERT_EQ(streamed.size(), 2u);
  // The first pass's figures; none when the device's working set exceeds its budget.
  auto expect_tiers = [&](const EngineOptions& options,
                          uint64_t host_at_most) -> std::optional<PassStats> {
    std::vector<PassStats> passes;
    const std::vector<SequenceResult> results = RunTwoPrompts(golden, options, &passes);
    if (results.empty()) return std::nullopt;
    EXPECT_EQ(passes.size(), streamed_passes.size());
    const uint64_t device = passes[0].pinned_bytes, host = passes[0].host_pinned_bytes;
    if (device < all) {
      EXPECT_GT(host, 0u);  // unless the device keeps every group
    }
    EXPECT_LE(host, host_at_most);
    EXPECT_LE(device + host, all);
    EXPECT_EQ(passes[0].bytes_read, streamed_passes[0].bytes_read);  // everything read once
    for (size_t p = 1; p < passes.size(); ++p) {
      EXPECT_EQ(passes[p].bytes_read, streamed_passes[p].bytes_read - device - host) << p;
      EXPECT_EQ(passes[p].host_pinned_bytes, host);
    }
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(results[i].generated, streamed[i].generated);
    }
    return passes[0];
  };

  EngineOptions options = AcceleratorOptions();
  options.host_memory_budget_bytes = buffers + all / 2;  // about half the groups
  EXPECT_TRUE(expect_tiers(options, all / 2).has_value());
  // Room for everything: with any device budget that runs, the two tiers
  // hold every group and later passes read only the embedding rows fed.
  options.host_memory_budget_bytes = buffers + all;
  int both = 0;
  for (uint64_t budget = all / 4; budget <= 4 * all; budget += all / 4) {
    options.memory_budget_bytes = budget;
    const std::optional<PassStats> first = expect_tiers(options, all);
    if (!first) continue;
    EXPECT_EQ(first->pinned_bytes + first->host_pinned_bytes, all) << budget;
    both += first->pinned_bytes > 0 && first->host_pinned_bytes > 0;
  }
  EXPECT_GT(both, 0);

  // Less than the stream buffers: refused at the first pass, with the figure.
  options = AcceleratorOptions();
  options.host_memory_budget_bytes = buffers / 2;
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(kFixture), options);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Add(GreedyRequest(golden.prompts[0], 1)).ok());
  StatusOr<PassStats> refused = engine->Step();
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("stream buffers"));
  // The CPU path has no second tier.
  options.accelerator_path_on_cpu = false;
  options.host_memory_budget_bytes = all;
  EXPECT_EQ(Engine::Open(FixtureDir(kFixture), options).status().code(),
            StatusCode::kInvalidArgument);
}

// The adaptive split (a worker without --kv-budget, on both paths): the
// memory budget's share for KV follows the sequences in flight. One short
// sequence leaves more pinned than a split fixed at the KV ceiling; a long
// one joining unpins groups before its cache grows; once it leaves, the next
// pass pins them again. At every pass the working set, the pinned groups and
// the KV in use fit the budget; a pass whose pins did not change reads the
// streamed pass less them; the tokens are the fully streamed run's.
struct SplitRun {
  std::vector<PassStats> passes;
  std::vector<uint64_t> kv_in_use;  // before each pass
  std::vector<TokenId> short_tokens, long_tokens;
};

SplitRun RunShortThenLong(const Golden& golden, const EngineOptions& options) {
  SplitRun run;
  std::unique_ptr<Engine> engine = OpenEngine(FixtureDir(kFixture), options);
  EXPECT_NE(engine, nullptr);
  if (engine == nullptr) return run;
  auto step = [&] {
    run.kv_in_use.push_back(engine->kv_bytes_in_use());
    StatusOr<PassStats> stats = engine->Step();
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (stats.ok()) run.passes.push_back(*stats);
  };
  StatusOr<SequenceId> s = engine->Add(GreedyRequest(golden.prompts[0], 6));
  EXPECT_TRUE(s.ok());
  step();
  step();
  StatusOr<SequenceId> l = engine->Add(GreedyRequest(golden.prompts[1], 450));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return run;
  step();
  step();
  StatusOr<std::vector<TokenId>> long_tokens = engine->Generated(*l);
  EXPECT_TRUE(long_tokens.ok());
  if (long_tokens.ok()) run.long_tokens = *long_tokens;
  EXPECT_TRUE(engine->Cancel(*l).ok());
  while (engine->active() > 0 && run.passes.size() < 20) step();
  for (const SequenceResult& r : engine->TakeFinished()) {
    if (r.id == *s) run.short_tokens = r.generated;
  }
  return run;
}

TEST(AcceleratorPathTest, AnAdaptiveSplitFollowsTheSequencesInFlight) {
  const Golden golden = LoadGolden(kFixture);
  const std::vector<uint64_t> groups = FixtureGroupBytes();
  ASSERT_FALSE(groups.empty());
  const uint64_t all = std::accumulate(groups.begin(), groups.end(), uint64_t{0});
  std::unique_ptr<Engine> probe = OpenEngine(FixtureDir(kFixture), EngineOptions{});
  ASSERT_NE(probe, nullptr);
  const uint64_t short_kv = probe->KvBytesFor(GreedyRequest(golden.prompts[0], 6));
  const uint64_t long_kv = probe->KvBytesFor(GreedyRequest(golden.prompts[1], 450));
  const uint64_t working_set = planner::StreamBufferBytes(groups, {}, /*prefetch=*/true) +
                               planner::ActivationWorkingSetBytes(probe->config(), 0);
  ASSERT_GT(long_kv, all / 3);  // the long sequence's KV displaces groups
  // Every group pins with nothing in flight; then with the short sequence too.
  for (const uint64_t budget : {working_set + all, working_set + all + short_kv}) {
    for (bool accelerator : {false, true}) {
      SCOPED_TRACE(std::string(accelerator ? "accelerator path" : "cpu path") + ", budget " +
                   std::to_string(budget));
      EngineOptions options = accelerator ? AcceleratorOptions() : EngineOptions{};
      options.threads = 1;
      const SplitRun streamed = RunShortThenLong(golden, options);
      ASSERT_EQ(streamed.passes.size(), 6u);  // the short sequence's 6 tokens
      options.memory_budget_bytes = budget;
      options.kv_budget_bytes = short_kv + long_kv;  // the ceiling
      const SplitRun fixed = RunShortThenLong(golden, options);
      options.adaptive_split = true;
      const SplitRun adaptive = RunShortThenLong(golden, options);
      ASSERT_EQ(adaptive.passes.size(), 6u);
      ASSERT_EQ(fixed.passes.size(), 6u);

      const uint64_t alone = adaptive.passes[0].pinned_bytes;
      const uint64_t both = adaptive.passes[2].pinned_bytes;
      if (budget > working_set + all) {
        EXPECT_EQ(alone, all);
      }
      EXPECT_EQ(fixed.passes[0].pinned_bytes, fixed.passes[5].pinned_bytes);
      EXPECT_GT(alone, fixed.passes[0].pinned_bytes);  // a short queue pins more
      EXPECT_LT(both, alone);                          // the long sequence's KV took groups
      EXPECT_EQ(adaptive.passes[1].pinned_bytes, alone);
      EXPECT_EQ(adaptive.passes[3].pinned_bytes, both);
      EXPECT_EQ(adaptive.passes[4].pinned_bytes, alone);  // pinned again once it left
      EXPECT_EQ(adaptive.passes[5].pinned_bytes, alone);
      for (size_t p = 0; p < adaptive.passes.size(); ++p) {
        const PassStats& pass = adaptive.passes[p];
        EXPECT_LE(working_set + pass.pinned_bytes + adaptive.kv_in_use[p], budget) << p;
        EXPECT_LE(pass.bytes_read, streamed.passes[p].bytes_read) << p;
        if (p > 0 && pass.pinned_bytes == adaptive.passes[p - 1].pinned_bytes) {
          EXPECT_EQ(pass.bytes_read, streamed.passes[p].bytes_read - pass.pinned_bytes) << p;
        }
      }
      EXPECT_EQ(adaptive.short_tokens, streamed.short_tokens);
      EXPECT_EQ(adaptive.long_tokens, streamed.long_tokens);
      EXPECT_EQ(fixed.short_tokens, streamed.short_tokens);
      EXPECT_EQ(adaptive.short_tokens.size(), 6u);
      EXPECT_EQ(adaptive.long_tokens.size(), 2u);
      if (!accelerator) continue;
      // With the host tier too: what the device gives up as the split moves
      // may stay in host memory; the tiers stay disjoint and the tokens equal.
      options.host_memory_budget_bytes = planner::StreamBufferBytes(groups, {}, true) + all / 2;
      const SplitRun tiers = RunShortThenLong(golden, options);
      ASSERT_EQ(tiers.passes.size(), 6u);
      for (size_t p = 0; p < tiers.passes.size(); ++p) {
        const PassStats& pass = tiers.passes[p];
        EXPECT_EQ(pass.pinned_bytes, adaptive.passes[p].pinned_bytes) << p;
        EXPECT_LE(pass.pinned_bytes + pass.host_pinned_bytes, all) << p;
        if (p > 0 && pass.pinned_bytes == tiers.passes[p - 1].pinned_bytes &&
            pass.host_pinned_bytes == tiers.passes[p - 1].host_pinned_bytes) {
          EXPECT_EQ(pass.bytes_read,
                    streamed.passes[p].bytes_read - pass.pinned_bytes - pass.host_pinned_bytes)
              << p;
        }
      }
      EXPECT_GT(tiers.passes[2].host_pinned_bytes, 0u);  // the long sequence's groups
      EXPECT_EQ(tiers.short_tokens, streamed.short_tokens);
      EXPECT_EQ(tiers.long_tokens, streamed.long_tokens);
    }
  }
  // Below the working set the adaptive split pins nothing and runs (the
  // ceiling is the caller's), where a fixed split refuses the pass.
  {
    EngineOptions options;
    options.threads = 1;
    options.memory_budget_bytes = working_set / 2;
    options.kv_budget_bytes = short_kv + long_kv;
    options.adaptive_split = true;
    const SplitRun starved = RunShortThenLong(golden, options);
    ASSERT_EQ(starved.passes.size(), 6u);
    for (const PassStats& pass : starved.passes) EXPECT_EQ(pass.pinned_bytes, 0u);
    options.adaptive_split = false;
    std::unique_ptr<Engine> fixed = OpenEngine(FixtureDir(kFixture), options);
    ASSERT_NE(fixed, nullptr);
    ASSERT_TRUE(fixed->Add(GreedyRequest(golden.prompts[0], 6)).ok());
    EXPECT_EQ(fixed->Step().status().code(), StatusCode::kResourceExhausted);
  }
  // The ceiling is required: without it there is nothing to split.
  EngineOptions options;
  options.memory_budget_bytes = working_set + all;
  options.adaptive_split = true;
  EXPECT_EQ(Engine::Open(FixtureDir(kFixture), options).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nightshift::engine
