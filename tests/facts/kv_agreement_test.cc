// The KV figures of every fixture model agree across the three modules that
// use them, for several job shapes: the worker's advert (its model catalogue:
// kv_bytes_per_token, max_context_tokens), the scheduler's sizing
// (QueuedJob::reserved_kv_tokens x kv_bytes_per_token and QueuedJob::
// pass_tokens, what it packs batches with) and the engine's (Engine::
// KvBytesFor and FirstPassTokens, what it admits against its KV and
// pass-token budgets). Each computes through planner/model_facts.h; a
// module that re-derived a fact would fail here.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "scheduler/types.h"
#include "tests/testing/paths.h"
#include "worker/daemon/model_catalog.h"
#include "worker/engine/engine.h"

namespace nightshift {
namespace {

std::string ModelsDir() { return testutil::DataPath("models"); }

// One job shape: prompt length, max_new_tokens, and each label's token count
// (none: generation).
struct Shape {
  int64_t prompt = 0;
  int32_t max_new_tokens = 0;
  std::vector<int64_t> labels;
};

std::vector<Shape> Shapes(int64_t context) {
  std::vector<Shape> shapes;
  for (int64_t prompt : {1, 5, 40}) {
    for (int32_t max_new : {0, 1, 2, 16, 100}) shapes.push_back({prompt, max_new, {}});
    for (std::vector<int64_t> labels :
         {std::vector<int64_t>{1}, {1, 3}, {2, 1, 4}, {1, 1, 1, 1, 1, 1, 1, 1}}) {
      shapes.push_back({prompt, 16, labels});
    }
  }
  // Exactly the context: the last generated token needs no slot.
  shapes.push_back({context - 15, 16, {}});
  shapes.push_back({context - 4, 1, {3, 1}});
  return shapes;
}

// The job as the scheduler holds it once tokenised.
void MakeJob(const Shape& shape, scheduler::JobSpec* spec, scheduler::TokenisedPrompt* tokens) {
  spec->max_new_tokens = shape.max_new_tokens;
  tokens->prompt.assign(static_cast<size_t>(shape.prompt), 3);
  for (size_t i = 0; i < shape.labels.size(); ++i) {
    spec->labels.push_back("label" + std::to_string(i));
    tokens->labels.push_back(std::vector<int32_t>(static_cast<size_t>(shape.labels[i]), 4));
  }
}

// The same job as the worker hands it to the engine.
engine::SequenceRequest MakeRequest(const Shape& shape) {
  engine::SequenceRequest request;
  request.prompt.assign(static_cast<size_t>(shape.prompt), 3);
  request.max_new_tokens = shape.max_new_tokens;
  for (int64_t length : shape.labels) {
    request.labels.push_back(std::vector<engine::TokenId>(static_cast<size_t>(length), 4));
  }
  return request;
}

TEST(KvAgreementTest, AdvertSchedulerAndEngineAgreeOnEveryFixture) {
  worker::CatalogOptions options;
  options.roots = {ModelsDir()};
  options.read_bytes_per_second = {1e9};
  options.memory_budget_bytes = 8ull << 30;
  StatusOr<worker::Catalog> catalog = worker::ScanModelRoots(options);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  for (const worker::SkippedModel& skipped : catalog->skipped) {
    ADD_FAILURE() << skipped.name << " skipped: " << skipped.reason;
  }
  std::set<std::string> fixtures;
  for (const auto& entry : std::filesystem::directory_iterator(ModelsDir())) {
    if (entry.is_directory()) fixtures.insert(entry.path().filename().string());
  }
  std::set<std::string> advertised;
  for (const worker::ModelEntry& model : catalog->models) advertised.insert(model.offer.name);
  EXPECT_EQ(advertised, fixtures);

  int checked = 0;
  for (const worker::ModelEntry& model : catalog->models) {
    SCOPED_TRACE(model.offer.name);
    StatusOr<std::unique_ptr<engine::Engine>> engine = engine::Engine::Open(model.dir);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    const int64_t context = model.offer.max_context_tokens;
    EXPECT_EQ(context, (*engine)->max_context());
    ASSERT_GT(model.offer.kv_bytes_per_token, 0);
    for (const Shape& shape : Shapes(context)) {
      SCOPED_TRACE("prompt " + std::to_string(shape.prompt) + ", max_new_tokens " +
                   std::to_string(shape.max_new_tokens) + ", " +
                   std::to_string(shape.labels.size()) + " labels");
      scheduler::JobSpec spec;
      scheduler::TokenisedPrompt tokens;
      MakeJob(shape, &spec, &tokens);
      // The queued job as the policy prices it.
      scheduler::QueuedJob job;
      job.kv_tokens = scheduler::KvTokens(spec, tokens);
      job.passes = scheduler::PassesNeeded(spec);
      // Within the context, so the engine's clamp cannot hide a difference.
      ASSERT_LE(job.kv_tokens, context);
      const uint64_t scheduler_bytes = static_cast<uint64_t>(job.reserved_kv_tokens()) *
                                       static_cast<uint64_t>(model.offer.kv_bytes_per_token);
      EXPECT_EQ(scheduler_bytes, (*engine)->KvBytesFor(MakeRequest(shape)));
      EXPECT_EQ(job.pass_tokens(), engine::Engine::FirstPassTokens(MakeRequest(shape)));
      ++checked;
    }
  }
  EXPECT_GE(checked, 11 * 29);
}

}  // namespace
}  // namespace nightshift
