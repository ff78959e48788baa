// Mixtures of experts streamed: a generated Qwen3-MoE shape (hidden 2048,
// 32/4 heads, 64 experts of 768, top 8, --layers sparse layers, BF16; ~0.6 GB
// of experts a layer) written into --work-dir once. Each of --runs rounds
// drops the page cache before every step and measures the fastest cold read
// of the checkpoint's files (common/disk_bench.h; the engine then reads in
// the mode it chose), then bin/engine-stream-run at 1, 4, 16, 64 and 256
// sequences (decode passes of that many rows; EngineOptions::expert_reads
// auto): the median decode pass, its compute seconds, the bytes it read and
// the experts it read. Prints, per row count, the medians beside what uniform
// routing predicts (planner::ExpectedExpertsTouched: E (1 - (1 - k/E)^B) of
// each layer's E experts) and the pass's time against the fastest cold read
// of the bytes it streamed. That read is of 128 MB pieces in file order,
// while a routed pass reads each expert alone (9.4 MB here), and disks may
// read small pieces slower (common/disk_bench.h: 1.45 GB/s with 16 MB reads
// against 4.4-4.9 with 128 MB, this project's virtio disk on 2026-12-02).
// So beside it the bench times a cold read of exactly the byte ranges the
// pass read, piece by piece as the loader cuts them (a layer's dense part,
// each expert read, the LM head), the faster of one read in flight and
// four: the pass against that too. With the CPU model and the load. Prints
// figures, never pass/fail; not a test. Needs root (drop_caches).
// --compute-dtype (f32 by default, as the earlier tables) and --expert-slice
// are passed to engine-stream-run.
//
//   moe_bench [--work-dir DIR] [--runs 3] [--layers 4] [--stream-run PATH]
//             [--compute-dtype auto|f32|bf16] [--expert-slice SIZE]
#include <fcntl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "bench/stream_bench.h"
#include "common/command_line.h"
#include "common/disk_bench.h"
#include "common/read_buffer.h"
#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/generator/generator.h"

namespace nightshift {
namespace {

using namespace bench;  // NOLINT: the shared bench helpers

constexpr int64_t kExperts = 64, kTopK = 8;

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "?";
}

struct Shape {
  uint64_t file_bytes = 0;
  uint64_t dense_bytes = 0;   // every tensor but the experts and the embedding
  uint64_t expert_bytes = 0;  // one expert
  int64_t sparse_layers = 0;
};

StatusOr<Shape> Generate(const std::string& dir, int64_t layers) {
  if (!fs::exists(dir + "/config.json")) {
    generator::CheckpointSpec spec;
    spec.arch = "qwen3_moe";
    spec.hidden = 2048;
    spec.layers = layers;
    spec.heads = 32;
    spec.kv_heads = 4;
    spec.head_dim = 128;
    spec.intermediate = 6144;
    spec.vocab = 32000;
    spec.experts = kExperts;
    spec.top_k = kTopK;
    spec.moe_intermediate = 768;
    spec.norm_topk_prob = true;
    spec.dtype = checkpoint::DType::kBF16;
    spec.seed = 1;
    std::cout << "writing " << dir << " ...\n" << std::flush;
    NS_RETURN_IF_ERROR(generator::WriteCheckpoint(spec, dir).status());
  }
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt, checkpoint::ReadCheckpoint(dir));
  Shape shape;
  for (const checkpoint::FileInfo& f : ckpt.files) shape.file_bytes += f.size;
  for (const checkpoint::TensorGroup& layer : ckpt.layers) {
    bool sparse = false;
    for (int t : layer.tensors) {
      const checkpoint::TensorInfo& info = ckpt.tensors[static_cast<size_t>(t)];
      const int expert = checkpoint::ExpertIndex(info.name);
      if (expert < 0) {
        shape.dense_bytes += info.size;
      } else if (expert == 0) {
        shape.expert_bytes += layer.layer == 0 ? info.size : 0;
        sparse = true;
      }
    }
    shape.sparse_layers += sparse;
  }
  shape.dense_bytes += ckpt.head.bytes;
  return shape;
}

// A piece of a file the loader reads as one (before cutting it into reads of
// at most 128 MB).
struct Piece {
  int file = 0;
  uint64_t offset = 0, bytes = 0;
};

// The checkpoint's pieces: per layer its dense part and each expert (the
// adjacent tensors of each merged), then the LM head's group.
struct Pieces {
  std::vector<std::vector<Piece>> dense;                // per layer
  std::vector<std::vector<std::vector<Piece>>> expert;  // per layer, per expert
  std::vector<Piece> head;
};

void AddTensor(std::vector<Piece>& pieces, const checkpoint::TensorInfo& t) {
  if (!pieces.empty() && pieces.back().file == t.file &&
      pieces.back().offset + pieces.back().bytes == t.offset) {
    pieces.back().bytes += t.size;
  } else {
    pieces.push_back({t.file, t.offset, t.size});
  }
}

Pieces PiecesOf(const checkpoint::Checkpoint& ckpt) {
  Pieces out;
  auto sorted = [&ckpt](std::vector<int> tensors) {
    std::sort(tensors.begin(), tensors.end(), [&ckpt](int a, int b) {
      const checkpoint::TensorInfo &x = ckpt.tensors[static_cast<size_t>(a)],
                                   &y = ckpt.tensors[static_cast<size_t>(b)];
      return std::make_pair(x.file, x.offset) < std::make_pair(y.file, y.offset);
    });
    return tensors;
  };
  for (const checkpoint::TensorGroup& layer : ckpt.layers) {
    out.dense.emplace_back();
    out.expert.emplace_back(kExperts);
    for (int t : sorted(layer.tensors)) {
      const checkpoint::TensorInfo& info = ckpt.tensors[static_cast<size_t>(t)];
      const int e = checkpoint::ExpertIndex(info.name);
      AddTensor(e < 0 ? out.dense.back() : out.expert.back()[static_cast<size_t>(e)], info);
    }
  }
  for (int t : sorted(ckpt.head.tensors)) AddTensor(out.head, ckpt.tensors[static_cast<size_t>(t)]);
  return out;
}

// The pieces a pass read: every dense part and the head, and each layer's
// experts `routed_experts` lists and those `unrouted_experts_read` does
// (read ahead on a guess at the routing; every expert when the pass read
// them all ahead).
std::vector<Piece> PassPieces(const Pieces& all, const nlohmann::json& pass) {
  const bool every = pass.value("experts_read", 0) >= pass.value("experts_total", 0);
  std::vector<Piece> out;
  for (size_t layer = 0; layer < all.dense.size(); ++layer) {
    out.insert(out.end(), all.dense[layer].begin(), all.dense[layer].end());
    std::vector<int64_t> experts;
    if (every) {
      for (int64_t e = 0; e < kExperts; ++e) experts.push_back(e);
    } else {
      for (const char* key : {"routed_experts", "unrouted_experts_read"}) {
        if (!pass.contains(key) || layer >= pass[key].size()) continue;
        for (int64_t e : pass[key][layer].get<std::vector<int64_t>>()) experts.push_back(e);
      }
      std::sort(experts.begin(), experts.end());  // in file order, as the loader reads
    }
    for (int64_t e : experts) {
      const std::vector<Piece>& p = all.expert[layer][static_cast<size_t>(e)];
      out.insert(out.end(), p.begin(), p.end());
    }
  }
  out.insert(out.end(), all.head.begin(), all.head.end());
  return out;
}

// Seconds to read `pieces` cold with O_DIRECT, each cut into reads of at
// most 128 MB (page-aligned), `streams` reads in flight; negative on failure.
double ColdReadSeconds(const checkpoint::Checkpoint& ckpt, const std::vector<Piece>& pieces,
                       int streams) {
  constexpr uint64_t kAlign = 4096, kChunk = kDefaultReadChunkBytes;
  struct Read {
    int file;
    uint64_t offset, bytes;
  };
  std::vector<Read> reads;
  for (const Piece& p : pieces) {
    const uint64_t begin = p.offset / kAlign * kAlign;
    const uint64_t end = (p.offset + p.bytes + kAlign - 1) / kAlign * kAlign;
    for (uint64_t at = begin; at < end; at += kChunk) {
      reads.push_back({p.file, at, std::min(kChunk, end - at)});
    }
  }
  std::vector<int> fds;
  for (const checkpoint::FileInfo& f : ckpt.files) {
    fds.push_back(open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
    if (fds.back() < 0) return -1;
  }
  DropCaches();
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> readers;
  for (int s = 0; s < streams; ++s) {
    readers.emplace_back([&] {
      auto* buffer = static_cast<unsigned char*>(AllocateReadBuffer(kChunk));
      for (size_t i = next++; i < reads.size(); i = next++) {
        const Read& r = reads[i];
        // A short read at the end of a file is the file's end.
        if (pread(fds[static_cast<size_t>(r.file)], buffer, r.bytes, static_cast<off_t>(r.offset)) <
            0) {
          failed = true;
        }
      }
      std::free(buffer);
    });
  }
  for (std::thread& t : readers) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : fds) close(fd);
  return failed ? -1 : seconds;
}

int Main(int argc, char** argv) {
  std::string work_dir = "/tmp/nightshift-moe-bench", stream_run, expert_slice, compute = "f32";
  int64_t runs = 3, layers = 4;
  CommandLine flags(
      "moe_bench [flags]",
      "A generated Qwen3-MoE (64 experts of 768, top 8, BF16) streamed at 1-256 rows: "
      "bytes and experts read per pass beside uniform routing's prediction, and the "
      "pass against the fastest cold read of its bytes.");
  flags.String("work-dir", &work_dir, "where the generated checkpoint is kept", "DIR");
  flags.String("stream-run", &stream_run, "engine-stream-run (default: <build>/bin/)", "PATH");
  flags.Int("runs", &runs, "rounds; medians are reported");
  flags.Int("layers", &layers, "decoder layers (each sparse, ~0.6 GB of experts)");
  flags.String("expert-slice", &expert_slice,
               "engine-stream-run's --expert-slice (default: the engine's)", "SIZE");
  flags.String("compute-dtype", &compute, "engine-stream-run's --compute-dtype", "auto|f32|bf16");
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested() || !parsed.ok() || runs < 1 || layers < 1) {
    std::cerr << (parsed.ok() ? "" : parsed.ToString() + "\n") << flags.Help();
    return flags.help_requested() ? 0 : 2;
  }
  if (stream_run.empty()) stream_run = DefaultStreamRun();
  const std::string dir = work_dir + "/qwen3-moe-" + std::to_string(layers);
  StatusOr<Shape> shape = Generate(dir, layers);
  if (!shape.ok()) {
    std::cerr << "moe_bench: " << shape.status().ToString() << "\n";
    return 1;
  }
  const std::vector<int64_t> rows = {1, 4, 16, 64, 256};
  std::map<int64_t, std::vector<Measured>> results;
  std::map<int64_t, std::vector<double>> experts_read, ranges_read;
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(dir);
  if (!ckpt.ok()) {
    std::cerr << "moe_bench: " << ckpt.status().ToString() << "\n";
    return 1;
  }
  const Pieces pieces = PiecesOf(*ckpt);
  std::vector<double> best_gbs, loads;
  printf(
      "CPU: %s, %d cores; checkpoint %.2f GB: dense part %.0f MB, %lld sparse layers of %lld "
      "experts of %.1f MB, top %lld; --compute-dtype %s, expert slices of %s\n",
      CpuModel().c_str(), get_nprocs(), shape->file_bytes / 1e9, shape->dense_bytes / 1e6,
      static_cast<long long>(shape->sparse_layers), static_cast<long long>(kExperts),
      shape->expert_bytes / 1e6, static_cast<long long>(kTopK), compute.c_str(),
      expert_slice.empty() ? "the engine's default" : expert_slice.c_str());
  for (int64_t run = 0; run < runs; ++run) {
    loads.push_back(LoadAverage());
    DropCaches();
    StatusOr<DiskBenchResult> disk = RunDiskBench(dir);
    if (!disk.ok() || disk->fastest < 0) {
      std::cerr << "moe_bench: "
                << (disk.ok() ? "no disk-bench mode ran" : disk.status().ToString()) << "\n";
      return 1;
    }
    const DiskBenchMode& chosen = disk->modes[static_cast<size_t>(disk->fastest)];
    best_gbs.push_back(disk->FastestGbs());
    printf("run %lld (load %.2f): fastest cold read %.2f GB/s (%s)\n",
           static_cast<long long>(run + 1), loads.back(), disk->FastestGbs(), chosen.name.c_str());
    Bench bench(dir, stream_run, 2, 3);
    bench.ReadLike(chosen);
    for (int64_t b : rows) {
      Measured m;
      Config c;
      c.name = "moe";
      c.batch = b;
      c.capped = false;
      c.compute = compute;
      if (!expert_slice.empty()) c.extra = " --expert-slice " + expert_slice;
      if (!bench.Run(c, &m)) return 1;
      const nlohmann::json& pass = m.last_pass;
      experts_read[b].push_back(pass.value("experts_read", 0.0));
      const std::vector<Piece> read = PassPieces(pieces, pass);
      const double one = ColdReadSeconds(*ckpt, read, 1), four = ColdReadSeconds(*ckpt, read, 4);
      if (one < 0 || four < 0) {
        std::cerr << "moe_bench: could not read the pass's pieces with O_DIRECT\n";
        return 1;
      }
      ranges_read[b].push_back(std::min(one, four));
      printf(
          "  %3lld rows: pass %.3f s (compute %.3f)  read %.0f MB, %lld of %lld experts (%lld "
          "routed to none); those pieces read cold in %.3f s (one read in flight) and %.3f s "
          "(four)\n",
          static_cast<long long>(b), m.pass_seconds, m.compute_seconds, m.pass_bytes / 1e6,
          static_cast<long long>(pass.value("experts_read", 0)),
          static_cast<long long>(pass.value("experts_total", 0)),
          static_cast<long long>(pass.value("experts_read_unrouted", 0)), one, four);
      fflush(stdout);
      results[b].push_back(m);
    }
  }
  const double gbs = Median(best_gbs);
  printf(
      "\nmedians of %lld runs; load average at their starts: median %.2f (max %.2f); fastest "
      "cold read %.2f GB/s\n",
      static_cast<long long>(runs), Median(loads), *std::max_element(loads.begin(), loads.end()),
      gbs);
  printf("%5s %9s %9s %9s %9s %8s %8s %7s %9s %7s %9s\n", "rows", "experts", "uniform", "MB/pass",
         "uniform", "pass s", "read s", "/ read", "pieces s", "/ them", "compute s");
  const double total = static_cast<double>(kExperts * shape->sparse_layers);
  for (int64_t b : rows) {
    std::vector<double> pass, compute, bytes;
    for (const Measured& m : results[b]) {
      pass.push_back(m.pass_seconds);
      compute.push_back(m.compute_seconds);
      bytes.push_back(static_cast<double>(m.pass_bytes));
    }
    const double touched = planner::ExpectedExpertsTouched(kExperts, kTopK, b) *
                           static_cast<double>(shape->sparse_layers);
    const double uniform_bytes = static_cast<double>(shape->dense_bytes) +
                                 touched * static_cast<double>(shape->expert_bytes);
    const double read = Median(bytes) / (gbs * 1e9);
    const double pieces_read = Median(ranges_read[b]);
    printf("%5lld %4.0f/%-4.0f %9.1f %9.0f %9.0f %8.3f %8.3f %7.2f %9.3f %7.2f %9.3f\n",
           static_cast<long long>(b), Median(experts_read[b]), total, touched, Median(bytes) / 1e6,
           uniform_bytes / 1e6, Median(pass), read, Median(pass) / read, pieces_read,
           Median(pass) / pieces_read, Median(compute));
  }
  printf(
      "(experts: read per decode pass over all there are; uniform: what uniform top-%lld "
      "routing touches; MB/pass beside the uniform prediction (dense part + touched experts; "
      "the embedding rows aside); / read: the pass over the fastest cold read of its bytes; "
      "pieces s: a cold read of the very pieces the pass read, the faster of 1 and 4 in "
      "flight; / them: the pass over that)\n",
      static_cast<long long>(kTopK));
  return 0;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) { return nightshift::Main(argc, argv); }
