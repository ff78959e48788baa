// Classification throughput: N prompts of ~P tokens, each scored against L
// labels, on a generated checkpoint, under a KV budget that limits how many
// sequences share a pass.
//
//   one-pass:   each prompt and all its labels in one sequence (tree mask);
//   per-label:  each prompt + label as its own sequence, the way an engine
//               without tree attention scores labels (one prompt pass per
//               label, the prompt's tokens recomputed L times).
//
// Prints passes used, tokens computed, seconds and prompts/s for both, and
// their ratios. Figures from one run; not a test.
//
//   classify_bench [--prompts 256] [--prompt-tokens 500] [--labels 4]
//                  [--kv-budget-mb 64] [--hidden 128] [--layers 4]
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "common/flags.h"
#include "worker/engine/engine.h"
#include "worker/generator/generator.h"

namespace nightshift {
namespace {

using engine::Engine;
using engine::SequenceRequest;
using engine::TokenId;

struct Outcome {
  int64_t passes = 0;
  int64_t tokens = 0;
  double seconds = 0;
};

// Feeds `requests` to the engine, at most as many at once as their KV cache
// fits in `kv_budget` bytes (`kv_per_token` bytes per cached token), and runs
// passes until all finish.
StatusOr<Outcome> Run(Engine& engine, const std::vector<SequenceRequest>& requests,
                      uint64_t kv_budget, uint64_t kv_per_token) {
  Outcome out;
  auto start = std::chrono::steady_clock::now();
  size_t next = 0;
  while (next < requests.size() || engine.active() > 0) {
    uint64_t in_flight = 0;
    while (next < requests.size()) {
      const SequenceRequest& r = requests[next];
      uint64_t tokens = r.prompt.size();
      for (const auto& label : r.labels) tokens += label.size();
      uint64_t need = tokens * kv_per_token;
      if (in_flight > 0 && in_flight + need > kv_budget) break;
      NS_RETURN_IF_ERROR(engine.Add(r).status());
      in_flight += need;
      ++next;
    }
    NS_ASSIGN_OR_RETURN(engine::PassStats stats, engine.Step());
    ++out.passes;
    out.tokens += stats.tokens;
    engine.TakeFinished();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

int Main(int argc, char** argv) {
  int64_t prompts = 256, prompt_tokens = 500, labels = 4, kv_budget_mb = 64, hidden = 128,
          layers = 4;
  FlagSet flags("classify_bench [flags]", "One-pass classification vs one sequence per label.");
  flags.Int("prompts", &prompts, "prompts to classify (default 256)");
  flags.Int("prompt-tokens", &prompt_tokens, "tokens per prompt (default 500, +-10%)");
  flags.Int("labels", &labels, "labels per prompt, 1 to 3 tokens each (default 4)");
  flags.Int("kv-budget-mb", &kv_budget_mb, "KV cache budget that bounds a pass (default 64)");
  flags.Int("hidden", &hidden, "hidden size of the generated model (default 128)");
  flags.Int("layers", &layers, "layers of the generated model (default 4)");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested() || !parsed.ok()) {
    std::fprintf(parsed.ok() ? stdout : stderr, "%s%s\n",
                 parsed.ok() ? "" : parsed.message().c_str(), flags.Help().c_str());
    return parsed.ok() ? 0 : 2;
  }

  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("ns_classify_bench_" + std::to_string(getpid()));
  generator::CheckpointSpec spec;
  spec.arch = "llama";
  spec.hidden = hidden;
  spec.layers = layers;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.intermediate = 3 * hidden;
  spec.vocab = 1000;
  spec.max_position = 2 * prompt_tokens + 64;
  spec.seed = 1;
  auto written = generator::WriteCheckpoint(spec, dir.string());
  if (!written.ok()) {
    std::fprintf(stderr, "make checkpoint: %s\n", written.status().ToString().c_str());
    return 1;
  }
  auto opened = Engine::Open(dir.string());
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    fs::remove_all(dir);
    return 1;
  }
  Engine& engine = **opened;
  const engine::ModelConfig& c = engine.config();
  const uint64_t kv_per_token = 2ull * c.num_layers * c.kv_dim() * sizeof(float);

  std::mt19937 rng(7);
  std::uniform_int_distribution<TokenId> token(3, static_cast<TokenId>(c.vocab_size - 1));
  std::uniform_int_distribution<int64_t> length(prompt_tokens * 9 / 10, prompt_tokens * 11 / 10);
  std::uniform_int_distribution<int> label_length(1, 3);
  std::vector<SequenceRequest> one_pass, per_label;
  for (int64_t i = 0; i < prompts; ++i) {
    SequenceRequest r;
    r.prompt.resize(static_cast<size_t>(length(rng)));
    for (TokenId& t : r.prompt) t = token(rng);
    for (int64_t j = 0; j < labels; ++j) {
      std::vector<TokenId> label(static_cast<size_t>(label_length(rng)));
      for (TokenId& t : label) t = token(rng);
      SequenceRequest alone;
      alone.prompt = r.prompt;
      alone.prompt.insert(alone.prompt.end(), label.begin(), label.end());
      alone.max_new_tokens = 0;
      per_label.push_back(std::move(alone));
      r.labels.push_back(std::move(label));
    }
    one_pass.push_back(std::move(r));
  }

  const uint64_t budget = static_cast<uint64_t>(kv_budget_mb) << 20;
  auto a = Run(engine, one_pass, budget, kv_per_token);
  auto b = a.ok() ? Run(engine, per_label, budget, kv_per_token) : a;
  fs::remove_all(dir);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "run: %s\n", (a.ok() ? b : a).status().ToString().c_str());
    return 1;
  }
  std::printf(
      "model: llama hidden %lld, %lld layers, %.1f MB; %lld prompts of ~%lld tokens, "
      "%lld labels of 1-3 tokens; KV budget %lld MB (%.1f kB per token)\n",
      static_cast<long long>(hidden), static_cast<long long>(layers),
      static_cast<double>(written->tensor_bytes) / 1e6, static_cast<long long>(prompts),
      static_cast<long long>(prompt_tokens), static_cast<long long>(labels),
      static_cast<long long>(kv_budget_mb), static_cast<double>(kv_per_token) / 1024);
  std::printf("%-10s %7s %10s %9s %10s\n", "mode", "passes", "tokens", "seconds", "prompts/s");
  for (auto [name, o] : {std::pair{"one-pass", *a}, {"per-label", *b}}) {
    std::printf("%-10s %7lld %10lld %9.2f %10.1f\n", name, static_cast<long long>(o.passes),
                static_cast<long long>(o.tokens), o.seconds,
                static_cast<double>(prompts) / o.seconds);
  }
  std::printf("per-label / one-pass: passes x%.2f, tokens x%.2f, time x%.2f\n",
              static_cast<double>(b->passes) / static_cast<double>(a->passes),
              static_cast<double>(b->tokens) / static_cast<double>(a->tokens),
              b->seconds / a->seconds);
  return 0;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) { return nightshift::Main(argc, argv); }
