// Tokenizer encode throughput: MB/s encoding 1 MB of mixed text (English,
// code, numbers, many scripts, emoji: the texts of the tokenizer fixtures,
// shuffled and numbered so that the text is not one block repeated).
//
//   tokenizer_bench [MODEL_DIR...]
//
// Without arguments it runs every fixture tokenizer under
// tests/data/tokenizers. For each it prints the load time, the token count,
// and MB/s on a fresh tokenizer (empty word cache: "cold") and on a second
// pass over the same text ("warm"), by wall-clock time and by the process's
// CPU time (on a shared, loaded machine the two differ; the CPU figure is the
// tokenizer's own speed). Single-threaded. Not a test: it prints figures, it
// asserts nothing.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using nightshift::tokenizer::Tokenizer;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double CpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec / 1e9;
}

std::vector<std::string> FixtureTexts(const std::string& root) {
  std::vector<std::string> texts;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    std::ifstream cases(entry.path() / "cases.jsonl");
    for (std::string line; std::getline(cases, line);) {
      if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at("text"));
    }
  }
  return texts;
}

// About `bytes` of text: the fixture texts in shuffled order, each preceded
// by a running number.
std::string MixedText(std::vector<std::string> texts, size_t bytes) {
  std::mt19937 random(42);
  std::string out;
  for (int round = 0; out.size() < bytes; ++round) {
    std::shuffle(texts.begin(), texts.end(), random);
    for (const std::string& text : texts) {
      out += std::to_string(round * 1000 + random() % 1000) + ". " + text + "\n";
    }
  }
  return out;
}

void Bench(const std::string& model_dir, const std::string& text) {
  Clock::time_point start = Clock::now();
  auto tokenizer = Tokenizer::FromModelDir(model_dir);
  double load = Seconds(start);
  if (!tokenizer.ok()) {
    std::printf("%-40s  error: %s\n", model_dir.c_str(), tokenizer.status().ToString().c_str());
    return;
  }
  double mb = text.size() / 1e6;
  size_t tokens = 0;
  double wall[2], cpu[2];
  for (int pass = 0; pass < 2; ++pass) {
    start = Clock::now();
    double cpu_start = CpuSeconds();
    auto ids = tokenizer->Encode(text, false);
    wall[pass] = Seconds(start);
    cpu[pass] = CpuSeconds() - cpu_start;
    if (!ids.ok()) {
      std::printf("%-40s  error: %s\n", model_dir.c_str(), ids.status().ToString().c_str());
      return;
    }
    tokens = ids->size();
  }
  std::printf("%-12s %7.2f %6.2f %9zu %10.1f %10.1f %10.1f %10.1f\n",
              std::filesystem::path(model_dir).filename().c_str(), load, mb, tokens, mb / wall[0],
              mb / wall[1], mb / cpu[0], mb / cpu[1]);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = NS_TOKENIZER_FIXTURES;
  std::vector<std::string> dirs(argv + 1, argv + argc);
  if (dirs.empty()) {
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
      if (std::filesystem::exists(entry.path() / "tokenizer.json")) dirs.push_back(entry.path());
    }
    std::sort(dirs.begin(), dirs.end());
  }
  const std::string text = MixedText(FixtureTexts(root), 1'000'000);
  std::printf("%-12s %7s %6s %9s %10s %10s %10s %10s  (MB/s)\n", "tokenizer", "load_s", "MB",
              "tokens", "cold_wall", "warm_wall", "cold_cpu", "warm_cpu");
  for (const std::string& dir : dirs) Bench(dir, text);
  return 0;
}
