// nightshift-worker: serves the checkpoints under its model roots to one
// scheduler. See worker/daemon/worker.h for what it does with a lease and
// session.h for the connection; this file reads the flags, sizes the machine
// and wires the pieces together.

#include <signal.h>
#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "common/command_line.h"
#include "common/metrics_http.h"
#include "common/size.h"
#include "worker/daemon/engine_adapter.h"
#include "worker/daemon/log.h"
#include "worker/daemon/model_catalog.h"
#include "worker/daemon/read_bandwidth.h"
#include "worker/daemon/resources.h"
#include "worker/daemon/session.h"
#include "worker/daemon/worker.h"
#include "worker/daemon/worker_metrics.h"

namespace nightshift::worker {
namespace {

constexpr char kVersion[] = "0.1.0";  // as the scheduler's SchedulerVersion()

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct Flags {
  std::string scheduler;
  std::string token;
  std::string id;
  std::vector<std::string> roots;
  std::string memory_budget;
  std::string kv_budget;
  std::string host_memory_budget;
  std::string activation_budget;
  int64_t pass_token_budget = 0;
  std::string kv_dtype = "auto";
  std::string compute_dtype = "auto";
  bool batch_invariant = true;
  std::string device = "auto";
  std::string streaming;
  int64_t metrics_port = -1;
  std::string tls_ca;
  int64_t threads = 0;
  double read_bandwidth = 0;
  std::string state_dir;
  int64_t max_batch_jobs = 0;
  double min_pass_seconds = 0;
  std::string runtime_allowance = "512M";
  double unhealthy_seconds = 60;
  double keepalive_seconds = 10;
  double keepalive_timeout_seconds = 10;
};

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "worker";
  return name;
}

std::string DefaultStateDir() {
  if (auto xdg = Env("XDG_CACHE_HOME"); xdg && !xdg->empty()) return *xdg + "/nightshift";
  if (auto home = Env("HOME"); home && !home->empty()) return *home + "/.cache/nightshift";
  return "/tmp/nightshift-cache";
}

CommandLine MakeFlags(Flags* f) {
  CommandLine flags(
      "nightshift-worker --scheduler HOST:PORT --model-root DIR [--model-root DIR ...] [options]",
      "Runs the scheduler's batches of the checkpoints under its model roots (each subdirectory\n"
      "is a model, advertised by its name), streaming them layer by layer when they do not fit.\n"
      "SIGTERM drains: the current pass finishes, the rest is handed back, exit 0.");
  flags.String("scheduler", &f->scheduler, "scheduler address (required)", "HOST:PORT");
  flags.String("token", &f->token, "worker token", "T");
  flags.String("id", &f->id, "worker id (default: the hostname)", "NAME");
  flags.StringList("model-root", &f->roots, "a directory of checkpoints (repeatable; required)",
                   "DIR");
  flags.String("memory-budget", &f->memory_budget,
               "memory the worker may use, e.g. 8G (default: free GPU memory, or 80% of RAM / the "
               "cgroup limit); on the CPU never more than the cgroup's memory limit less "
               "--runtime-allowance (the log and the advert say when it was cut)",
               "BYTES");
  flags.String("runtime-allowance", &f->runtime_allowance,
               "memory the process needs beyond its pass plan (libraries, threads, allocator "
               "slack): a memory cgroup's limit less this is the most a pass plan may use "
               "(default 512M)",
               "SIZE");
  flags.String("kv-budget", &f->kv_budget,
               "a fixed KV cache budget; a streamed model pins layers in what the memory budget "
               "leaves after it (default: what the planner leaves of the memory budget, as a "
               "ceiling: a streamed model then keeps KV for the jobs in flight and pins layers "
               "in the rest, pass by pass)",
               "BYTES");
  flags.String("host-memory-budget", &f->host_memory_budget,
               "on a GPU, host memory (page-locked) that keeps the layers GPU memory does not, "
               "so passes copy them instead of reading the disk (default: none; ignored on the "
               "CPU, whose --memory-budget pins layers in host memory)",
               "SIZE");
  flags.String("activation-budget", &f->activation_budget,
               "temporaries a layer may use at once, e.g. 64M (default: 256 rows' worth)", "SIZE");
  flags.Int("pass-token-budget", &f->pass_token_budget,
            "tokens one pass may compute: prompts and labels of joining jobs (a prefix they "
            "share, or one kept from the pass before, counted once), one per decoding job "
            "(default: 64 MiB of hidden states and one layer's keys and values)",
            "N");
  flags.String("kv-dtype", &f->kv_dtype,
               "the KV cache's dtype: auto (default: f32 on the CPU, the projections' 16-bit "
               "dtype on a GPU), f32, bf16 or f16 (half the bytes per token)",
               "DTYPE");
  flags.String("compute-dtype", &f->compute_dtype,
               "the CPU's projections: auto (default: bf16-avx512 for 16-bit weights where the "
               "CPU has AVX512-BF16, else f32-tile; F32 models stay float32; with "
               "--no-batch-invariant, per row count the kernel measured fastest on each model's "
               "shapes, cached in --state-dir), f32 or bf16",
               "DTYPE");
  flags.Bool("batch-invariant", &f->batch_invariant,
             "one summation order at every row count, so a job's result does not depend on the "
             "jobs beside it (default true; --batch-invariant=false: the fastest kernel per row "
             "count)");
  flags.String("device", &f->device, "auto, cpu, cuda or cuda:N (default auto)", "DEVICE");
  flags.String("streaming", &f->streaming,
               "auto (resident when it fits, else streamed, layers pinned in the memory the KV "
               "cache leaves), "
               "always (stream everything) or never (or NIGHTSHIFT_STREAMING; the flag wins)",
               "MODE");
  flags.Int("metrics-port", &f->metrics_port,
            "serve /metrics on this port (0 = any free port, printed; -1 = off, the default)");
  flags.String("tls-ca", &f->tls_ca, "connect with TLS, trusting this CA (PEM)", "FILE");
  flags.Int("threads", &f->threads, "compute threads (default: one per core)");
  flags.Double("read-bandwidth", &f->read_bandwidth,
               "read bandwidth to advertise, skipping the measurement", "BYTES_PER_S");
  flags.String("state-dir", &f->state_dir,
               "where the measured bandwidth and kernel timings are cached (default "
               "$XDG_CACHE_HOME/nightshift or ~/.cache/nightshift)",
               "DIR");
  flags.Int("max-batch-jobs", &f->max_batch_jobs,
            "most jobs per batch (0 = the KV budget decides)");
  flags.Double("unhealthy-seconds", &f->unhealthy_seconds,
               "after a pass fails reading a model's checkpoint (an I/O error, a short read) the "
               "batch's jobs go back to the queue and the model is unhealthy (offered to no "
               "batch) this long, then offered again (default 60)",
               "S");
  flags.Double("keepalive-seconds", &f->keepalive_seconds,
               "ping the scheduler this often, so that a link gone silent (no FIN, no RST) is "
               "found and the worker reconnects, resending the results it holds (default 10; at "
               "least 1)",
               "S");
  flags.Double("keepalive-timeout-seconds", &f->keepalive_timeout_seconds,
               "drop the connection when a ping is not answered within this (default 10)", "S");
  flags.Double("min-pass-seconds", &f->min_pass_seconds,
               "make every pass last at least this long (a test knob)", "S");
  flags.Env("token", "NIGHTSHIFT_WORKER_TOKEN");
  flags.Env("device", "NIGHTSHIFT_DEVICE");
  flags.Env("min-pass-seconds", "NIGHTSHIFT_MIN_PASS_SECONDS");
  flags.ConfigFile();
  return flags;
}

// Checks what is required and names the worker after its host by default.
Status Complete(Flags* f) {
  if (f->scheduler.empty()) return InvalidArgument("--scheduler is required");
  if (f->roots.empty()) return InvalidArgument("at least one --model-root is required");
  if (f->pass_token_budget < 0) {
    return InvalidArgument("--pass-token-budget must be a positive count (0: the default)");
  }
  if (!engine::ParseKvDType(f->kv_dtype).ok()) {
    return InvalidArgument("--kv-dtype must be auto, f32, bf16 or f16, not '" + f->kv_dtype + "'");
  }
  if (!engine::ParseComputeDType(f->compute_dtype).ok()) {
    return InvalidArgument("--compute-dtype must be auto, f32 or bf16, not '" + f->compute_dtype +
                           "'");
  }
  if (f->metrics_port < -1 || f->metrics_port > 65535) {
    return InvalidArgument("--metrics-port must be -1..65535");
  }
  if (f->id.empty()) f->id = Hostname();
  if (f->threads < 0) return InvalidArgument("--threads must be 0 (one per core) or more");
  if (f->max_batch_jobs < 0 || f->max_batch_jobs > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument("--max-batch-jobs must be 0 (no limit) or a positive count");
  }
  if (f->read_bandwidth < 0) {
    return InvalidArgument("--read-bandwidth must be positive (bytes per second), or 0 to measure");
  }
  if (f->min_pass_seconds < 0) return InvalidArgument("--min-pass-seconds must be 0 or more");
  if (f->unhealthy_seconds < 0) return InvalidArgument("--unhealthy-seconds must be 0 or more");
  if (f->keepalive_seconds < 1 || f->keepalive_timeout_seconds <= 0) {
    return InvalidArgument(
        "--keepalive-seconds must be at least 1 (the scheduler refuses pings more often than "
        "every half second) and --keepalive-timeout-seconds positive");
  }
  if (f->state_dir.empty()) f->state_dir = DefaultStateDir();
  return Status::Ok();
}

// Each root's read bandwidth, in the order of f.roots: measured (or cached),
// or --read-bandwidth with the engine's default way of reading (buffered,
// its default reads in flight: streams 0).
StatusOr<std::vector<ReadBandwidth>> Bandwidths(const Flags& f) {
  std::vector<ReadBandwidth> figures;
  for (const std::string& root : f.roots) {
    if (f.read_bandwidth > 0) {
      figures.push_back({f.read_bandwidth, false, 0, f.read_bandwidth});
      continue;
    }
    bool cached = false;
    NS_ASSIGN_OR_RETURN(ReadBandwidth figure, MeasureReadBandwidth(root, {f.state_dir}, &cached));
    std::ostringstream line;
    line << "read bandwidth of " << root << ": " << figure.bytes_per_second / 1e9 << " GB/s, "
         << figure.streams << (figure.streams == 1 ? " stream" : " streams")
         << (figure.direct ? " with O_DIRECT" : " through the page cache");
    if (figure.streams > 1) {
      line << "; one stream " << figure.one_read_bytes_per_second / 1e9
           << " GB/s (models whose layers fit in one read)";
    }
    line << " (" << (cached ? "cached" : "measured") << ")";
    LogLine(line.str());
    figures.push_back(figure);
  }
  return figures;
}

// Times the CPU's projection kernels on each model's shapes (cached in the
// state directory, as Engine::Open's choice is) and prices its advertised
// seconds per pass with the measured rate (PriceCompute). A model whose
// kernels cannot be measured keeps the read-only price.
void PriceComputeOfModels(const Flags& f, engine::ComputeDType compute, Catalog* catalog) {
  for (ModelEntry& m : catalog->models) {
    engine::EngineOptions options;
    options.compute_dtype = compute;
    options.batch_invariant = f.batch_invariant;
    options.compute_state_dir = f.state_dir;
    options.threads = static_cast<int>(f.threads);
    StatusOr<engine::ComputeChoice> choice = engine::MeasureCompute(m.dir, options);
    if (!choice.ok()) {
      LogLine("model " + m.offer.name + ": compute not measured: " + choice.status().ToString());
      continue;
    }
    const int64_t tokens = AdvertPassTokens(m, catalog->kv_budget_bytes);
    PriceCompute(&m, catalog->kv_budget_bytes, choice->FlopsPerSecond(tokens));
    std::ostringstream line;
    line << "model " << m.offer.name << " compute " << engine::ComputeDTypeName(compute) << ": "
         << choice->Describe() << " (" << (choice->cached ? "cached" : "measured") << "; "
         << m.compute_flops_per_second / 1e9 << " GFLOP/s at " << tokens << " rows; CPU "
         << engine::HostCpu().model << ": " << engine::HostCpu().FlagsString() << ")";
    LogLine(line.str());
  }
}

void LogCatalog(const Catalog& catalog) {
  for (const ModelEntry& m : catalog.models) {
    std::ostringstream line;
    line << "model " << m.offer.name << " advertised: " << (m.resident ? "resident" : "streaming")
         << ", " << m.offer.checkpoint_bytes << " bytes, " << m.offer.kv_bytes_per_token
         << " KV bytes/token, "
         << (m.adaptive_split ? std::string("pins as the jobs in flight leave room")
                              : std::to_string(m.pinned_bytes) + " bytes pinned")
         << ", " << m.host_pinned_bytes << " in host memory, " << m.offer.seconds_per_pass
         << " s/pass, context " << m.offer.max_context_tokens << ", " << m.offer.pass_token_budget
         << " tokens per pass, "
         << (m.tokenizer != nullptr ? "tokenizer " + m.offer.tokenizer_hash.substr(0, 12)
                                    : std::string("no tokenizer"));
    LogLine(line.str());
  }
  for (const SkippedModel& s : catalog.skipped) {
    LogLine("model " + s.name + " skipped (" + s.root + "): " + s.reason);
  }
  if (catalog.models.empty()) LogLine("no model to advertise under the model roots");
}

int Run(int argc, char** argv) {
  Flags f;
  CommandLine flags = MakeFlags(&f);
  Status parsed = flags.Parse(argc, argv);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (parsed.ok()) parsed = Complete(&f);
  if (!parsed.ok()) {
    std::cerr << "nightshift-worker: " << parsed.message() << "\n";
    return 2;
  }
  auto fail = [](const Status& status) {
    LogLine("cannot start: " + status.ToString());
    return 1;
  };
  StatusOr<std::string> device = ResolveDevice(f.device, engine::CudaAvailable());
  if (!device.ok()) return fail(device.status());
  if (Status usable = engine::CheckDevice(*device); !usable.ok()) {
    // auto falls back to the CPU when the engine cannot compute on the GPU;
    // an explicit device is refused at start, not at the first batch.
    const bool automatic = f.device.empty() || strcasecmp(f.device.c_str(), "auto") == 0;
    if (!automatic) return fail(usable);
    LogLine("device auto: " + usable.message() + "; using the CPU");
    device = std::string("cpu");
  }
  StatusOr<planner::StreamingRequest> streaming = planner::ResolveStreamingRequest(
      flags.Seen("streaming") ? std::optional<std::string>(f.streaming) : std::nullopt,
      Env(planner::kStreamingEnvVar));
  if (!streaming.ok()) return fail(streaming.status());
  StatusOr<uint64_t> memory =
      f.memory_budget.empty() ? DetectMemoryBudget(*device) : ParseSize(f.memory_budget);
  if (!memory.ok()) return fail(memory.status().Prefixed("--memory-budget"));
  StatusOr<uint64_t> allowance = ParseSize(f.runtime_allowance);
  if (!allowance.ok()) return fail(allowance.status().Prefixed("--runtime-allowance"));
  // A memory cgroup smaller than the budget would OOM-kill the worker in
  // the middle of a batch the scheduler sized from the advert: plan within
  // the cgroup's limit less what the process needs besides the plan.
  const std::optional<CgroupLimit> cgroup = CgroupMemoryLimit();
  int64_t cgroup_limit_applied = 0;
  if (*device == "cpu") {
    bool cut = false;
    StatusOr<uint64_t> planned = PlannedMemory(*memory, cgroup, *allowance, &cut);
    if (!planned.ok()) return fail(planned.status());
    if (cut) {
      std::ostringstream line;
      line << "memory budget cut from " << *memory << " to " << *planned
           << " bytes: the cgroup's memory limit is " << cgroup->bytes << " bytes (" << cgroup->file
           << "), less the runtime's allowance of " << *allowance << " bytes";
      LogLine(line.str());
      *memory = *planned;
      cgroup_limit_applied = static_cast<int64_t>(cgroup->bytes);
    }
  }
  uint64_t kv_budget = 0;
  if (!f.kv_budget.empty()) {
    StatusOr<uint64_t> kv = ParseSize(f.kv_budget);
    if (!kv.ok()) return fail(kv.status().Prefixed("--kv-budget"));
    kv_budget = *kv;
  }
  uint64_t host_memory_budget = 0;
  if (!f.host_memory_budget.empty()) {
    StatusOr<uint64_t> bytes = ParseSize(f.host_memory_budget);
    if (!bytes.ok()) return fail(bytes.status().Prefixed("--host-memory-budget"));
    if (*device == "cpu") {
      LogLine("--host-memory-budget is for a GPU; ignored on the CPU");
    } else {
      // On a GPU the cgroup bounds the host tier (page-locked host memory).
      bool cut = false;
      StatusOr<uint64_t> planned = PlannedMemory(*bytes, cgroup, *allowance, &cut);
      if (!planned.ok()) return fail(planned.status());
      if (cut) {
        LogLine("--host-memory-budget cut from " + std::to_string(*bytes) + " to " +
                std::to_string(*planned) + " bytes: the cgroup's memory limit is " +
                std::to_string(cgroup->bytes) + " bytes (" + cgroup->file +
                "), less the runtime's allowance");
        cgroup_limit_applied = static_cast<int64_t>(cgroup->bytes);
      }
      host_memory_budget = *planned;
    }
  }
  uint64_t activation_budget = 0;
  if (!f.activation_budget.empty()) {
    StatusOr<uint64_t> bytes = ParseSize(f.activation_budget);
    if (!bytes.ok()) return fail(bytes.status().Prefixed("--activation-budget"));
    activation_budget = *bytes;
  }
  StatusOr<engine::KvDType> kv_dtype = engine::ParseKvDType(f.kv_dtype);  // checked by Complete
  if (!kv_dtype.ok()) return fail(kv_dtype.status());
  StatusOr<std::vector<ReadBandwidth>> bandwidths = Bandwidths(f);
  if (!bandwidths.ok()) return fail(bandwidths.status());
  // How the engines of each (canonical) root read: the disk bench's chosen way.
  std::map<std::string, ReadBandwidth> read_modes;
  for (size_t i = 0; i < f.roots.size(); ++i) {
    std::error_code ec;
    const std::filesystem::path canonical = std::filesystem::canonical(f.roots[i], ec);
    read_modes[ec ? f.roots[i] : canonical.string()] = (*bandwidths)[i];
  }

  CatalogOptions catalog_options;
  catalog_options.roots = f.roots;
  for (const ReadBandwidth& b : *bandwidths) {
    catalog_options.read_bytes_per_second.push_back(b.bytes_per_second);
    catalog_options.one_read_bytes_per_second.push_back(b.one_read_bytes_per_second);
  }
  catalog_options.memory_budget_bytes = *memory;
  catalog_options.kv_budget_bytes = kv_budget;
  catalog_options.host_memory_budget_bytes = host_memory_budget;
  catalog_options.pass_token_budget = f.pass_token_budget;
  catalog_options.kv_dtype_bytes = engine::KvDTypeBytes(*kv_dtype);  // 0: auto, per model
  catalog_options.streaming = *streaming;
  catalog_options.device = *device == "cpu" ? planner::Device::kCpu : planner::Device::kGpu;
  StatusOr<Catalog> catalog = ScanModelRoots(catalog_options);
  if (!catalog.ok()) return fail(catalog.status());
  const engine::ComputeDType compute = *engine::ParseComputeDType(f.compute_dtype);  // checked
  if (*device == "cpu") PriceComputeOfModels(f, compute, &*catalog);
  LogCatalog(*catalog);

  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics worker_metrics(registry, f.id);
  double slowest = 0;
  for (const ReadBandwidth& b : *bandwidths) {
    slowest = slowest == 0 ? b.bytes_per_second : std::min(slowest, b.bytes_per_second);
  }
  worker_metrics.SetReadBandwidth(slowest);
  worker_metrics.SetKvBudget(catalog->kv_budget_bytes);
  worker_metrics.SetKvInUse(0);
  for (const ModelEntry& m : catalog->models) worker_metrics.SetModelUnhealthy(m.offer.name, false);
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (f.metrics_port >= 0) {
    metrics::MetricsServerOptions options;
    options.port = static_cast<int>(f.metrics_port);
    auto server = metrics::MetricsServer::Start(options, registry);
    if (!server.ok()) return fail(server.status().Prefixed("--metrics-port"));
    metrics_server = std::move(*server);
    LogLine("metrics listening on " + options.address + ":" +
            std::to_string(metrics_server->port()));
  }

  const std::string engine_device = *device;
  const int threads = static_cast<int>(f.threads);
  EngineFactory factory = [engine_device, threads, activation_budget, kv_dtype = *kv_dtype, compute,
                           state_dir = f.state_dir, batch_invariant = f.batch_invariant,
                           read_modes](const ModelEntry& model,
                                       uint64_t kv) -> StatusOr<std::unique_ptr<BatchEngine>> {
    engine::EngineOptions options;
    if (auto mode = read_modes.find(model.root); mode != read_modes.end()) {
      options.direct_reads = mode->second.direct;
      options.read_streams = mode->second.streams;
    }
    options.residency = model.resident ? engine::Residency::kResident : engine::Residency::kStream;
    options.kv_budget_bytes = kv;
    options.pass_token_budget = model.offer.pass_token_budget;
    options.activation_budget_bytes = activation_budget;
    options.kv_dtype = kv_dtype;
    options.memory_budget_bytes = model.memory_budget_bytes;  // pins model.pinned_bytes
    options.adaptive_split = model.adaptive_split;            // or as the jobs in flight leave room
    options.host_memory_budget_bytes = model.host_memory_budget_bytes;  // model.host_pinned_bytes
    options.device = engine_device;
    options.threads = threads;
    options.compute_dtype = compute;
    options.batch_invariant = batch_invariant;
    options.compute_state_dir = state_dir;  // the choice measured at start, from the cache
    NS_ASSIGN_OR_RETURN(std::unique_ptr<EngineBatchEngine> engine,
                        EngineBatchEngine::Open(model.dir, options));
    return std::unique_ptr<BatchEngine>(std::move(engine));
  };

  SessionOptions session_options;
  session_options.connect = {f.scheduler, f.token, !f.tls_ca.empty(), f.tls_ca};
  session_options.connect.keepalive_ms = static_cast<int>(f.keepalive_seconds * 1000);
  session_options.connect.keepalive_timeout_ms =
      static_cast<int>(f.keepalive_timeout_seconds * 1000);
  session_options.info.id = f.id;
  session_options.info.device = engine_device;
  session_options.info.memory_budget_bytes = static_cast<int64_t>(*memory);
  session_options.info.cgroup_memory_limit_bytes = cgroup_limit_applied;
  session_options.info.kv_budget_bytes = static_cast<int64_t>(catalog->kv_budget_bytes);
  session_options.info.read_bytes_per_second = slowest;
  session_options.info.max_batch_jobs = static_cast<int32_t>(f.max_batch_jobs);
  for (const ModelEntry& m : catalog->models) {
    session_options.info.models.push_back(m.offer);
    if (!m.offer.tokenizer_hash.empty()) {
      session_options.tokenizers[m.offer.tokenizer_hash] = m.tokenizer_files;
    }
  }
  session_options.version = kVersion;

  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  std::ostringstream line;
  line << "worker " << f.id << " starting: device " << engine_device << ", memory budget "
       << *memory << " bytes, KV budget " << catalog->kv_budget_bytes << " bytes, streaming "
       << planner::StreamingRequestName(*streaming) << ", scheduler " << f.scheduler;
  if (cgroup) line << ", cgroup memory limit " << cgroup->bytes << " bytes";
  LogLine(line.str());

  WorkerOptions worker_options;
  worker_options.min_pass_seconds = f.min_pass_seconds;
  worker_options.unhealthy_seconds = f.unhealthy_seconds;
  Worker worker(&*catalog, factory, nullptr, &worker_metrics, worker_options);
  Session session(std::move(session_options), &worker);
  worker.SetLink(&session);
  Status started = session.Start();
  if (!started.ok()) return fail(started);
  worker.Run(g_stop);
  session.Stop(/*flush_seconds=*/10);
  LogLine("stopped");
  return 0;
}

}  // namespace
}  // namespace nightshift::worker

int main(int argc, char** argv) { return nightshift::worker::Run(argc, argv); }
