// Classification throughput: N prompts of ~P tokens, each scored against L
// labels, on a generated checkpoint, under a KV budget that limits how many
// sequences share a pass.
//
//   one-pass:   each prompt and all its labels in one sequence (a tree);
//   per-label:  each prompt + label as its own sequence, the way an engine
//               without tree attention scores labels (one prompt pass per
//               label, the prompt's tokens recomputed L times: prefix
//               sharing off, EngineOptions::share_prefixes).
//
// With --memory-budget-mb M, also at that fixed memory (what it leaves after
// the stream buffers and the activation working set, planner/model_facts.h):
//
//   reserve-kv:   every classification reserving the KV cache of its prompt
//                 and labels in every layer, as the engine and the worker
//                 sized them before one-pass jobs stopped keeping a cache;
//   pass-tokens:  the engine's own admission now: a pass-token budget of
//                 what is left / planner::PassTokenBytes (hidden states and
//                 one layer's K/V per token).
//
// Prints passes used, tokens computed, seconds and prompts/s; at the memory
// budget also prompts per pass, seconds and bytes per pass and their ratio
// to the fastest cold read of those bytes (common/disk_bench.h, measured in
// the same run). Figures from one run; not a test.
//
// With --shared-prefix-tokens S, instead: N prompts that are one S-token
// instruction followed by an --item-tokens item each, scored against three
// one-token labels, on a generated ~0.5 GB BF16 Llama (hidden 1024, 16
// layers; --layers overrides the depth), with prefix sharing on (each pass
// computes the instruction once) and off (every prompt whole; run on the
// first --unshared-prompts prompts only, since it computes S + item tokens
// per prompt: its prompts/s is their rate). Prints passes, tokens computed,
// those computed once for several prompts ("shared") and those read from a
// prefix kept from the pass before ("kept"), prompts/s, seconds and MB per
// pass against the fastest cold read, and compute seconds per pass.
//
// With --max-new-tokens G as well, the prompts generate G greedy tokens each
// instead of being classified, under a KV budget of --shared-kv-budget-mb
// (default 256): with sharing on, the going-on sequences hold the
// instruction once (KVCache::Share), so many more of them fit the budget
// at once than with it off, where each holds its own copy. Adds the most
// sequences one pass ran and generated tokens per second.
//
//   classify_bench [--prompts 256] [--prompt-tokens 500] [--labels 4]
//                  [--kv-budget-mb 64] [--hidden 128] [--layers 4]
//                  [--memory-budget-mb 0]
//   classify_bench --shared-prefix-tokens 1500 [--item-tokens 50]
//                  [--prompts 256] [--unshared-prompts 16]
//                  [--pass-token-budget 0] [--layers 16]
//                  [--max-new-tokens 0 [--shared-kv-budget-mb 256]]
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "common/command_line.h"
#include "common/disk_bench.h"
#include "planner/model_facts.h"
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
  int64_t shared_tokens = 0;
  int64_t kept_tokens = 0;
  double seconds = 0;
  uint64_t bytes_read = 0;
  double io_seconds = 0;
  double compute_seconds = 0;
  int64_t most_sequences = 0;  // in one pass
};

// Runs passes until every request finished, adding before each pass the next
// requests for as long as `admit` takes them (it returns false to stop, or
// an error).
template <typename Admit>
StatusOr<Outcome> Drain(Engine& engine, const std::vector<SequenceRequest>& requests, Admit admit) {
  Outcome out;
  auto start = std::chrono::steady_clock::now();
  size_t next = 0;
  while (next < requests.size() || engine.active() > 0) {
    while (next < requests.size()) {
      NS_ASSIGN_OR_RETURN(bool added, admit(requests[next]));
      if (!added) break;
      ++next;
    }
    NS_ASSIGN_OR_RETURN(engine::PassStats stats, engine.Step());
    ++out.passes;
    out.tokens += stats.tokens;
    out.shared_tokens += stats.shared_tokens;
    out.kept_tokens += stats.kept_prefix_tokens;
    out.compute_seconds += stats.compute_seconds;
    out.bytes_read += stats.bytes_read;
    out.io_seconds += stats.io_seconds;
    out.most_sequences = std::max(out.most_sequences, stats.sequences);
    engine.TakeFinished();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// Feeds `requests` to the engine, at most as many at once as their KV cache
// (prompt and labels, `kv_per_token` bytes per token) fits in `kv_budget`
// bytes, and runs passes until all finish.
StatusOr<Outcome> Run(Engine& engine, const std::vector<SequenceRequest>& requests,
                      uint64_t kv_budget, uint64_t kv_per_token) {
  uint64_t in_flight = 0;
  return Drain(engine, requests, [&](const SequenceRequest& r) -> StatusOr<bool> {
    if (engine.active() == 0) in_flight = 0;  // the previous pass finished them all
    const uint64_t need = static_cast<uint64_t>(Engine::FirstPassTokens(r)) * kv_per_token;
    if (in_flight > 0 && in_flight + need > kv_budget) return false;
    NS_RETURN_IF_ERROR(engine.Add(r).status());
    in_flight += need;
    return true;
  });
}

// Feeds `requests` as the engine's pass-token budget admits them.
StatusOr<Outcome> RunByPassTokens(Engine& engine, const std::vector<SequenceRequest>& requests) {
  return Drain(engine, requests, [&](const SequenceRequest& r) -> StatusOr<bool> {
    StatusOr<engine::SequenceId> id = engine.Add(r);
    if (id.status().code() == StatusCode::kResourceExhausted && engine.active() > 0) return false;
    NS_RETURN_IF_ERROR(id.status());
    return true;
  });
}

// The reserve-kv and pass-tokens runs at `memory_budget` bytes (see the top
// of the file), and their table.
Status AtAMemoryBudget(const std::string& dir, uint64_t memory_budget,
                       const std::vector<SequenceRequest>& requests, Engine& engine,
                       uint64_t kv_per_token) {
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt, checkpoint::ReadCheckpoint(dir));
  const std::vector<uint64_t> groups = planner::StreamedGroupBytes(ckpt);
  const uint64_t working = planner::StreamBufferBytes(groups, {}, /*prefetch=*/true) +
                           planner::ActivationWorkingSetBytes(engine.config(), 0);
  if (memory_budget <= working) {
    return InvalidArgument("--memory-budget-mb is below the working set of " +
                           std::to_string(working) + " bytes");
  }
  const uint64_t left = memory_budget - working;
  NS_ASSIGN_OR_RETURN(Outcome before, Run(engine, requests, left, kv_per_token));
  engine::EngineOptions options;
  options.pass_token_budget = static_cast<int64_t>(left / planner::PassTokenBytes(engine.config()));
  NS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> budgeted, Engine::Open(dir, options));
  NS_ASSIGN_OR_RETURN(Outcome after, RunByPassTokens(*budgeted, requests));
  NS_ASSIGN_OR_RETURN(DiskBenchResult disk, RunDiskBench(dir));

  std::printf(
      "\nat a memory budget of %.1f MB: %.1f MB after the stream buffers and activations, i.e. "
      "%.0f prompt tokens of KV or %lld pass tokens; fastest cold read %.2f GB/s\n",
      static_cast<double>(memory_budget) / 1e6, static_cast<double>(left) / 1e6,
      static_cast<double>(left) / static_cast<double>(kv_per_token),
      static_cast<long long>(options.pass_token_budget), disk.FastestGbs());
  std::printf("%-12s %7s %14s %9s %10s %8s %12s %16s\n", "mode", "passes", "prompts/pass",
              "seconds", "prompts/s", "s/pass", "MB/pass", "pass/cold read");
  for (auto [name, o] : {std::pair{"reserve-kv", before}, {"pass-tokens", after}}) {
    const double passes = static_cast<double>(o.passes);
    const double bytes_per_pass = static_cast<double>(o.bytes_read) / passes;
    const double cold = bytes_per_pass / (disk.FastestGbs() * 1e9);
    std::printf("%-12s %7lld %14.1f %9.2f %10.2f %8.3f %12.1f %16.2f\n", name,
                static_cast<long long>(o.passes), static_cast<double>(requests.size()) / passes,
                o.seconds, static_cast<double>(requests.size()) / o.seconds, o.seconds / passes,
                bytes_per_pass / 1e6, o.seconds / passes / cold);
  }
  std::printf(
      "pass-tokens / reserve-kv: passes x%.2f, prompts/s x%.2f (compute %.0f%% of the "
      "pass-tokens run's time, the rest waiting for weights)\n",
      static_cast<double>(after.passes) / static_cast<double>(before.passes),
      before.seconds / after.seconds, 100.0 * (after.seconds - after.io_seconds) / after.seconds);
  return Status::Ok();
}

struct SharedPrefixFlags {
  int64_t prompts = 256;
  int64_t shared_tokens = 0;
  int64_t item_tokens = 50;
  int64_t unshared_prompts = 16;
  int64_t pass_token_budget = 0;
  int64_t layers = 16;
  int64_t max_new_tokens = 0;  // 0: classify
  int64_t kv_budget_mb = 256;  // with max_new_tokens
};

// The shared-prefix comparison (see the top of the file), on a checkpoint
// generated in `dir`.
Status SharedPrefixBench(const SharedPrefixFlags& f, const std::string& dir) {
  generator::CheckpointSpec spec;
  spec.arch = "llama";
  spec.hidden = 1024;
  spec.layers = f.layers;
  spec.heads = 16;
  spec.kv_heads = 8;
  spec.intermediate = 2816;
  spec.vocab = 32000;
  spec.max_position = f.shared_tokens + f.item_tokens + f.max_new_tokens + 64;
  spec.seed = 3;
  NS_ASSIGN_OR_RETURN(generator::WriteReport written, generator::WriteCheckpoint(spec, dir));
  std::mt19937 rng(11);
  std::uniform_int_distribution<TokenId> token(3, static_cast<TokenId>(spec.vocab - 1));
  std::vector<TokenId> instruction(static_cast<size_t>(f.shared_tokens));
  for (TokenId& t : instruction) t = token(rng);
  std::vector<SequenceRequest> requests;
  for (int64_t i = 0; i < f.prompts; ++i) {
    SequenceRequest r;
    r.prompt = instruction;
    for (int64_t k = 0; k < f.item_tokens; ++k) r.prompt.push_back(token(rng));
    if (f.max_new_tokens > 0) {
      r.max_new_tokens = f.max_new_tokens;
      r.ignore_eos = true;
    } else {
      r.labels = {{101}, {202}, {303}};
    }
    requests.push_back(std::move(r));
  }
  struct Mode {
    const char* name;
    bool share;
    std::vector<SequenceRequest> requests;
  };
  const size_t unshared = static_cast<size_t>(std::min(f.unshared_prompts, f.prompts));
  std::vector<Mode> modes = {
      {"shared", true, requests},
      {"unshared", false,
       std::vector<SequenceRequest>(requests.begin(), requests.begin() + unshared)}};
  std::vector<Outcome> outcomes;
  for (const Mode& mode : modes) {
    engine::EngineOptions options;
    options.compute_dtype = engine::ComputeDType::kAuto;
    options.pass_token_budget = f.pass_token_budget;
    options.share_prefixes = mode.share;
    if (f.max_new_tokens > 0) options.kv_budget_bytes = static_cast<uint64_t>(f.kv_budget_mb) << 20;
    NS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(dir, options));
    NS_ASSIGN_OR_RETURN(Outcome o, RunByPassTokens(*engine, mode.requests));
    outcomes.push_back(o);
  }
  NS_ASSIGN_OR_RETURN(DiskBenchResult disk, RunDiskBench(dir));
  const std::string task = f.max_new_tokens > 0
                               ? std::to_string(f.max_new_tokens) + " new tokens each, KV budget " +
                                     std::to_string(f.kv_budget_mb) + " MiB"
                               : std::string("3 one-token labels");
  std::printf(
      "model: llama hidden %lld, %lld layers, BF16, %.1f MB; %lld prompts = %lld shared + %lld "
      "item tokens, %s; pass-token budget %lld; fastest cold read %.2f GB/s\n",
      static_cast<long long>(spec.hidden), static_cast<long long>(spec.layers),
      static_cast<double>(written.tensor_bytes) / 1e6, static_cast<long long>(f.prompts),
      static_cast<long long>(f.shared_tokens), static_cast<long long>(f.item_tokens), task.c_str(),
      static_cast<long long>(f.pass_token_budget), disk.FastestGbs());
  std::printf("%-9s %8s %7s %10s %8s %6s %9s %10s %8s %9s %8s %10s %9s %10s\n", "mode", "prompts",
              "passes", "tokens", "shared", "kept", "seconds", "prompts/s", "s/pass", "MB/pass",
              "compute", "pass/read", "most seq", "gen tok/s");
  for (size_t m = 0; m < modes.size(); ++m) {
    const Outcome& o = outcomes[m];
    const double passes = static_cast<double>(o.passes);
    const double bytes_per_pass = static_cast<double>(o.bytes_read) / passes;
    const double read_seconds = bytes_per_pass / (disk.FastestGbs() * 1e9);
    const double generated =
        static_cast<double>(modes[m].requests.size()) * static_cast<double>(f.max_new_tokens);
    std::printf(
        "%-9s %8zu %7lld %10lld %8lld %6lld %9.2f %10.2f %8.2f %9.1f %8.2f %10.2f %9lld %10.2f\n",
        modes[m].name, modes[m].requests.size(), static_cast<long long>(o.passes),
        static_cast<long long>(o.tokens), static_cast<long long>(o.shared_tokens),
        static_cast<long long>(o.kept_tokens), o.seconds,
        static_cast<double>(modes[m].requests.size()) / o.seconds, o.seconds / passes,
        bytes_per_pass / 1e6, o.compute_seconds / passes, o.seconds / passes / read_seconds,
        static_cast<long long>(o.most_sequences), generated / o.seconds);
  }
  const double shared_rate = static_cast<double>(modes[0].requests.size()) / outcomes[0].seconds;
  const double unshared_rate = static_cast<double>(modes[1].requests.size()) / outcomes[1].seconds;
  std::printf("shared / unshared: prompts/s x%.1f, tokens per prompt x%.1f fewer\n",
              shared_rate / unshared_rate,
              (static_cast<double>(outcomes[1].tokens) / static_cast<double>(unshared)) /
                  (static_cast<double>(outcomes[0].tokens) / static_cast<double>(f.prompts)));
  return Status::Ok();
}

int Main(int argc, char** argv) {
  int64_t prompts = 256, prompt_tokens = 500, labels = 4, kv_budget_mb = 64, hidden = 128,
          layers = 0, memory_budget_mb = 0;
  SharedPrefixFlags shared;
  CommandLine flags("classify_bench [flags]", "One-pass classification vs one sequence per label.");
  flags.Int("prompts", &prompts, "prompts to classify (default 256)");
  flags.Int("prompt-tokens", &prompt_tokens, "tokens per prompt (default 500, +-10%)");
  flags.Int("labels", &labels, "labels per prompt, 1 to 3 tokens each (default 4)");
  flags.Int("kv-budget-mb", &kv_budget_mb, "KV cache budget that bounds a pass (default 64)");
  flags.Int("hidden", &hidden, "hidden size of the generated model (default 128)");
  flags.Int("layers", &layers,
            "layers of the generated model (default 4; 16 with --shared-prefix-tokens)");
  flags.Int("memory-budget-mb", &memory_budget_mb,
            "also compare KV-reserving and pass-token admission at this memory budget (MiB; "
            "default 0: not run)");
  flags.Int("shared-prefix-tokens", &shared.shared_tokens,
            "instead: prompts sharing an instruction of this many tokens, sharing on and off "
            "(default 0: not run)");
  flags.Int("item-tokens", &shared.item_tokens,
            "with --shared-prefix-tokens: tokens per item "
            "(default 50)");
  flags.Int("unshared-prompts", &shared.unshared_prompts,
            "with --shared-prefix-tokens: prompts the sharing-off run classifies (default 16)");
  flags.Int("pass-token-budget", &shared.pass_token_budget,
            "with --shared-prefix-tokens: tokens a pass may compute (default 0: no limit)");
  flags.Int("max-new-tokens", &shared.max_new_tokens,
            "with --shared-prefix-tokens: generate this many tokens per prompt instead of "
            "classifying (default 0)");
  flags.Int("shared-kv-budget-mb", &shared.kv_budget_mb,
            "with --max-new-tokens: the engine's KV budget in MiB (default 256)");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested() || !parsed.ok()) {
    std::fprintf(parsed.ok() ? stdout : stderr, "%s%s\n",
                 parsed.ok() ? "" : parsed.message().c_str(), flags.Help().c_str());
    return parsed.ok() ? 0 : 2;
  }

  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("ns_classify_bench_" + std::to_string(getpid()));
  if (shared.shared_tokens > 0) {
    shared.prompts = prompts;
    if (layers > 0) shared.layers = layers;
    const Status st = SharedPrefixBench(shared, dir.string());
    fs::remove_all(dir);
    if (!st.ok()) {
      std::fprintf(stderr, "shared prefixes: %s\n", st.ToString().c_str());
      return 1;
    }
    return 0;
  }
  if (layers == 0) layers = 4;
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
  // Per label as an engine without a trie: no prefix shared between them.
  engine::EngineOptions whole;
  whole.share_prefixes = false;
  auto unshared = Engine::Open(dir.string(), whole);
  if (!unshared.ok()) {
    std::fprintf(stderr, "open: %s\n", unshared.status().ToString().c_str());
    fs::remove_all(dir);
    return 1;
  }
  auto b = a.ok() ? Run(**unshared, per_label, budget, kv_per_token) : a;
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "run: %s\n", (a.ok() ? b : a).status().ToString().c_str());
    fs::remove_all(dir);
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
  if (memory_budget_mb > 0) {
    const Status st = AtAMemoryBudget(dir.string(), static_cast<uint64_t>(memory_budget_mb) << 20,
                                      one_pass, engine, kv_per_token);
    if (!st.ok()) {
      std::fprintf(stderr, "at the memory budget: %s\n", st.ToString().c_str());
      fs::remove_all(dir);
      return 1;
    }
  }
  fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) { return nightshift::Main(argc, argv); }
