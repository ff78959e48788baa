// Shared helpers for the tokenizer tests: where the fixtures are, and the
// fixture tokenizers loaded once per test binary (loading Qwen3's 11 MB
// tokenizer.json takes a noticeable fraction of a second).
#pragma once

#include <time.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing/paths.h"
#include "worker/tokenizer/tokenizer.h"

namespace nightshift::tokenizer::testing {

// Time bounds in tests are loose guards against quadratic behaviour, not
// benchmarks; sanitizer and unoptimized builds get ten times the time.
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
inline constexpr double kTimeBoundFactor = 10;
#else
inline constexpr double kTimeBoundFactor = 1;
#endif

// CPU time of the calling thread, so that a loaded machine does not count.
inline double ThreadCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// tests/data/tokenizers (testutil::DataPath).
inline std::string FixtureRoot() { return testutil::DataPath("tokenizers"); }

// The fixture tokenizer `name` ("qwen3", "mistral7b", "gpt2") loaded with
// FromModelDir, or nullptr (with a test failure) if it does not load.
inline const Tokenizer* Fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    StatusOr<Tokenizer> tokenizer = Tokenizer::FromModelDir(FixtureRoot() + "/" + name);
    EXPECT_TRUE(tokenizer.ok()) << name << ": " << tokenizer.status().ToString();
    std::unique_ptr<Tokenizer> owned;
    if (tokenizer.ok()) owned = std::make_unique<Tokenizer>(std::move(tokenizer).value());
    it = loaded.emplace(name, std::move(owned)).first;
  }
  return it->second.get();
}

}  // namespace nightshift::tokenizer::testing
