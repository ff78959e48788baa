// Quantized checkpoints against BF16: the bench-1.7b shape (hidden 2048, 16
// layers, 16/4 heads, intermediate 5632, vocab 32000) written four ways into
// --work-dir (once): BF16, compressed-tensors FP8 per channel (BF16 scales),
// AWQ GEMM int4 and GPTQ int4, group 128 (F16 for what stays unquantized),
// all from the same float weights (make-checkpoint --quantize). Each of
// --runs rounds drops the page cache before every step and measures:
//   - the fastest cold read of the BF16 checkpoint's files (common/disk_bench.h);
//     the round's engine runs read in the mode the disk bench chose (O_DIRECT
//     or not, reads in flight: the fastest, parallel ones only by a margin);
//   - bin/engine-stream-run with --compute-dtype auto (what `run` and the
//     worker use) on each checkpoint at 1 and 16 sequences, inside the same
//     memory cgroup (a third of the BF16 checkpoint by default): the median
//     decode pass, its compute-only seconds, its projection FLOPs and the
//     bytes it read.
// Then prints the medians: bytes per pass, s/pass, the ratio of the pass to
// the fastest cold read of the bytes that checkpoint streams, the speed-up
// over BF16 beside the bytes ratio, the compute-only seconds, and what the
// compute did: stored weight bytes multiplied per compute second, and its
// GFLOP/s against the CPU's measured float32 peak (bench/cpu_peak.h; the
// quantized kernels multiply in float32). With the CPU model, its SIMD, the
// kernels each pass ran (quantized ones with their instruction set) and the
// load. Prints figures, never pass/fail; not a test. Needs root
// (drop_caches, cgroup v1).
//
//   quant_bench [--work-dir DIR] [--runs 3] [--cap-fraction 0.3333] [--stream-run PATH]
#include <sys/sysinfo.h>

#include <map>

#include "bench/cpu_peak.h"
#include "bench/stream_bench.h"
#include "common/command_line.h"
#include "common/disk_bench.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/generator/generator.h"

namespace nightshift {
namespace {

using namespace bench;  // NOLINT: the shared bench helpers

struct Variant {
  std::string name;
  checkpoint::QuantFormat format;
  checkpoint::DType dtype;  // of what stays unquantized
  std::string dir;
  uint64_t file_bytes = 0;
};

// "AMD EPYC (avx2 fma f16c; no avx512f)".
std::string CpuDescription() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0)
      flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  std::string simd;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512_bf16"}) {
    const bool has = flags.find(std::string(" ") + f + " ") != std::string::npos;
    simd += std::string(simd.empty() ? "" : " ") + (has ? "" : "no ") + f;
  }
  return model + " (" + simd + ")";
}

Status Generate(Variant& v) {
  if (!fs::exists(v.dir + "/config.json")) {
    StatusOr<generator::CheckpointSpec> spec = generator::Preset("bench-1.7b");
    NS_RETURN_IF_ERROR(spec.status());
    spec->seed = 1;
    spec->dtype = v.dtype;
    spec->quantize.format = v.format;
    spec->quantize.group_size = 128;
    std::cout << "writing " << v.dir << " ...\n" << std::flush;
    NS_RETURN_IF_ERROR(generator::WriteCheckpoint(*spec, v.dir).status());
  }
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt, checkpoint::ReadCheckpoint(v.dir));
  for (const checkpoint::FileInfo& f : ckpt.files) v.file_bytes += f.size;
  return Status::Ok();
}

int Main(int argc, char** argv) {
  std::string work_dir = "/tmp/nightshift-quant-bench", stream_run;
  int64_t runs = 3;
  double cap_fraction = 1.0 / 3;
  CommandLine flags(
      "quant_bench [flags]",
      "bench-1.7b as BF16, FP8, AWQ int4 and GPTQ int4: pass time against the fastest "
      "cold read of the bytes each streams, speed-up over BF16, compute-only seconds "
      "and their rate against the CPU's peak.");
  flags.String("work-dir", &work_dir, "where the generated checkpoints are kept", "DIR");
  flags.String("stream-run", &stream_run, "engine-stream-run (default: <build>/bin/)", "PATH");
  flags.Int("runs", &runs, "rounds; medians are reported");
  flags.Double("cap-fraction", &cap_fraction,
               "memory cgroup cap as a share of the BF16 checkpoint (the same for all)");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested() || !parsed.ok() || runs < 1) {
    std::cerr << (parsed.ok() ? "" : parsed.ToString() + "\n") << flags.Help();
    return flags.help_requested() ? 0 : 2;
  }
  if (stream_run.empty()) stream_run = DefaultStreamRun();
  using checkpoint::DType;
  using checkpoint::QuantFormat;
  std::vector<Variant> variants = {
      {"BF16", QuantFormat::kNone, DType::kBF16, work_dir + "/bf16"},
      {"FP8 (ct, channel)", QuantFormat::kFp8Channel, DType::kBF16, work_dir + "/fp8"},
      {"AWQ int4 g128", QuantFormat::kAwq, DType::kF16, work_dir + "/awq"},
      {"GPTQ int4 g128", QuantFormat::kGptq, DType::kF16, work_dir + "/gptq"},
  };
  for (Variant& v : variants) {
    Status st = Generate(v);
    if (!st.ok()) {
      std::cerr << "quant_bench: " << st.ToString() << "\n";
      return 1;
    }
  }
  const uint64_t cap =
      static_cast<uint64_t>(static_cast<double>(variants[0].file_bytes) * cap_fraction);
  const std::vector<int64_t> batches = {1, 16};
  std::map<std::string, std::vector<Measured>> results;  // by "variant/batch"
  std::vector<double> best_gbs, loads;
  const CpuPeak peak = MeasureCpuPeak(get_nprocs());
  printf(
      "CPU: %s, %d cores; float32 FMA peak %.0f GFLOP/s; cgroup cap %.0f MiB (%.2f of the BF16 "
      "files)\n",
      CpuDescription().c_str(), get_nprocs(), peak.F32() / 1e9, Mb(cap), cap_fraction);
  for (int64_t run = 0; run < runs; ++run) {
    loads.push_back(LoadAverage());
    DropCaches();
    StatusOr<DiskBenchResult> disk = RunDiskBench(variants[0].dir);
    if (!disk.ok() || disk->fastest < 0) {
      std::cerr << "quant_bench: "
                << (disk.ok() ? "no disk-bench mode ran" : disk.status().ToString()) << "\n";
      return 1;
    }
    const DiskBenchMode& chosen = disk->modes[static_cast<size_t>(disk->fastest)];
    best_gbs.push_back(disk->FastestGbs());
    printf(
        "run %lld (load %.2f): fastest cold read %.2f GB/s; chosen mode %s (%.2f GB/s; the "
        "engine reads so)\n",
        static_cast<long long>(run + 1), loads.back(), disk->FastestGbs(), chosen.name.c_str(),
        chosen.gbs);
    for (const Variant& v : variants) {
      Bench bench(v.dir, stream_run, 2, 3, work_dir + "/state");
      bench.ReadLike(chosen);
      if (!bench.SetUpCgroup(cap)) {
        std::cerr << "quant_bench: cannot set up the memory cgroup " << kCgroup
                  << " (root, cgroup v1?)\n";
        return 1;
      }
      for (int64_t batch : batches) {
        Measured m;
        if (!bench.Run({v.name, batch, true, true, "", "auto"}, &m)) return 1;
        printf(
            "  %-18s %2lld seq  pass %.3f s (compute %.3f)  read %.0f MB  cgroup peak %.0f MiB  "
            "kernels %s\n",
            v.name.c_str(), static_cast<long long>(batch), m.pass_seconds, m.compute_seconds,
            m.pass_bytes / 1e6, Mb(m.cgroup_peak_bytes), m.kernels.c_str());
        fflush(stdout);
        results[v.name + "/" + std::to_string(batch)].push_back(m);
      }
    }
  }
  const double gbs = Median(best_gbs);
  printf(
      "\nmedians of %lld runs; load average at their starts: median %.2f (max %.2f); fastest "
      "cold read %.2f GB/s\n",
      static_cast<long long>(runs), Median(loads), *std::max_element(loads.begin(), loads.end()),
      gbs);
  printf("%-18s %5s %8s %8s %8s %7s %9s %8s %9s %8s %8s %7s\n", "", "seqs", "MB/pass", "pass s",
         "read s", "/ read", "speed-up", "bytes x", "compute s", "GB/s w", "GFLOP/s", "% peak");
  for (int64_t batch : batches) {
    auto median = [&](const std::string& key, double Measured::*field) {
      std::vector<double> v;
      for (const Measured& m : results[key]) v.push_back(m.*field);
      return Median(v);
    };
    const std::string bf16 = variants[0].name + "/" + std::to_string(batch);
    const double bf16_pass = median(bf16, &Measured::pass_seconds);
    const double bf16_bytes = static_cast<double>(results[bf16].back().pass_bytes);
    for (const Variant& v : variants) {
      const std::string key = v.name + "/" + std::to_string(batch);
      const double pass = median(key, &Measured::pass_seconds);
      const double bytes = static_cast<double>(results[key].back().pass_bytes);
      const double read = bytes / (gbs * 1e9);
      const double compute = median(key, &Measured::compute_seconds);
      const double gflops = median(key, &Measured::projection_flops) / compute / 1e9;
      printf("%-18s %5lld %8.0f %8.3f %8.3f %7.2f %8.2fx %7.3fx %9.3f %8.2f %8.1f %6.1f%%\n",
             v.name.c_str(), static_cast<long long>(batch), bytes / 1e6, pass, read, pass / read,
             bf16_pass / pass, bytes / bf16_bytes, compute, bytes / compute / 1e9, gflops,
             peak.F32() > 0 ? 100 * gflops * 1e9 / peak.F32() : 0.0);
    }
  }
  printf(
      "(/ read: pass time over the fastest cold read of the bytes that pass streams; "
      "speed-up: BF16's pass over this one; bytes x: this pass's bytes over BF16's; GB/s w: the "
      "pass's bytes over its compute seconds; GFLOP/s: its projection FLOPs over them, %% peak "
      "against the float32 FMA peak)\n");
  return 0;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) { return nightshift::Main(argc, argv); }
