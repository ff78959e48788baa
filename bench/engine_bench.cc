// Streaming engine against the disk and against llama.cpp, under a memory
// cgroup smaller than the checkpoint.
//
// On a generated checkpoint (default: the bench-1.7b preset, hidden 2048, 16
// layers, 16/4 heads, intermediate 5632, vocab 32000, F16, 1.7 GB, written
// once into --work-dir), each of --runs rounds measures, with the page cache
// dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`, root) before every step:
//   - the fastest cold read of the checkpoint's files (common/disk_bench.h:
//     1 and 4 streams, O_DIRECT and buffered); the round's engine runs then
//     read in the mode the disk bench chose (--read-streams, --direct-io:
//     the fastest, parallel ones only by a margin), as a worker streams,
//     unless --buffered-reads;
//   - bin/engine-stream-run in a child process inside a memory cgroup capped
//     at --cap-fraction of the checkpoint (cgroup v1), at 1, 4, 16 and 64
//     sequences: the median decode pass, tokens/s, the cgroup's peak usage and
//     the child's VmHWM; prefetch off at 1 and 16; uncapped at 1 and 16, whose
//     tokens must equal the capped run's.
//   - the residency sweep (uncapped, 1 sequence): --memory-budget pinning 0,
//     25, 50 and 75% of the streamed groups (spread), 50% pinned at the head
//     and at the tail of the pass, and `run`'s half-the-checkpoint budget:
//     the median decode pass against the fastest cold read of the bytes that
//     pass streams, with its compute seconds beside it.
//   - the compute table: f32 beside --compute-dtype (auto by default) at 1,
//     16 and 64 sequences and a --prefill-tokens (1024) prefill pass, capped
//     (the asked dtype also with --batch-invariant=false, "variant": what
//     the default batch invariance costs):
//     the pass against the fastest read, the kernels that ran, the FLOP/s the
//     projections reached against the chosen kernel's measured rate (auto's
//     measurement, printed first per row bucket and kernel, with the CPU's
//     model and flags and the OpenBLAS core) and against the CPU's peak
//     multiply-add rate in what they multiply (bench/cpu_peak.h); each
//     pass also against the fastest read measured while every core spins
//     (FastestReadWithCoresBusy), the disk's rate while a pass computes.
// Then prints the medians over the rounds, with the machine's load average
// beside them, and llama.cpp's figures from issue 5 for the same shape and
// cap. Prints figures, never pass/fail; not a test.
//
//   engine_bench [--model-dir DIR | --work-dir DIR] [--runs 3] [--cap-fraction 0.3333]
//                [--prompt-tokens 2] [--max-new-tokens 3] [--stream-run PATH] [--sweep-only]
//                [--compute-only] [--compute-dtype auto|bf16|f32] [--state-dir DIR]
//                [--buffered-reads]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cpu_peak.h"
#include "bench/stream_bench.h"
#include "common/command_line.h"
#include "common/disk_bench.h"
#include "planner/checkpoint_shape.h"
#include "planner/exact.h"
#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/engine/compute_choice.h"
#include "worker/generator/generator.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

// llama.cpp (mmap, 2 threads) on this shape in a 542 MiB cgroup (issue 5).
constexpr double kLlamaStepSeconds1 = 0.96, kLlamaTokensPerSecond1 = 1.04;
constexpr double kLlamaStepSeconds16 = 1.03, kLlamaTokensPerSecond16 = 15.5;
// The compute-bound passes of issue 22 (Intel Xeon, 2 vCPU, AVX-512 + AMX):
// llama.cpp's 64-sequence decode step; ours in float32 then, and its
// 1024-token prefill pass.
constexpr double kLlamaStepSeconds64 = 1.515;
// The compute table's runs of the asked dtype with --batch-invariant=false.
constexpr const char* kVariantSuffix = ", variant";
constexpr double kIssue22F32Seconds64 = 1.355, kIssue22F32PrefillSeconds = 7.5;

using namespace bench;  // NOLINT: the shared bench helpers

// The disk's fastest read again while one thread per online core spins on
// register arithmetic, as a pass's compute threads keep them busy. On this
// project's virtual machines a busy core slows the virtual disk, whatever
// its priority: a cold O_DIRECT read of bench-1.7b went from 5.1 to 3.4 GB/s
// under two `nice -n 19` shell loops (AMD EPYC, 2026-12-02), so a pass that
// computes while it reads cannot reach the idle disk's rate. Its best mode's
// GB/s, 0 when nothing ran.
double FastestReadWithCoresBusy(const std::string& model_dir) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (long i = 0; i < sysconf(_SC_NPROCESSORS_ONLN); ++i) {
    spinners.emplace_back([&stop] {
      uint64_t x = 1;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 4096; ++k) x = x * 6364136223846793005ull + 1442695040888963407ull;
        asm volatile("" : "+r"(x));  // kept: the loop is the point
      }
    });
  }
  DropCaches();
  StatusOr<DiskBenchResult> disk = RunDiskBench(model_dir);
  stop = true;
  for (std::thread& t : spinners) t.join();
  return disk.ok() ? disk->FastestGbs() : 0;  // not the mode a loader would choose
}

int Main(int argc, char** argv) {
  std::string model_dir, work_dir = "/tmp/nightshift-engine-bench", stream_run;
  int64_t runs = 3, prompt_tokens = 2, new_tokens = 3;
  double cap_fraction = 1.0 / 3;
  bool sweep_only = false, compute_only = false, buffered_reads = false;
  std::string compute_dtype = "auto", state_dir;
  int64_t prefill_tokens = 1024;
  CommandLine flags(
      "engine_bench [flags]",
      "Streaming engine vs the disk's fastest read and llama.cpp, under a memory cgroup.");
  flags.String("model-dir", &model_dir, "checkpoint to run (default: generate bench-1.7b)", "DIR");
  flags.String("work-dir", &work_dir, "where the generated checkpoint is kept", "DIR");
  flags.String("stream-run", &stream_run, "engine-stream-run (default: <build>/bin/)", "PATH");
  flags.Int("runs", &runs, "rounds; medians are reported");
  flags.Int("prompt-tokens", &prompt_tokens, "tokens per prompt");
  flags.Int("max-new-tokens", &new_tokens,
            "tokens per sequence (passes after the first are timed)");
  flags.Double("cap-fraction", &cap_fraction, "memory cgroup cap as a share of the checkpoint");
  flags.Bool("sweep-only", &sweep_only, "run only the residency sweep");
  flags.Bool("compute-only", &compute_only,
             "run only the compute table: 1/16/64 sequences and a prefill pass, f32 beside auto");
  flags.String("compute-dtype", &compute_dtype,
               "the engine's --compute-dtype for the memory and residency runs, and the one the "
               "compute table sets beside f32: auto (default) or bf16",
               "DTYPE");
  flags.String("state-dir", &state_dir,
               "where auto's kernel timings are cached (default: <work-dir>/state)", "DIR");
  flags.Int("prefill-tokens", &prefill_tokens, "the compute table's prefill prompt (default 1024)");
  flags.Bool("buffered-reads", &buffered_reads,
             "engine runs read as engine-stream-run does by default (4 buffered streams), not "
             "in the round's fastest disk-bench mode");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested() || !parsed.ok() || runs < 1 || new_tokens < 2 ||
      !engine::ParseComputeDType(compute_dtype).ok() || prefill_tokens < 1) {
    std::cerr << (parsed.ok() ? "" : parsed.ToString() + "\n") << flags.Help();
    return flags.help_requested() ? 0 : 2;
  }
  if (stream_run.empty()) stream_run = DefaultStreamRun();
  if (model_dir.empty()) {
    model_dir = work_dir + "/bench-1.7b";
    if (!fs::exists(model_dir + "/config.json")) {
      StatusOr<generator::CheckpointSpec> spec = generator::Preset("bench-1.7b");
      spec->seed = 1;
      std::cout << "writing " << model_dir << " ...\n";
      StatusOr<generator::WriteReport> wrote = generator::WriteCheckpoint(*spec, model_dir);
      if (!wrote.ok()) {
        std::cerr << "engine_bench: " << wrote.status().ToString() << "\n";
        return 1;
      }
    }
  }
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(model_dir);
  if (!ckpt.ok()) {
    std::cerr << "engine_bench: " << ckpt.status().ToString() << "\n";
    return 1;
  }
  uint64_t file_bytes = 0;
  for (const checkpoint::FileInfo& f : ckpt->files) file_bytes += f.size;
  const uint64_t cap = static_cast<uint64_t>(static_cast<double>(file_bytes) * cap_fraction);

  if (state_dir.empty()) state_dir = work_dir + "/state";
  Bench bench(model_dir, stream_run, prompt_tokens, new_tokens, state_dir);
  const engine::CpuInfo& cpu = engine::HostCpu();
  printf("CPU: %s; flags: %s; %ld cores online\n", cpu.model.c_str(), cpu.FlagsString().c_str(),
         sysconf(_SC_NPROCESSORS_ONLN));
  const bench::CpuPeak peak =
      bench::MeasureCpuPeak(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  printf(
      "CPU peak, GFLOP/s (FMAs on registers, every core): f32 AVX2 %.0f, f32 AVX-512 %.0f, BF16 "
      "vdpbf16ps %.0f\n",
      peak.f32_avx2 / 1e9, peak.f32_avx512 / 1e9, peak.bf16 / 1e9);
  if (!bench.SetUpCgroup(cap)) {
    std::cerr << "engine_bench: cannot set up the memory cgroup " << kCgroup
              << " (root, cgroup v1?)\n";
    return 1;
  }
  std::vector<Config> configs;
  // The compute table: f32 beside the asked dtype (auto by default) at 1,
  // 16 and 64 sequences and one prefill pass, capped like the rest.
  std::vector<std::string> compute_names;
  const std::vector<std::string> compute_dtypes =
      compute_dtype == "f32" ? std::vector<std::string>{"f32", "auto"}
                             : std::vector<std::string>{"f32", compute_dtype};
  if (!sweep_only) {
    for (const std::string& dtype : compute_dtypes) {
      for (int64_t batch : {1, 16, 64}) {
        Config c{std::to_string(batch) + (batch == 1 ? " seq " : " seqs ") + dtype, batch, true,
                 true, ""};
        c.compute = dtype;
        configs.push_back(c);
        compute_names.push_back(c.name);
      }
      Config prefill{"prefill " + std::to_string(prefill_tokens) + " " + dtype, 1, true, true, ""};
      prefill.compute = dtype;
      prefill.prompt_tokens = prefill_tokens;
      prefill.new_tokens = 1;
      prefill.first_pass = true;
      configs.push_back(prefill);
      compute_names.push_back(prefill.name);
    }
    // The same as the asked dtype without batch invariance: what it costs.
    const std::vector<Config> invariant(configs.end() - 4, configs.end());
    for (Config c : invariant) {
      c.name += kVariantSuffix;
      c.extra += " --batch-invariant=false";
      configs.push_back(c);
      compute_names.push_back(c.name);
    }
  }
  if (!sweep_only && !compute_only) {
    const std::vector<Config> memory_runs = {
        {"1 seq", 1, true, true, "", compute_dtype},
        {"4 seqs", 4, true, true, "", compute_dtype},
        {"16 seqs", 16, true, true, "", compute_dtype},
        {"64 seqs", 64, true, true, "", compute_dtype},
        {"1 seq, no prefetch", 1, true, false, "", compute_dtype},
        {"16 seqs, no prefetch", 16, true, false, "", compute_dtype},
        {"1 seq, uncapped", 1, false, true, "", compute_dtype},
        {"16 seqs, uncapped", 16, false, true, "", compute_dtype},
    };
    configs.insert(configs.end(), memory_runs.begin(), memory_runs.end());
  }
  // The residency sweep: a memory budget of the stream buffers + the
  // activation working set + a share of the groups (the engine charges the
  // first pass's activations, less than that, so the share pinned is at least
  // the one named; the pinned bytes measured are printed).
  const std::vector<uint64_t> groups = planner::StreamedGroupBytes(*ckpt);
  uint64_t group_sum = 0;
  for (uint64_t g : groups) group_sum += g;
  StatusOr<checkpoint::ModelConfig> model_config = checkpoint::ParseModelConfig(ckpt->config);
  if (!model_config.ok()) {
    std::cerr << "engine_bench: " << model_config.status().ToString() << "\n";
    return 1;
  }
  const uint64_t working_set = planner::StreamBufferBytes(groups, {}, true) +
                               planner::ActivationWorkingSetBytes(*model_config, 0);
  auto budget_flag = [&](double share, const char* placement) {
    return " --memory-budget " +
           std::to_string(working_set + static_cast<uint64_t>(share * group_sum)) +
           " --pin-placement " + placement;
  };
  std::vector<std::string> sweep;
  for (int pct : {0, 25, 50, 75}) {
    if (compute_only) break;
    const std::string name = "pin " + std::to_string(pct) + "% spread";
    sweep.push_back(name);
    configs.push_back(
        {name, 1, false, true, pct == 0 ? "" : budget_flag(pct / 100.0, "spread"), compute_dtype});
  }
  for (const char* placement : {"head", "tail"}) {
    if (compute_only) break;
    const std::string name = std::string("pin 50% ") + placement;
    sweep.push_back(name);
    configs.push_back({name, 1, false, true, budget_flag(0.5, placement), compute_dtype});
  }
  if (!compute_only) {
    sweep.push_back("run: half the ckpt");
    configs.push_back({sweep.back(), 1, false, true,
                       " --memory-budget " + std::to_string(ckpt->total_bytes / 2), compute_dtype});
  }
  std::vector<double> best_gbs;
  std::map<std::string, std::vector<Measured>> results;
  std::vector<double> fastest_read_seconds, busy_read_seconds, loads;
  std::map<std::string, std::vector<double>> mode_gbs;
  bool same_tokens = true;

  printf("checkpoint %s: %.3f GB in %zu file(s); cgroup cap %.0f MiB (%.2f of it)\n",
         model_dir.c_str(), file_bytes / 1e9, ckpt->files.size(), Mb(cap), cap_fraction);
  // auto measures the kernels once (Engine::Open), outside the cgroup and
  // before any timed run; every later run reads the cached figures.
  nlohmann::json kernel_rates;
  for (const std::string& dtype : compute_dtypes) {
    if (dtype == "f32") continue;
    Measured m;
    if (!bench.Run({"measure kernels", 1, false, true, "", dtype}, &m)) return 1;
    kernel_rates = m.compute;
    printf("--compute-dtype %s chose: %s (%s)\n", dtype.c_str(),
           m.compute.value("plan", std::string("?")).c_str(),
           m.compute.value("cached", false) ? "cached" : "measured");
  }
  if (kernel_rates.contains("openblas_core")) {
    // float32 GEMMs (f32-gemm, attention) run this core's kernels.
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS core: %s (%s%s)\n", kernel_rates["openblas_core"].get<std::string>().c_str(),
           forced ? "OPENBLAS_CORETYPE=" : "its own detection", forced ? forced : "");
  }
  if (kernel_rates.contains("flops_per_second")) {
    printf("measured projection rates, GFLOP/s (one pass's shapes, %d threads):\n%-10s",
           static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), "rows");
    for (const nlohmann::json& r : kernel_rates["rows"]) printf(" %7lld", r.get<long long>());
    printf("\n");
    for (const auto& [kernel, row] : kernel_rates["flops_per_second"].items()) {
      printf("%-10s", kernel.c_str());
      for (const nlohmann::json& v : row) printf(" %7.1f", v.get<double>() / 1e9);
      printf("\n");
    }
  }
  for (int64_t run = 0; run < runs; ++run) {
    loads.push_back(LoadAverage());
    DropCaches();
    StatusOr<DiskBenchResult> disk = RunDiskBench(model_dir);
    if (!disk.ok() || disk->fastest < 0) {
      std::cerr << "engine_bench: "
                << (disk.ok() ? "no disk-bench mode ran" : disk.status().ToString()) << "\n";
      return 1;
    }
    for (const DiskBenchMode& mode : disk->modes) {
      if (mode.ran) mode_gbs[mode.name].push_back(mode.gbs);
    }
    const double best = disk->FastestGbs();
    fastest_read_seconds.push_back(static_cast<double>(disk->bytes_per_mode) / (best * 1e9));
    best_gbs.push_back(best);
    const DiskBenchMode& chosen = disk->modes[static_cast<size_t>(disk->fastest)];
    if (!buffered_reads) bench.ReadLike(chosen);
    printf(
        "run %lld (load %.2f): fastest read %.2f GB/s; chosen mode %s (%.2f GB/s); engine "
        "reads %s\n",
        static_cast<long long>(run + 1), loads.back(), best, chosen.name.c_str(), chosen.gbs,
        buffered_reads ? "buffered, 4 streams" : "so");
    if (!compute_names.empty()) {
      const double busy = FastestReadWithCoresBusy(model_dir);
      if (busy > 0) {
        busy_read_seconds.push_back(static_cast<double>(disk->bytes_per_mode) / (busy * 1e9));
      }
      printf("  with every core busy: fastest read %.2f GB/s\n", busy);
    }
    for (const Config& c : configs) {
      Measured m;
      if (!bench.Run(c, &m)) return 1;
      printf(
          "  %-22s pass %.3f s (io wait %.3f)  %.2f tok/s  cgroup peak %.0f MiB  VmHWM %.0f MiB\n",
          c.name.c_str(), m.pass_seconds, m.io_seconds, m.tokens_per_second,
          Mb(m.cgroup_peak_bytes), Mb(m.vm_hwm_bytes));
      fflush(stdout);
      results[c.name].push_back(m);
    }
    for (const char* batch : {"1 seq", "16 seqs"}) {
      if (sweep_only || compute_only) break;
      const std::string uncapped = std::string(batch) + ", uncapped";
      same_tokens &= results[batch].back().generated == results[uncapped].back().generated;
    }
    for (const std::string& name : sweep) {
      same_tokens &= results[name].back().generated == results[sweep[0]].back().generated;
    }
  }

  // The planner's footprint at each batch (context 256, this prompt length).
  StatusOr<planner::CheckpointShape> shape = planner::ShapeOf(*ckpt);
  auto footprint = [&](int64_t batch) {
    planner::PlanOptions plan;
    plan.context_k = 256 / 1024.0;
    plan.batch = batch;
    plan.prompt_tokens = prompt_tokens;
    return planner::ExactSizing(*shape, plan, planner::Device::kCpu).resident_gb * 1e9;
  };
  const double read_seconds = Median(fastest_read_seconds);
  printf(
      "\nmedians of %lld runs; load average at their starts: median %.2f (max %.2f) on %ld cores\n",
      static_cast<long long>(runs), Median(loads), *std::max_element(loads.begin(), loads.end()),
      sysconf(_SC_NPROCESSORS_ONLN));
  printf("disk, cold:");
  for (const auto& [name, gbs] : mode_gbs) printf("  %s %.2f GB/s;", name.c_str(), Median(gbs));
  printf("\nfastest cold read of the files: %.3f s\n", read_seconds);
  // Where the compute table ran: the same read with every core busy.
  const double busy_read = busy_read_seconds.empty() ? 0 : Median(busy_read_seconds);
  if (busy_read > 0) printf("the same, every core busy: %.3f s\n", busy_read);
  printf("\n");
  if (!compute_names.empty()) {
    auto median_of = [&](const std::string& name, double Measured::*field) {
      std::vector<double> v;
      for (const Measured& m : results[name]) v.push_back(m.*field);
      return Median(v);
    };
    printf("compute (capped; decode passes after the first, prefill = the first pass):\n");
    printf("%-22s %9s %9s %9s %9s %10s %-22s %9s %11s %7s\n", "", "pass s", "/ read", "/ busy",
           "tok/s", "compute s", "kernels", "GFLOP/s", "/ measured", "/ peak");
    for (const std::string& name : compute_names) {
      const double pass = median_of(name, &Measured::pass_seconds);
      const double compute = median_of(name, &Measured::compute_seconds);
      const Measured& last = results[name].back();
      const double rate = compute > 0 ? last.projection_flops / compute : 0;
      // Against the peak of what the projections multiply in.
      const double limit = last.kernels.find("bf16") != std::string::npos ? peak.bf16 : peak.F32();
      printf("%-22s %9.3f %9.2f %9.2f %9.2f %10.3f %-22s %9.1f %11.2f %7.2f\n", name.c_str(), pass,
             pass / read_seconds, busy_read > 0 ? pass / busy_read : 0,
             median_of(name, &Measured::tokens_per_second), compute, last.kernels.c_str(),
             rate / 1e9, last.chosen_rate > 0 ? rate / last.chosen_rate : 0,
             limit > 0 ? rate / limit : 0);
    }
    const std::string other = compute_dtypes[1];
    const std::string prefill = "prefill " + std::to_string(prefill_tokens) + " ";
    const double p64 = median_of("64 seqs " + other, &Measured::pass_seconds);
    const double f64 = median_of("64 seqs f32", &Measured::pass_seconds);
    const double pre = median_of(prefill + other, &Measured::pass_seconds);
    const double fpre = median_of(prefill + "f32", &Measured::pass_seconds);
    printf(
        "64 seqs: %s %.3f s = %.2fx the fastest read (%.2fx it with every core busy), f32 %.3f s; "
        "llama.cpp %.3f s (issue 22, another CPU): %.2fx llama.cpp\n",
        other.c_str(), p64, p64 / read_seconds, busy_read > 0 ? p64 / busy_read : 0, f64,
        kLlamaStepSeconds64, kLlamaStepSeconds64 / p64);
    printf("prefill %lld tokens: %s %.3f s, f32 %.3f s: %s %.2fx faster than f32\n",
           static_cast<long long>(prefill_tokens), other.c_str(), pre, fpre, other.c_str(),
           fpre / pre);
    printf("batch invariance (%s, the default) against --batch-invariant=false:", other.c_str());
    for (const std::string& name :
         {std::string("1 seq "), std::string("16 seqs "), std::string("64 seqs "), prefill}) {
      const double on = median_of(name + other, &Measured::pass_seconds);
      const double off = median_of(name + other + kVariantSuffix, &Measured::pass_seconds);
      printf("  %s%.3f s / %.3f s = %.3f;", name.c_str(), on, off, on / off);
    }
    printf(" (goal <= 1.05)\n");
    printf(
        "issue 22's figures (Intel Xeon, AVX-512 + AMX, f32): 64 seqs %.3f s, prefill %.1f s; "
        "goals where the CPU multiplies BF16 natively: 64 seqs <= 1.15x the read, prefill >= 4x "
        "f32, compute-bound passes >= 0.5 of the measured rate\n\n",
        kIssue22F32Seconds64, kIssue22F32PrefillSeconds);
    if (compute_only) return 0;
  }
  printf("%-22s %9s %9s %9s %9s %11s %9s %11s\n", "", "pass s", "/ read", "tok/s", "io wait",
         "cgroup MiB", "VmHWM MiB", "planner MiB");
  for (const Config& c : configs) {
    if (!c.extra.empty() || c.name == sweep[0]) continue;  // the sweep has its own table
    if (std::find(compute_names.begin(), compute_names.end(), c.name) != compute_names.end()) {
      continue;  // so has the compute table
    }
    std::vector<double> pass, tps, io, peak, hwm;
    for (const Measured& m : results[c.name]) {
      pass.push_back(m.pass_seconds);
      tps.push_back(m.tokens_per_second);
      io.push_back(m.io_seconds);
      peak.push_back(m.cgroup_peak_bytes);
      hwm.push_back(m.vm_hwm_bytes);
    }
    printf("%-22s %9.3f %9.2f %9.2f %9.3f %11.0f %9.0f %11.0f\n", c.name.c_str(), Median(pass),
           Median(pass) / read_seconds, Median(tps), Median(io), Mb(Median(peak)), Mb(Median(hwm)),
           Mb(footprint(c.batch)));
  }
  // The sweep: each pass against the fastest cold read of what it streams
  // (the run's fastest mode, GB/s, x that pass's bytes).
  const double read_gbs = Median(best_gbs);
  printf("\nresidency sweep (1 seq, uncapped; fastest cold read %.2f GB/s):\n", read_gbs);
  printf("%-22s %9s %9s %11s %9s %9s %9s %9s\n", "", "pinned %", "pinned MB", "streamed MB",
         "pass s", "read s", "/ read", "compute s");
  for (const std::string& name : sweep) {
    std::vector<double> pass, compute, hwm;
    for (const Measured& m : results[name]) {
      pass.push_back(m.pass_seconds);
      compute.push_back(m.compute_seconds);
      hwm.push_back(m.vm_hwm_bytes);
    }
    const Measured& last = results[name].back();
    const double read = static_cast<double>(last.pass_bytes) / (read_gbs * 1e9);
    printf("%-22s %9.1f %9.0f %11.0f %9.3f %9.3f %9.2f %9.3f   VmHWM %.0f MiB\n", name.c_str(),
           100.0 * static_cast<double>(last.pinned_bytes) / static_cast<double>(group_sum),
           last.pinned_bytes / 1e6, last.pass_bytes / 1e6, Median(pass), read, Median(pass) / read,
           Median(compute), Mb(Median(hwm)));
  }
  if (sweep_only) {
    printf("same tokens in every sweep run: %s\n", same_tokens ? "yes" : "NO");
    return 0;
  }
  auto pass_of = [&](const std::string& name) {
    std::vector<double> v;
    for (const Measured& m : results[name]) v.push_back(m.pass_seconds);
    return Median(v);
  };
  printf("\nprefetch on/off: 1 seq %.3f / %.3f s, 16 seqs %.3f / %.3f s\n", pass_of("1 seq"),
         pass_of("1 seq, no prefetch"), pass_of("16 seqs"), pass_of("16 seqs, no prefetch"));
  printf(
      "llama.cpp, same shape, 542 MiB cgroup (issue 5): 1 seq %.2f s/step = %.2f tok/s; 16 seqs "
      "%.2f s/step = %.1f tok/s\n",
      kLlamaStepSeconds1, kLlamaTokensPerSecond1, kLlamaStepSeconds16, kLlamaTokensPerSecond16);
  printf(
      "ours, %.0f MiB cgroup: 1 seq %.3f s/step = %.2f tok/s; 16 seqs %.3f s/step = %.1f tok/s; "
      "64 seqs %.3f s/step = %.1f tok/s\n",
      Mb(cap), pass_of("1 seq"), 1 / pass_of("1 seq"), pass_of("16 seqs"), 16 / pass_of("16 seqs"),
      pass_of("64 seqs"), 64 / pass_of("64 seqs"));
  printf("same tokens capped and uncapped (1 and 16 seqs, every run): %s\n",
         same_tokens ? "yes" : "NO");
  printf("one pass reads %.3f GB of the %.3f GB of files\n",
         results["1 seq"].back().pass_bytes / 1e9, file_bytes / 1e9);
  return 0;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) { return nightshift::Main(argc, argv); }
