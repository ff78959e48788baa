// Test-only helpers for the engine tests: the model fixtures' golden files.
// Fixture paths, temporary directories and file editing come from the
// checkpoint reader's test helpers (worker/checkpoint/test_util.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/engine.h"

namespace nightshift::engine::testing {

// A fixture's golden.json: an independent float32 reference's results.
struct Golden {
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::vector<float>> last_logits;  // per prompt, run alone
  std::vector<std::vector<TokenId>> greedy;     // per prompt, greedy_steps tokens
  double atol = 0;  // for an engine computing in float32, whatever the stored dtype
  // A mixture of experts' smallest gap between the k-th and (k+1)-th router
  // logit over the prompts (router_min_margin); 0 for a dense model.
  double router_min_margin = 0;
};

// The logit tolerance for projections that round their inputs to BF16 (the
// accelerator path on BF16 weights): four BF16 steps (2^-8 relative each)
// at the largest reference logit. The reference's own BF16 tolerance (0.02
// for llama-bf16) is for float32 compute on BF16 weights; rounding every
// projection's input lands 0.034-0.048 away on that fixture.
double Bf16ProjectionAtol(const Golden& golden);

// Reads $NIGHTSHIFT_TEST_DATA/models/<name>/golden.json; aborts when unreadable.
Golden LoadGolden(const std::string& name);

// The fixture's config.json "model_type".
std::string FixtureModelType(const std::string& name);
// Its "torch_dtype" ("float32", "bfloat16", ...; empty when absent).
std::string FixtureTorchDtype(const std::string& name);

// Engine::Open, failing the test (and returning null) on an error.
std::unique_ptr<Engine> OpenEngine(const std::string& dir, const EngineOptions& options);

// `prompt` generating `max_new_tokens` greedily, EOS ignored, with the last
// prompt position's logits.
SequenceRequest GreedyRequest(const std::vector<TokenId>& prompt, int64_t max_new_tokens);

// Steps `engine` until nothing is in flight (failing the test on an error)
// and returns every result, by id; appends each pass's figures to `passes`.
std::vector<SequenceResult> Drain(Engine& engine, std::vector<PassStats>* passes = nullptr);

// A fixture's name as a test-name suffix (INSTANTIATE_TEST_SUITE_P's
// naming function): every character but letters and digits as '_'.
std::string FixtureTestName(const ::testing::TestParamInfo<std::string>& info);

// Largest |a[i] - b[i]|; infinity when the sizes differ.
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace nightshift::engine::testing
