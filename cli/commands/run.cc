// `nightshift run`: runs the engine directly on a checkpoint, no scheduler.
// Every --ids prompt joins one batch; greedy unless sampling is asked for.
// With --labels, every prompt instead scores the same label set in one pass.
// Also built into the standalone `nightshift-engine`.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/command_line.h"
#include "common/size.h"
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
  std::string labels;
  bool logits = false;
  bool json = false;
  bool direct_io = false;
  bool batch_invariant = true;
  bool share_prefixes = true;
  std::string device = "cpu";
  std::string activation_budget;
  int64_t pass_token_budget = 0;
  std::string kv_dtype = "auto";
  std::string memory_budget;
  std::string host_memory_budget;
  std::string compute_dtype = "auto";
  std::string state_dir;
};

// Where `auto`'s kernel measurement is cached: the worker's default state
// directory, so `run` and a worker on this machine share it.
std::string DefaultStateDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/nightshift";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/nightshift";
  }
  return "/tmp/nightshift-cache";
}

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

// "5,6;7;8,9,10": labels separated by ';', each a comma-separated id list.
StatusOr<std::vector<std::vector<TokenId>>> ParseLabels(const std::string& text) {
  std::vector<std::vector<TokenId>> labels;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(';', begin);
    const std::string item = text.substr(begin, end == std::string::npos ? end : end - begin);
    const std::string what = "--labels: label " + std::to_string(labels.size());
    if (item.empty()) return InvalidArgument(what + " is empty");
    NS_ASSIGN_OR_RETURN(std::vector<TokenId> label, ParseTokenIds(item, what));
    labels.push_back(std::move(label));
    if (end == std::string::npos) return labels;
    begin = end + 1;
  }
}

// Generation flags mean nothing to a classification run: refuse them by name.
Status CheckClassificationFlags(const CommandLine& flags) {
  for (const char* name : {"max-new-tokens", "temperature", "top-k", "top-p", "seed", "stop-ids"}) {
    if (flags.Seen(name)) {
      return InvalidArgument(std::string("--") + name +
                             " is for generation; --labels scores labels and generates nothing");
    }
  }
  return Status::Ok();
}

// One request per --ids, sequence i seeded with seed + i; each with the
// --labels set when given.
StatusOr<std::vector<SequenceRequest>> BuildRequests(const RunFlags& f, const CommandLine& flags) {
  if (f.model_dir.empty()) return InvalidArgument("--model-dir is required");
  if (f.ids.empty()) return InvalidArgument("at least one --ids is required");
  std::vector<std::vector<TokenId>> labels;
  if (flags.Seen("labels")) {
    NS_RETURN_IF_ERROR(CheckClassificationFlags(flags));
    NS_ASSIGN_OR_RETURN(labels, ParseLabels(f.labels));
  }
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
    r.labels = labels;
    NS_RETURN_IF_ERROR(engine::ValidateSamplingParams(r.sampling).Prefixed("--ids " + f.ids[i]));
    requests.push_back(std::move(r));
  }
  return requests;
}

struct RunOutput {
  std::vector<SequenceResult> sequences;  // in --ids order
  std::vector<PassStats> passes;
  int64_t micro_batch_rows = 0;
  uint64_t pinned_bytes = 0;
  uint64_t host_pinned_bytes = 0;
  engine::KvDType kv_dtype = engine::KvDType::kAuto;  // as the engine resolved it
  engine::ComputeChoice compute;
};

StatusOr<RunOutput> RunBatch(const RunFlags& f, std::vector<SequenceRequest> requests) {
  engine::EngineOptions options;
  options.device = f.device;
  options.direct_reads = f.direct_io;
  if (!f.activation_budget.empty()) {
    StatusOr<uint64_t> budget = ParseSize(f.activation_budget);
    if (!budget.ok()) return budget.status().Prefixed("--activation-budget");
    options.activation_budget_bytes = *budget;
  }
  if (f.pass_token_budget < 0) return InvalidArgument("--pass-token-budget must be >= 0");
  options.pass_token_budget = f.pass_token_budget;
  StatusOr<engine::KvDType> kv_dtype = engine::ParseKvDType(f.kv_dtype);
  if (!kv_dtype.ok()) return kv_dtype.status().Prefixed("--kv-dtype");
  options.kv_dtype = *kv_dtype;
  if (!f.memory_budget.empty()) {
    StatusOr<uint64_t> budget = ParseSize(f.memory_budget);
    if (!budget.ok()) return budget.status().Prefixed("--memory-budget");
    options.memory_budget_bytes = *budget;  // KV: exactly what these prompts reserve
  }
  if (!f.host_memory_budget.empty()) {
    StatusOr<uint64_t> budget = ParseSize(f.host_memory_budget);
    if (!budget.ok()) return budget.status().Prefixed("--host-memory-budget");
    options.host_memory_budget_bytes = *budget;
  }
  StatusOr<engine::ComputeDType> compute = engine::ParseComputeDType(f.compute_dtype);
  if (!compute.ok()) return compute.status().Prefixed("--compute-dtype");
  options.compute_dtype = *compute;
  options.batch_invariant = f.batch_invariant;
  options.share_prefixes = f.share_prefixes;
  options.compute_state_dir = f.state_dir.empty() ? DefaultStateDir() : f.state_dir;
  NS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(f.model_dir, options));
  RunOutput out;
  out.micro_batch_rows = engine->micro_batch_rows();
  out.kv_dtype = engine->kv_dtype();
  out.compute = engine->compute();
  size_t next = 0;  // prompts join passes in --ids order, as the pass-token budget allows
  while (next < requests.size() || engine->active() > 0) {
    for (; next < requests.size(); ++next) {
      StatusOr<engine::SequenceId> id = engine->Add(requests[next]);
      if (id.status().code() == StatusCode::kResourceExhausted && engine->active() > 0) break;
      if (!id.ok()) return id.status().Prefixed("--ids #" + std::to_string(next + 1));
    }
    NS_ASSIGN_OR_RETURN(PassStats stats, engine->Step());
    out.passes.push_back(stats);
    for (SequenceResult& r : engine->TakeFinished()) out.sequences.push_back(std::move(r));
  }
  out.pinned_bytes = engine->pinned_bytes();
  out.host_pinned_bytes = engine->host_pinned_bytes();
  std::sort(out.sequences.begin(), out.sequences.end(),
            [](const SequenceResult& a, const SequenceResult& b) { return a.id < b.id; });
  return out;
}

uint64_t TotalBytes(const RunOutput& out) {
  uint64_t bytes = 0;
  for (const PassStats& p : out.passes) bytes += p.bytes_read;
  return bytes;
}

nlohmann::json LabelsJson(const std::vector<engine::LabelScore>& labels) {
  nlohmann::json out = nlohmann::json::array();
  for (const engine::LabelScore& l : labels) {
    out.push_back({{"ids", l.ids},
                   {"logprob", l.logprob},
                   {"token_logprobs", l.token_logprobs},
                   {"probability", l.probability}});
  }
  return out;
}

// The compute choice: what was asked, the kernel per row bucket, and the
// measurement behind it (seconds of one pass's projections per kernel).
nlohmann::json ComputeJson(const engine::ComputeChoice& c) {
  nlohmann::json kernels = nlohmann::json::object();
  for (size_t b = 0; b < engine::kRowBucketCount; ++b) {
    kernels[std::to_string(engine::kRowBuckets[b])] = engine::ProjectionKernelName(c.plan[b]);
  }
  nlohmann::json doc = {{"requested", engine::ComputeDTypeName(c.requested)},
                        {"dtype", c.PlanDType()},
                        {"batch_invariant", c.batch_invariant},
                        {"kernels", kernels},
                        {"measured", c.measurement.has_value()},
                        {"cached", c.cached},
                        {"cache_path", c.cache_path}};
  if (c.measurement) {
    nlohmann::json rates = nlohmann::json::object();
    for (int k = 0; k < engine::kProjectionKernelCount; ++k) {
      const auto kernel = static_cast<engine::ProjectionKernel>(k);
      nlohmann::json row = nlohmann::json::array();
      for (size_t b = 0; b < engine::kRowBucketCount; ++b) {
        row.push_back(c.measurement->FlopsPerSecond(kernel, b));
      }
      rates[engine::ProjectionKernelName(kernel)] = row;
    }
    doc["flops_per_second"] = rates;
  }
  return doc;
}

void PrintJson(const RunOutput& out, bool logits) {
  nlohmann::json sequences = nlohmann::json::array();
  for (const SequenceResult& r : out.sequences) {
    nlohmann::json s = {{"prompt_ids", r.prompt}};
    if (r.labels.empty()) {
      s["generated_ids"] = r.generated;
      s["finish_reason"] = engine::FinishReasonName(r.finish_reason);
    } else {
      s["labels"] = LabelsJson(r.labels);
      s["best"] = r.best_label;
    }
    if (logits) s["last_logits"] = r.last_logits;
    sequences.push_back(std::move(s));
  }
  nlohmann::json pass_seconds = nlohmann::json::array();
  nlohmann::json pass_bytes = nlohmann::json::array();
  nlohmann::json pass_compute = nlohmann::json::array();
  nlohmann::json tokens_computed = nlohmann::json::array();
  int64_t shared_prefix_tokens = 0, kept_prefix_tokens = 0;
  nlohmann::json experts_read = nlohmann::json::array();
  nlohmann::json experts_total = nlohmann::json::array();
  nlohmann::json routed = nlohmann::json::array();
  for (const PassStats& p : out.passes) {
    pass_seconds.push_back(p.seconds);
    pass_bytes.push_back(p.bytes_read);
    tokens_computed.push_back(p.tokens);
    shared_prefix_tokens += p.shared_tokens;
    kept_prefix_tokens += p.kept_prefix_tokens;
    experts_read.push_back(p.experts_read);
    experts_total.push_back(p.experts_total);
    routed.push_back(p.routed_experts);
    pass_compute.push_back({{"dtype", p.compute_dtype},
                            {"kernels", p.projection_kernels},
                            {"projection_flops", p.projection_flops}});
  }
  nlohmann::json doc = {{"sequences", std::move(sequences)},
                        {"passes", out.passes.size()},
                        {"pass_seconds", std::move(pass_seconds)},
                        {"bytes_read", TotalBytes(out)},
                        {"pass_bytes_read", std::move(pass_bytes)},
                        {"pass_tokens_computed", std::move(tokens_computed)},
                        {"shared_prefix_tokens", shared_prefix_tokens},
                        {"kept_prefix_tokens", kept_prefix_tokens},
                        {"pinned_bytes", out.pinned_bytes},
                        {"host_pinned_bytes", out.host_pinned_bytes},
                        {"micro_batch_rows", out.micro_batch_rows},
                        {"kv_dtype", engine::KvDTypeName(out.kv_dtype)},
                        {"compute", ComputeJson(out.compute)},
                        {"pass_compute", std::move(pass_compute)}};
  if (!out.passes.empty() && out.passes[0].experts_total > 0) {  // a mixture of experts
    doc["experts_read"] = std::move(experts_read);
    doc["experts_total"] = std::move(experts_total);
    doc["routed_experts"] = std::move(routed);
  }
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
    std::cout << "sequence " << i << ": prompt " << JoinIds(r.prompt) << " -> ";
    if (r.labels.empty()) {
      std::cout << JoinIds(r.generated) << " (" << engine::FinishReasonName(r.finish_reason)
                << ")\n";
    } else {
      std::cout << "label " << r.best_label << "\n";
      for (size_t j = 0; j < r.labels.size(); ++j) {
        const engine::LabelScore& l = r.labels[j];
        std::cout << "  label " << j << " (" << JoinIds(l.ids) << "): logprob " << l.logprob
                  << ", probability " << l.probability << "\n";
      }
    }
    if (logits) {
      std::cout << "  last_logits:";
      for (float v : r.last_logits) std::cout << " " << v;
      std::cout << "\n";
    }
  }
  std::cout << out.passes.size() << " passes in " << seconds << " s, " << TotalBytes(out)
            << " checkpoint bytes read";
  if (out.pinned_bytes > 0) std::cout << ", " << out.pinned_bytes << " bytes pinned";
  if (out.host_pinned_bytes > 0) {
    std::cout << ", " << out.host_pinned_bytes << " bytes kept in host memory";
  }
  std::cout << "\n";
  std::cout << "compute " << engine::ComputeDTypeName(out.compute.requested) << ": "
            << out.compute.Describe();
  if (out.compute.measurement) {
    std::cout << " (measured" << (out.compute.cached ? ", cached" : "") << ")";
  }
  std::cout << "\n";
}

int Run(int argc, char** argv) {
  RunFlags f;
  CommandLine flags(
      "nightshift run --model-dir DIR --ids 1,5,9 [--ids 4,2 ...] [--max-new-tokens N] "
      "[--temperature T --top-k K --top-p P --seed S] [--stop-ids 2,7] [--labels \"5,6;7\"] "
      "[--logits] [--json] [--device cpu|cuda[:N]] [--activation-budget SIZE] "
      "[--pass-token-budget N] [--memory-budget SIZE] [--host-memory-budget SIZE] "
      "[--kv-dtype auto|f32|bf16|f16] [--compute-dtype auto|f32|bf16] [--batch-invariant=false] "
      "[--share-prefixes=false] [--state-dir DIR]",
      "Runs every --ids prompt through the checkpoint as one batch, streaming it one layer at a\n"
      "time, and prints the generated token ids. Greedy unless --temperature, --top-k or --top-p\n"
      "asks for sampling; sequence i is seeded with --seed + i (random when --seed is absent).\n"
      "Generation stops at the model's EOS ids, at --stop-ids, or after --max-new-tokens.\n"
      "With --labels, every prompt instead scores each label (a continuation of the prompt, as\n"
      "token ids) in one pass and prints its log-probability, its probability renormalised over\n"
      "the labels, and the best label.\n"
      "Prompts in their first pass that begin alike share their common prefix: it is computed\n"
      "once (--share-prefixes=false computes every prompt whole), and each prompt still gets\n"
      "exactly what it gets alone.\n"
      "With --pass-token-budget, a pass computes at most N prompt and label tokens (a shared\n"
      "prefix once, one per decoding prompt); the prompts that do not fit join later passes, in\n"
      "--ids order, and start after a prefix of 32 tokens or more that all the prompts of the\n"
      "pass before shared (its keys and values kept, not computed again).\n"
      "A prompt longer than the model's context is an error, never truncated.\n"
      "With --memory-budget, what the budget leaves after the stream buffers, the activations\n"
      "and exactly these prompts' KV cache pins layers in memory as stored; passes after the\n"
      "first stream only the rest (on a GPU the budget is GPU memory, and --host-memory-budget\n"
      "keeps more layers in page-locked host memory, copied each pass instead of read). Without\n"
      "them every pass streams the whole checkpoint.\n"
      "Passes are batch-invariant by default: one kernel at every row count, each summing in\n"
      "one order, so a prompt's logits and tokens are bitwise the same alone or beside any\n"
      "others. --compute-dtype auto (default) then runs bf16-avx512 for 16-bit weights where\n"
      "the CPU has AVX512-BF16 and f32-tile elsewhere; F32 checkpoints stay float32. bf16 runs\n"
      "every projection in BF16 (inputs rounded to BF16, float32 accumulation); f32 never\n"
      "does. Quantized projections run the engine's own float32 kernels whatever is chosen.\n"
      "--batch-invariant=false instead times the projection kernels on this checkpoint's\n"
      "shapes (once per CPU and shape, cached in --state-dir) and runs the fastest per row\n"
      "count (OpenBLAS, oneDNN), whose numerics move with the pass's rows.");
  flags.String("model-dir", &f.model_dir, "checkpoint directory (config.json, *.safetensors)",
               "DIR");
  flags.StringList("ids", &f.ids, "a prompt as comma-separated token ids", "IDS");
  flags.Int("max-new-tokens", &f.max_new_tokens, "tokens to generate per prompt (default 16)");
  flags.Double("temperature", &f.temperature, "sampling temperature; 0 is greedy", "T");
  flags.Int("top-k", &f.top_k, "sample among the K most likely tokens (0: all)", "K");
  flags.Double("top-p", &f.top_p, "sample from the smallest set with probability >= P", "P");
  flags.Int("seed", &f.seed, "seed of sequence 0; sequence i uses seed + i", "S");
  flags.String("stop-ids", &f.stop_ids, "comma-separated token ids that end a sequence", "IDS");
  flags.String("labels", &f.labels,
               "classify: labels separated by ';', each comma-separated token ids", "IDS;IDS");
  flags.Bool("logits", &f.logits,
             "also print the full-vocabulary logits at the last prompt position");
  flags.Bool("json", &f.json, "print one JSON document");
  flags.String("device", &f.device,
               "cpu (default), or cuda / cuda:N where the linked libtorch has CUDA", "DEVICE");
  flags.String("activation-budget", &f.activation_budget,
               "temporaries a layer may use at once, e.g. 64M (default: 256 rows' worth)", "SIZE");
  flags.String("kv-dtype", &f.kv_dtype,
               "the KV cache's dtype: auto (default: f32 on the CPU, the projections' 16-bit "
               "dtype on a GPU), f32, bf16 or f16 (half the bytes)",
               "DTYPE");
  flags.String("compute-dtype", &f.compute_dtype,
               "projections in auto (default: see above), f32 or bf16", "DTYPE");
  flags.Bool("batch-invariant", &f.batch_invariant,
             "one summation order at every row count: results independent of the batch "
             "(default true; --batch-invariant=false for the fastest kernel per row count)");
  flags.Bool("share-prefixes", &f.share_prefixes,
             "compute a prefix that prompts in their first pass share once (default true)");
  flags.String("state-dir", &f.state_dir,
               "where auto's kernel timings are cached (default $XDG_CACHE_HOME/nightshift or "
               "~/.cache/nightshift, as the worker's)",
               "DIR");
  flags.Int("pass-token-budget", &f.pass_token_budget,
            "tokens one pass may compute (a shared prefix once); 0 (default): every prompt in the "
            "first pass",
            "N");
  flags.String("memory-budget", &f.memory_budget,
               "memory for stream buffers, pinned layers, activations and KV, e.g. 1GiB "
               "(default: none, stream everything)",
               "SIZE");
  flags.String("host-memory-budget", &f.host_memory_budget,
               "on a GPU: host memory for stream buffers and the layers GPU memory does not keep "
               "(default: none)",
               "SIZE");
  flags.Bool("direct-io", &f.direct_io,
             "read the checkpoint with O_DIRECT, bypassing the page cache (see disk-bench's "
             "fastest mode)");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;

  StatusOr<std::vector<SequenceRequest>> requests = BuildRequests(f, flags);
  if (!requests.ok()) return Fail("run", requests.status());
  StatusOr<RunOutput> out = RunBatch(f, std::move(requests).value());
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
