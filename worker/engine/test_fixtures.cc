#include "worker/engine/test_fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "worker/checkpoint/test_util.h"

namespace nightshift::engine::testing {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "cannot read " << path << "\n";
    std::abort();
  }
  return nlohmann::json::parse(in);
}

}  // namespace

Golden LoadGolden(const std::string& name) {
  nlohmann::json j = ReadJson(checkpoint::testing::FixtureDir(name) + "/golden.json");
  Golden g;
  j.at("prompts").get_to(g.prompts);
  j.at("last_logits").get_to(g.last_logits);
  j.at("greedy").get_to(g.greedy);
  // The engine computes in float32, which is what this tolerance is for.
  g.atol = j.at("atol_if_computing_in_fp32").get<double>();
  g.router_min_margin = j.value("router_min_margin", 0.0);
  return g;
}

std::string FixtureModelType(const std::string& name) {
  return ReadJson(checkpoint::testing::FixtureDir(name) + "/config.json").value("model_type", "");
}

double Bf16ProjectionAtol(const Golden& golden) {
  double largest = 0;
  for (const std::vector<float>& logits : golden.last_logits) {
    for (float v : logits) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  }
  return 4 * std::ldexp(largest, -8);
}

std::string FixtureTorchDtype(const std::string& name) {
  return ReadJson(checkpoint::testing::FixtureDir(name) + "/config.json").value("torch_dtype", "");
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

std::unique_ptr<Engine> OpenEngine(const std::string& dir, const EngineOptions& options) {
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(dir, options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

SequenceRequest GreedyRequest(const std::vector<TokenId>& prompt, int64_t max_new_tokens) {
  SequenceRequest r;
  r.prompt = prompt;
  r.max_new_tokens = max_new_tokens;
  r.ignore_eos = true;
  r.return_last_logits = true;
  return r;
}

std::string FixtureTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

std::vector<SequenceResult> Drain(Engine& engine, std::vector<PassStats>* passes) {
  std::vector<SequenceResult> results;
  while (engine.active() > 0) {
    StatusOr<PassStats> stats = engine.Step();
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (!stats.ok()) break;
    if (passes != nullptr) passes->push_back(*stats);
    for (SequenceResult& r : engine.TakeFinished()) results.push_back(std::move(r));
  }
  std::sort(results.begin(), results.end(),
            [](const SequenceResult& a, const SequenceResult& b) { return a.id < b.id; });
  return results;
}

}  // namespace nightshift::engine::testing
