// Test-only helpers for the engine tests: the model fixtures' golden files.
// Fixture paths, temporary directories and file editing come from the
// checkpoint reader's test helpers (worker/checkpoint/test_util.h).
#pragma once

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
};

// Reads $NIGHTSHIFT_TEST_DATA/models/<name>/golden.json; aborts when unreadable.
Golden LoadGolden(const std::string& name);

// The fixture's config.json "model_type".
std::string FixtureModelType(const std::string& name);

// Steps `engine` until nothing is in flight (failing the test on an error)
// and returns every result, by id; appends each pass's figures to `passes`.
std::vector<SequenceResult> Drain(Engine& engine, std::vector<PassStats>* passes = nullptr);

// Largest |a[i] - b[i]|; infinity when the sizes differ.
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace nightshift::engine::testing
