// `nightshift run`: runs the engine directly on a checkpoint, no scheduler.
// Every --ids prompt joins one batch; greedy unless sampling is asked for.
// Also built into the standalone `nightshift-engine`.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/flags.h"
#include "worker/engine/engine.h"

namespace nightshift::cli {
namespace {

using engine::Engine;
using engine::PassStats;
using engine::SequenceRequest;
using engine::SequenceResult;
using engine::TokenId;

struct RunFlags {
  std::string model_dir;
  std::vector<std::string> ids;
  int64_t max_new_tokens = 16;
  double temperature = 0;
  int64_t top_k = 0;
  double top_p = 1.0;
  int64_t seed = 0;
  std::string stop_ids;
  bool logits = false;
  bool json = false;
};

StatusOr<std::vector<TokenId>> ParseTokenIds(const std::string& text, const std::string& what) {
  NS_ASSIGN_OR_RETURN(std::vector<int64_t> values, ParseIntList(text, what));
  std::vector<TokenId> ids;
  for (int64_t v : values) {
    if (v < 0 || v > INT32_MAX)
      return InvalidArgument(what + ": token id " + std::to_string(v) + " out of range");
    ids.push_back(static_cast<TokenId>(v));
  }
  return ids;
}

// One request per --ids, sequence i seeded with seed + i.
StatusOr<std::vector<SequenceRequest>> BuildRequests(const RunFlags& f, const FlagSet& flags) {
  if (f.model_dir.empty()) return InvalidArgument("--model-dir is required");
  if (f.ids.empty()) return InvalidArgument("at least one --ids is required");
  // Sampling is asked for by a positive --temperature, or by --top-k/--top-p
  // (at temperature 1 unless given).
  const bool sampling_flag = flags.Seen("top-k") || flags.Seen("top-p");
  double temperature = flags.Seen("temperature") ? f.temperature : (sampling_flag ? 1.0 : 0.0);
  uint64_t seed = flags.Seen("seed") ? static_cast<uint64_t>(f.seed) : std::random_device{}();
  std::vector<TokenId> stop_ids;
  if (!f.stop_ids.empty()) {
    NS_ASSIGN_OR_RETURN(stop_ids, ParseTokenIds(f.stop_ids, "--stop-ids"));
  }
  std::vector<SequenceRequest> requests;
  for (size_t i = 0; i < f.ids.size(); ++i) {
    SequenceRequest r;
    NS_ASSIGN_OR_RETURN(r.prompt, ParseTokenIds(f.ids[i], "--ids"));
    r.max_new_tokens = f.max_new_tokens;
    r.sampling = {temperature, f.top_k, f.top_p, seed + i};
    r.stop_ids = stop_ids;
    r.return_last_logits = f.logits;
    NS_RETURN_IF_ERROR(engine::ValidateSamplingParams(r.sampling).Prefixed("--ids " + f.ids[i]));
    requests.push_back(std::move(r));
  }
  return requests;
}

struct RunOutput {
  std::vector<SequenceResult> sequences;  // in --ids order
  std::vector<PassStats> passes;
};

StatusOr<RunOutput> RunBatch(const std::string& model_dir, std::vector<SequenceRequest> requests) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(model_dir));
  for (size_t i = 0; i < requests.size(); ++i) {
    StatusOr<engine::SequenceId> id = engine->Add(std::move(requests[i]));
    if (!id.ok()) return id.status().Prefixed("--ids #" + std::to_string(i + 1));
  }
  RunOutput out;
  while (engine->active() > 0) {
    NS_ASSIGN_OR_RETURN(PassStats stats, engine->Step());
    out.passes.push_back(stats);
    for (SequenceResult& r : engine->TakeFinished()) out.sequences.push_back(std::move(r));
  }
  std::sort(out.sequences.begin(), out.sequences.end(),
            [](const SequenceResult& a, const SequenceResult& b) { return a.id < b.id; });
  return out;
}

uint64_t TotalBytes(const RunOutput& out) {
  uint64_t bytes = 0;
  for (const PassStats& p : out.passes) bytes += p.bytes_read;
  return bytes;
}

void PrintJson(const RunOutput& out, bool logits) {
  nlohmann::json sequences = nlohmann::json::array();
  for (const SequenceResult& r : out.sequences) {
    nlohmann::json s = {{"prompt_ids", r.prompt},
                        {"generated_ids", r.generated},
                        {"finish_reason", engine::FinishReasonName(r.finish_reason)}};
    if (logits) s["last_logits"] = r.last_logits;
    sequences.push_back(std::move(s));
  }
  nlohmann::json pass_seconds = nlohmann::json::array();
  for (const PassStats& p : out.passes) pass_seconds.push_back(p.seconds);
  nlohmann::json doc = {{"sequences", std::move(sequences)},
                        {"passes", out.passes.size()},
                        {"pass_seconds", std::move(pass_seconds)},
                        {"bytes_read", TotalBytes(out)}};
  std::cout << doc.dump() << "\n";
}

std::string JoinIds(const std::vector<TokenId>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) text += (i ? "," : "") + std::to_string(ids[i]);
  return text;
}

void PrintText(const RunOutput& out, bool logits) {
  double seconds = 0;
  for (const PassStats& p : out.passes) seconds += p.seconds;
  for (size_t i = 0; i < out.sequences.size(); ++i) {
    const SequenceResult& r = out.sequences[i];
    std::cout << "sequence " << i << ": prompt " << JoinIds(r.prompt) << " -> "
              << JoinIds(r.generated) << " (" << engine::FinishReasonName(r.finish_reason) << ")\n";
    if (logits) {
      std::cout << "  last_logits:";
      for (float v : r.last_logits) std::cout << " " << v;
      std::cout << "\n";
    }
  }
  std::cout << out.passes.size() << " passes in " << seconds << " s, " << TotalBytes(out)
            << " checkpoint bytes read\n";
}

int Run(int argc, char** argv) {
  RunFlags f;
  FlagSet flags(
      "nightshift run --model-dir DIR --ids 1,5,9 [--ids 4,2 ...] [--max-new-tokens N] "
      "[--temperature T --top-k K --top-p P --seed S] [--stop-ids 2,7] [--logits] [--json]",
      "Runs every --ids prompt through the checkpoint as one batch, streaming it one layer at a\n"
      "time, and prints the generated token ids. Greedy unless --temperature, --top-k or --top-p\n"
      "asks for sampling; sequence i is seeded with --seed + i (random when --seed is absent).\n"
      "Generation stops at the model's EOS ids, at --stop-ids, or after --max-new-tokens.\n"
      "A prompt longer than the model's context is an error, never truncated.");
  flags.String("model-dir", &f.model_dir, "checkpoint directory (config.json, *.safetensors)",
               "DIR");
  flags.StringList("ids", &f.ids, "a prompt as comma-separated token ids", "IDS");
  flags.Int("max-new-tokens", &f.max_new_tokens, "tokens to generate per prompt (default 16)");
  flags.Double("temperature", &f.temperature, "sampling temperature; 0 is greedy", "T");
  flags.Int("top-k", &f.top_k, "sample among the K most likely tokens (0: all)", "K");
  flags.Double("top-p", &f.top_p, "sample from the smallest set with probability >= P", "P");
  flags.Int("seed", &f.seed, "seed of sequence 0; sequence i uses seed + i", "S");
  flags.String("stop-ids", &f.stop_ids, "comma-separated token ids that end a sequence", "IDS");
  flags.Bool("logits", &f.logits,
             "also print the full-vocabulary logits at the last prompt position");
  flags.Bool("json", &f.json, "print one JSON document");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;

  StatusOr<std::vector<SequenceRequest>> requests = BuildRequests(f, flags);
  if (!requests.ok()) return Fail("run", requests.status());
  StatusOr<RunOutput> out = RunBatch(f.model_dir, std::move(requests).value());
  if (!out.ok()) return Fail("run", out.status());
  if (f.json) {
    PrintJson(*out, f.logits);
  } else {
    PrintText(*out, f.logits);
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("run", "run prompts through a checkpoint directly (no scheduler)", Run);

}  // namespace nightshift::cli
