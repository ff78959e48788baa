// engine-stream-run: runs one batched generation through the engine and
// prints what it did as JSON, including the process's memory, so tests and
// bench/engine_bench can run it in a child process (its peak RSS is that
// run's) and under a memory cgroup.
//
// Sequence i's prompt is token (1 + 31 i + 17 k) mod vocab at position k:
// every run with the same flags feeds the same prompts. Output:
//   {"generated": [[ids]...], "last_logits": [[...]...] (with --logits),
//    "passes": [{"seconds", "bytes_read", "io_seconds", "load_seconds",
//                "compute_seconds", "sequences", "tokens", "kv_bytes", "pinned_bytes",
//                "host_pinned_bytes", "compute_dtype", "projection_kernels",
//                "projection_flops", "experts_total", "experts_routed",
//                "experts_read", "experts_read_unrouted", "experts_pinned",
//                "routed_experts", "unrouted_experts_read"}...],
//    "micro_batch_rows", "pinned_bytes", "host_pinned_bytes", "rss_after_open_bytes",
//    "peak_rss_growth_bytes", "vm_hwm_bytes", "seconds",
//    "compute": {"requested", "dtype", "plan", "cached", "rows": [...],
//                "flops_per_second": {kernel: [per row bucket]}, "chosen_flops_per_second": [...]}}
// peak_rss_growth_bytes is the peak RSS after Open (and the optional warm-up
// run) minus the RSS then; the peak is reset with /proc/self/clear_refs so it
// is this run's.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/command_line.h"
#include "common/size.h"
#include "worker/engine/engine.h"
#include "worker/engine/kernels.h"

namespace nightshift::engine {
namespace {

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 if absent.
uint64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// Resets VmHWM to the current RSS.
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Runs one short generation on the checkpoint in `dir`, so that what the
// runtime sets up once on first use (the code pages of the compute library,
// thread pools, OpenBLAS's packing buffers) is in place before the measured
// run: the planner counts it in kRuntimeOverheadBytes, not in the footprint.
Status WarmUp(const std::string& dir, const EngineOptions& options) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(dir, options));
  SequenceRequest r;
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 2;
  r.ignore_eos = true;
  r.return_last_logits = true;
  NS_RETURN_IF_ERROR(engine->Add(r).status());
  while (engine->active() > 0) NS_RETURN_IF_ERROR(engine->Step().status());
  return Status::Ok();
}

nlohmann::json PassJson(const PassStats& p) {
  return {{"seconds", p.seconds},
          {"bytes_read", p.bytes_read},
          {"io_seconds", p.io_seconds},
          {"load_seconds", p.load_seconds},
          {"compute_seconds", p.compute_seconds},
          {"sequences", p.sequences},
          {"tokens", p.tokens},
          {"kv_bytes", p.kv_bytes},
          {"pinned_bytes", p.pinned_bytes},
          {"host_pinned_bytes", p.host_pinned_bytes},
          {"compute_dtype", p.compute_dtype},
          {"projection_kernels", p.projection_kernels},
          {"projection_flops", p.projection_flops},
          {"experts_total", p.experts_total},
          {"experts_routed", p.experts_routed},
          {"experts_read", p.experts_read},
          {"experts_read_unrouted", p.experts_read_unrouted},
          {"experts_pinned", p.experts_pinned},
          {"routed_experts", p.routed_experts},
          {"unrouted_experts_read", p.unrouted_experts_read}};
}

// The compute choice and, when measured, every kernel's rate per row bucket.
nlohmann::json ComputeJson(const ComputeChoice& c) {
  nlohmann::json out = {{"requested", ComputeDTypeName(c.requested)},
                        {"dtype", c.PlanDType()},
                        {"plan", c.Describe()},
                        {"batch_invariant", c.batch_invariant},
                        {"cached", c.cached},
                        {"rows", std::vector<int64_t>(kRowBuckets.begin(), kRowBuckets.end())},
                        {"openblas_core", OpenBlasCore()}};
  if (!c.measurement) return out;
  nlohmann::json rates = nlohmann::json::object();
  for (int k = 0; k < kProjectionKernelCount; ++k) {
    const auto kernel = static_cast<ProjectionKernel>(k);
    std::vector<double> row;
    for (size_t b = 0; b < kRowBucketCount; ++b) {
      row.push_back(c.measurement->FlopsPerSecond(kernel, b));
    }
    rates[ProjectionKernelName(kernel)] = row;
  }
  std::vector<double> chosen;
  for (int64_t rows : kRowBuckets) chosen.push_back(c.FlopsPerSecond(rows));
  out["flops_per_second"] = rates;
  out["chosen_flops_per_second"] = chosen;
  return out;
}

int Run(int argc, char** argv) {
  std::string dir, warm_up_dir, residency = "streaming", device = "cpu", activation_budget;
  std::string memory_budget, host_memory_budget, kv_budget, pin_placement = "spread",
                                                            compute_dtype = "f32", state_dir;
  std::string expert_reads = "auto", expert_slice;
  int64_t batch = 1, prompt_tokens = 8, max_new = 4, max_context = 0, threads = 0, streams = 0;
  int64_t labels = 0;
  bool prefetch = true, batch_invariant = true, logits = false, accelerator_path = false,
       adaptive_split = false, stagger = false;
  CommandLine flags("engine-stream-run --model-dir DIR [flags]",
                    "Runs one batched generation and prints its passes and memory as JSON.");
  flags.String("model-dir", &dir, "checkpoint directory", "DIR");
  flags.String("warm-up-dir", &warm_up_dir,
               "a small checkpoint of the same family to run first (not measured)", "DIR");
  flags.String("residency", &residency, "streaming or resident");
  flags.Bool("prefetch", &prefetch, "read the next layer while this one computes (default on)");
  flags.Int("read-streams", &streams, "parallel reads in flight (0: the engine's default)");
  bool direct_io = false;
  flags.Bool("direct-io", &direct_io,
             "read the checkpoint with O_DIRECT, bypassing the page cache");
  flags.Int("batch", &batch, "sequences, all added before the first pass");
  flags.Int("labels", &labels,
            "classify instead: each sequence scores N one-token labels (ids 2..N+1)", "N");
  flags.Int("prompt-tokens", &prompt_tokens, "tokens per prompt");
  flags.Int("max-new-tokens", &max_new, "tokens generated per sequence (EOS ignored)");
  flags.Int("max-context", &max_context, "the engine's context (0: the model's)");
  flags.Int("threads", &threads, "compute threads (0: one per core)");
  flags.Bool("logits", &logits, "print each sequence's last prompt logits");
  flags.String("device", &device, "cpu (default), cuda or cuda:N", "DEVICE");
  flags.String("activation-budget", &activation_budget,
               "temporaries a layer may use at once, e.g. 64M (default: 256 rows' worth)", "SIZE");
  flags.String("memory-budget", &memory_budget,
               "pin what fits after the working set (EngineOptions::memory_budget_bytes)", "SIZE");
  flags.String("kv-budget", &kv_budget, "KV cache budget (default: none)", "BYTES");
  flags.Bool("adaptive-split", &adaptive_split,
             "with --memory-budget and --kv-budget (the ceiling): KV for the sequences in flight, "
             "groups pinned in the rest, pass by pass (the worker without --kv-budget)");
  flags.Bool("stagger", &stagger,
             "sequence i generates max-new-tokens x (i + 1) / batch tokens (at least 1), so they "
             "end one after another");
  flags.String("host-memory-budget", &host_memory_budget,
               "the accelerator path's host tier (EngineOptions::host_memory_budget_bytes)",
               "SIZE");
  flags.String("pin-placement", &pin_placement, "spread (default), head or tail", "WORD");
  flags.String("compute-dtype", &compute_dtype, "projections in auto, f32 (default) or bf16",
               "DTYPE");
  flags.Bool("batch-invariant", &batch_invariant,
             "one summation order at every row count (default true; =false: the fastest kernel "
             "per row count)");
  flags.String("state-dir", &state_dir, "where auto's kernel timings are cached (default: none)",
               "DIR");
  flags.Bool("accelerator-path-on-cpu", &accelerator_path,
             "run the CPU through the accelerator path (tests)");
  flags.String("expert-reads", &expert_reads,
               "mixtures of experts: auto (default), routed or all (ExpertReads)", "WORD");
  flags.String("expert-slice", &expert_slice,
               "mixtures of experts: most bytes of experts per streamed group (default 256M)",
               "BYTES");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (!parsed.ok() || dir.empty() || batch < 1 || prompt_tokens < 1 || labels < 0 ||
      (residency != "streaming" && residency != "resident")) {
    std::cerr << "engine-stream-run: " << (parsed.ok() ? "bad arguments" : parsed.ToString())
              << "\n"
              << flags.Help();
    return 2;
  }
  EngineOptions options;
  options.residency = residency == "resident" ? Residency::kResident : Residency::kStream;
  options.prefetch = prefetch;
  options.read_streams = static_cast<int>(streams);
  options.direct_reads = direct_io;
  options.max_context = max_context;
  options.threads = static_cast<int>(threads);
  options.device = device;
  // A size flag into *bytes (left alone when the flag is absent); false
  // after saying why.
  auto size_flag = [](const char* name, const std::string& value, uint64_t* bytes) {
    if (value.empty()) return true;
    StatusOr<uint64_t> parsed = ParseSize(value);
    if (!parsed.ok()) {
      std::cerr << "engine-stream-run: --" << name << ": " << parsed.status().ToString() << "\n";
      return false;
    }
    *bytes = *parsed;
    return true;
  };
  if (!size_flag("activation-budget", activation_budget, &options.activation_budget_bytes) ||
      !size_flag("memory-budget", memory_budget, &options.memory_budget_bytes) ||
      !size_flag("host-memory-budget", host_memory_budget, &options.host_memory_budget_bytes) ||
      !size_flag("kv-budget", kv_budget, &options.kv_budget_bytes) ||
      !size_flag("expert-slice", expert_slice, &options.expert_slice_bytes)) {
    return 2;
  }
  if (expert_reads == "routed") {
    options.expert_reads = ExpertReads::kRouted;
  } else if (expert_reads == "all") {
    options.expert_reads = ExpertReads::kAll;
  } else if (expert_reads != "auto") {
    std::cerr << "engine-stream-run: --expert-reads: '" << expert_reads
              << "' is not auto, routed or all\n";
    return 2;
  }
  options.adaptive_split = adaptive_split;
  options.accelerator_path_on_cpu = accelerator_path;
  StatusOr<planner::PinPlacement> placement = planner::ParsePinPlacement(pin_placement);
  if (!placement.ok()) {
    std::cerr << "engine-stream-run: --pin-placement: " << placement.status().ToString() << "\n";
    return 2;
  }
  options.pin_placement = *placement;
  StatusOr<ComputeDType> compute = ParseComputeDType(compute_dtype);
  if (!compute.ok()) {
    std::cerr << "engine-stream-run: --compute-dtype: " << compute.status().ToString() << "\n";
    return 2;
  }
  options.compute_dtype = *compute;
  options.batch_invariant = batch_invariant;
  options.compute_state_dir = state_dir;
  if (!warm_up_dir.empty()) {
    Status warmed = WarmUp(warm_up_dir, options);
    if (!warmed.ok()) {
      std::cerr << "engine-stream-run: warm-up: " << warmed.ToString() << "\n";
      return 1;
    }
  }
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(dir, options);
  if (!engine.ok()) {
    std::cerr << "engine-stream-run: " << engine.status().ToString() << "\n";
    return 1;
  }
  ResetPeakRss();
  const uint64_t rss_after_open = ProcStatusBytes("VmRSS");
  const auto start = std::chrono::steady_clock::now();

  const int64_t vocab = (*engine)->config().vocab_size;
  for (int64_t i = 0; i < batch; ++i) {
    SequenceRequest r;
    for (int64_t k = 0; k < prompt_tokens; ++k) {
      r.prompt.push_back(static_cast<TokenId>((1 + 31 * i + 17 * k) % vocab));
    }
    r.max_new_tokens = stagger ? std::max<int64_t>(1, max_new * (i + 1) / batch) : max_new;
    r.ignore_eos = true;
    r.return_last_logits = logits;
    for (int64_t j = 0; j < labels; ++j)
      r.labels.push_back({static_cast<TokenId>((2 + j) % vocab)});
    StatusOr<SequenceId> added = (*engine)->Add(std::move(r));
    if (!added.ok()) {
      std::cerr << "engine-stream-run: " << added.status().ToString() << "\n";
      return 1;
    }
  }
  nlohmann::json out;
  out["passes"] = nlohmann::json::array();
  out["generated"] = nlohmann::json::array();
  out["last_logits"] = nlohmann::json::array();
  out["label_logprobs"] = nlohmann::json::array();
  std::vector<SequenceResult> results(static_cast<size_t>(batch));  // by id (0..batch)
  while ((*engine)->active() > 0) {
    StatusOr<PassStats> pass = (*engine)->Step();
    if (!pass.ok()) {
      std::cerr << "engine-stream-run: " << pass.status().ToString() << "\n";
      return 1;
    }
    out["passes"].push_back(PassJson(*pass));
    for (SequenceResult& r : (*engine)->TakeFinished()) {
      results[static_cast<size_t>(r.id)] = std::move(r);
    }
  }
  for (const SequenceResult& r : results) {
    out["generated"].push_back(r.generated);
    nlohmann::json scores = nlohmann::json::array();
    for (const LabelScore& l : r.labels) scores.push_back(l.logprob);
    if (labels > 0) out["label_logprobs"].push_back(std::move(scores));
    if (logits) out["last_logits"].push_back(r.last_logits);
  }
  out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t hwm = ProcStatusBytes("VmHWM");
  out["micro_batch_rows"] = (*engine)->micro_batch_rows();
  out["pinned_bytes"] = (*engine)->pinned_bytes();
  out["host_pinned_bytes"] = (*engine)->host_pinned_bytes();
  out["compute"] = ComputeJson((*engine)->compute());
  out["rss_after_open_bytes"] = rss_after_open;
  out["vm_hwm_bytes"] = hwm;
  out["peak_rss_growth_bytes"] = hwm > rss_after_open ? hwm - rss_after_open : 0;
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace nightshift::engine

int main(int argc, char** argv) { return nightshift::engine::Run(argc, argv); }
