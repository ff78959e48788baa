// Helpers shared by the scheduler's tests: small builders for specs and
// workers, and the common test helpers (tests/testing/) they use.
#pragma once

#include <string>
#include <vector>

#include "scheduler/types.h"
#include "tests/testing/paths.h"
#include "tests/testing/temp_dir.h"

namespace nightshift::scheduler::testing {

using testutil::TempDir;

// A generation job with a token-id prompt of `prompt_tokens` ids.
inline JobSpec TokenJob(const std::string& custom_id, const std::string& model,
                        int prompt_tokens = 4, int max_new_tokens = 8, int priority = 0) {
  JobSpec spec;
  spec.custom_id = custom_id;
  spec.model = model;
  spec.prompt_kind = PromptKind::kTokenIds;
  for (int i = 0; i < prompt_tokens; ++i) spec.prompt_token_ids.push_back(100 + i);
  spec.max_new_tokens = max_new_tokens;
  spec.priority = priority;
  return spec;
}

// The tiny byte-level tokenizer of tests/data/scheduler/tiny-model (EOS 256).
inline TokenizerFiles TinyTokenizer() {
  const std::string dir = testutil::DataPath("scheduler/tiny-model/");
  TokenizerFiles files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    files.files[name] = testutil::ReadFile(dir + name);
  }
  files.eos_ids = {256};
  return files;
}

inline TokenisedPrompt TokensOf(const JobSpec& spec) {
  return TokenisedPrompt{spec.prompt_token_ids, {}};
}

inline ModelOffer Offer(const std::string& name, int64_t kv_bytes_per_token = 1000,
                        int64_t max_context = 4096) {
  ModelOffer offer;
  offer.name = name;
  offer.kv_bytes_per_token = kv_bytes_per_token;
  offer.checkpoint_bytes = 2'000'000'000;
  offer.seconds_per_pass = 1.5;
  offer.max_context_tokens = max_context;
  return offer;
}

inline WorkerInfo Worker(const std::string& id, int64_t kv_budget_bytes,
                         std::vector<ModelOffer> models) {
  WorkerInfo worker;
  worker.id = id;
  worker.device = "cpu";
  worker.memory_budget_bytes = 8'000'000'000;
  worker.kv_budget_bytes = kv_budget_bytes;
  worker.read_bytes_per_second = 2e9;
  worker.models = std::move(models);
  return worker;
}

}  // namespace nightshift::scheduler::testing
