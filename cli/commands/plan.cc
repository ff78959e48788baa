// `nightshift plan`: can this machine stream this model, what does it cost in
// memory and disk, and how long does an answer take.
//
// Catalog form (--size-b ...) prices a model from its parameter count with
// the seed's rules of thumb; exact form (--model-dir DIR) reads the
// checkpoint's metadata and prices its real layers, KV shape and activations,
// and reports the catalog estimate beside it under "heuristic". A mixture of
// experts' exact plan also reports its total and active parameters and the
// bytes a pass is expected to read at 1, 16 and 256 rows; its seconds per
// pass read the expected bytes at the batch's rows.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/command_line.h"
#include "common/size.h"
#include "planner/checkpoint_shape.h"
#include "planner/estimate.h"
#include "planner/exact.h"
#include "planner/model_facts.h"
#include "planner/plan.h"
#include "planner/plan_json.h"
#include "planner/policy.h"
#include "planner/round.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::cli {
namespace {

using planner::PlanResult;

struct PlanFlags {
  double size_b = 0;
  int64_t layers = 0;
  std::string dtype = "bf16";
  bool moe = false;
  std::string model_dir;
  std::string expert_slice;  // exact form: the loader's expert slice size
  double budget_gb = 0, vram_gb = 0, unified_gb = 0, ram_gb = 0, available_ram_gb = 0;
  double read_gbs = 0, free_gb = 0;
  int64_t batch = 1, new_tokens = 300, prompt_tokens = 0, shared_prefix_tokens = 0;
  double context_k = planner::kDefaultContextK;
  bool prefetch = true;
  std::string device = "cpu";
  std::string streaming;
  bool compare = false;
  double mem_bw_gbs = 0;
  bool json = false;
};

void DeclareFlags(CommandLine& flags, PlanFlags& f) {
  flags.Double("size-b", &f.size_b, "catalog form: parameters, in billions");
  flags.Int("layers", &f.layers, "catalog form: decoder layers (else estimated from the size)");
  flags.String("dtype", &f.dtype,
               "catalog form: stored dtype: fp32|f32|fp16|f16|bf16|fp8|int8|q8|q4|int4 (bf16)",
               "NAME");
  flags.Bool("moe", &f.moe, "catalog form: a mixture-of-experts model (needs --layers)");
  flags.String("model-dir", &f.model_dir, "exact form: a checkpoint directory", "DIR");
  flags.String("expert-slice", &f.expert_slice,
               "exact form, mixture of experts: price the loader's expert slices at this size "
               "(the engine's: 256MiB)",
               "SIZE");
  flags.Double("budget-gb", &f.budget_gb, "memory budget in GB, given directly");
  flags.Double("vram-gb", &f.vram_gb, "GPU memory in GB (budget: 92%)");
  flags.Double("unified-gb", &f.unified_gb, "unified memory in GB (budget: 66%)");
  flags.Double("ram-gb", &f.ram_gb, "RAM in GB (budget: 80% when there is no GPU memory)");
  flags.Double("available-ram-gb", &f.available_ram_gb, "RAM free now: caps the budget");
  flags.Double("read-gbs", &f.read_gbs, "disk read bandwidth, GB/s (see `nightshift disk-bench`)");
  flags.Double("free-gb", &f.free_gb, "free disk space where the checkpoint lives, GB");
  flags.Int("batch", &f.batch, "sequences per pass (1)");
  flags.Int("new-tokens", &f.new_tokens, "answer length in tokens (300)");
  flags.Int("prompt-tokens", &f.prompt_tokens, "prompt length in tokens (0: unknown)");
  flags.Int("shared-prefix-tokens", &f.shared_prefix_tokens,
            "tokens at the start of every prompt of the batch that they share (an instruction): "
            "the first pass computes them once (at most --prompt-tokens)");
  flags.Double("context-k", &f.context_k, "context the KV cache is sized for, x1024 tokens (4)");
  flags.Bool("prefetch", &f.prefetch, "read the next layer while computing (--no-prefetch: off)");
  flags.String("device", &f.device, "exact form: cpu (fp32 compute) or gpu (stored dtype)",
               "cpu|gpu");
  flags.String("streaming", &f.streaming,
               "auto|always|never (else $NIGHTSHIFT_STREAMING, else auto)", "WORD");
  flags.Bool("compare", &f.compare, "also price running the model whole in memory");
  flags.Double("mem-bw-gbs", &f.mem_bw_gbs, "memory bandwidth for --compare, GB/s");
  flags.Bool("json", &f.json, "print one JSON object");
}

// Everything the flags say, checked.
struct PlanRequest {
  bool exact = false;
  planner::ModelSpec spec;  // catalog form
  planner::PlanOptions options;
  planner::Device device = planner::Device::kCpu;
  planner::StreamingRequest streaming = planner::StreamingRequest::kAuto;
  uint64_t expert_slice_bytes = planner::kDefaultExpertSliceBytes;  // exact form
};

Status CheckNotNegative(const CommandLine& flags, const char* name, double value) {
  if (flags.Seen(name) && value < 0) {
    return InvalidArgument(std::string("--") + name + " must not be negative");
  }
  return Status::Ok();
}

Status CheckModelFlags(const CommandLine& flags, const PlanFlags& f, PlanRequest& r) {
  bool catalog =
      flags.Seen("size-b") || flags.Seen("layers") || flags.Seen("dtype") || flags.Seen("moe");
  r.exact = flags.Seen("model-dir");
  if (r.exact && catalog) {
    return InvalidArgument(
        "--size-b, --layers, --dtype and --moe describe a catalog model; with --model-dir they "
        "come from the checkpoint");
  }
  if (r.exact) {
    if (f.model_dir.empty()) return InvalidArgument("--model-dir is empty");
    if (flags.Seen("expert-slice")) {
      StatusOr<uint64_t> bytes = ParseSize(f.expert_slice);
      if (!bytes.ok()) return InvalidArgument("--expert-slice: " + bytes.status().message());
      r.expert_slice_bytes = *bytes;
    }
    return Status::Ok();
  }
  if (flags.Seen("expert-slice")) {
    return InvalidArgument("--expert-slice prices a checkpoint's experts: it needs --model-dir");
  }
  if (!flags.Seen("size-b")) return InvalidArgument("give --size-b (catalog form) or --model-dir");
  if (!(f.size_b > 0)) return InvalidArgument("--size-b must be a positive number of billions");
  if (flags.Seen("layers") && f.layers < 1) return InvalidArgument("--layers must be at least 1");
  if (f.layers > 1'000'000) return InvalidArgument("--layers is implausibly large");
  if (f.moe && !flags.Seen("layers")) {
    return InvalidArgument(
        "a mixture-of-experts model needs --layers: its depth cannot be estimated from its size");
  }
  NS_ASSIGN_OR_RETURN(r.spec.bytes_per_param, planner::BytesPerParam(f.dtype));
  r.spec.size_b = f.size_b;
  r.spec.layers = static_cast<int>(f.layers);
  r.spec.moe = f.moe;
  return Status::Ok();
}

Status CheckMemoryFlags(const CommandLine& flags, const PlanFlags& f, PlanRequest& r) {
  const std::pair<const char*, double> sizes[] = {{"budget-gb", f.budget_gb},
                                                  {"vram-gb", f.vram_gb},
                                                  {"unified-gb", f.unified_gb},
                                                  {"ram-gb", f.ram_gb},
                                                  {"available-ram-gb", f.available_ram_gb}};
  for (const auto& [name, value] : sizes) {
    NS_RETURN_IF_ERROR(CheckNotNegative(flags, name, value));
  }
  bool pool = flags.Seen("vram-gb") || flags.Seen("unified-gb") || flags.Seen("ram-gb");
  if (flags.Seen("budget-gb")) {
    if (pool || flags.Seen("available-ram-gb")) {
      return InvalidArgument("--budget-gb is the budget itself: drop the memory pool flags");
    }
    r.options.budget_gb = f.budget_gb;
    return Status::Ok();
  }
  if (!pool) {
    return InvalidArgument("give the memory: --budget-gb, --vram-gb, --unified-gb or --ram-gb");
  }
  if (flags.Seen("vram-gb") && flags.Seen("unified-gb")) {
    return InvalidArgument("--vram-gb and --unified-gb describe different machines: give one");
  }
  planner::MemoryPools pools;
  if (flags.Seen("vram-gb")) pools.vram_gb = f.vram_gb;
  if (flags.Seen("unified-gb")) pools.unified_gb = f.unified_gb;
  if (flags.Seen("ram-gb")) pools.ram_gb = f.ram_gb;
  std::optional<double> live;
  if (flags.Seen("available-ram-gb")) live = f.available_ram_gb;
  r.options.budget_gb = planner::BudgetGb(pools, live);
  return Status::Ok();
}

Status CheckRunFlags(const CommandLine& flags, const PlanFlags& f, PlanRequest& r) {
  if (!flags.Seen("read-gbs"))
    return InvalidArgument("give --read-gbs (see `nightshift disk-bench`)");
  if (!(f.read_gbs > 0)) return InvalidArgument("--read-gbs must be positive");
  if (!flags.Seen("free-gb")) return InvalidArgument("give --free-gb");
  NS_RETURN_IF_ERROR(CheckNotNegative(flags, "free-gb", f.free_gb));
  if (f.batch < 1) return InvalidArgument("--batch must be at least 1");
  if (f.new_tokens < 1) return InvalidArgument("--new-tokens must be at least 1");
  if (f.prompt_tokens < 0) return InvalidArgument("--prompt-tokens must not be negative");
  if (f.shared_prefix_tokens < 0 || f.shared_prefix_tokens > f.prompt_tokens) {
    return InvalidArgument("--shared-prefix-tokens must be between 0 and --prompt-tokens (" +
                           std::to_string(f.prompt_tokens) + ")");
  }
  if (!(f.context_k > 0) || f.context_k > 1e6) {
    return InvalidArgument("--context-k must be positive (units of 1024 tokens)");
  }
  if (f.batch > 1'000'000 || f.new_tokens > 1'000'000'000 || f.prompt_tokens > 1'000'000'000) {
    return InvalidArgument("--batch, --new-tokens or --prompt-tokens is implausibly large");
  }
  r.options.disk = {f.read_gbs, f.free_gb};
  r.options.batch = f.batch;
  r.options.new_tokens = f.new_tokens;
  r.options.prompt_tokens = f.prompt_tokens;
  r.options.context_k = f.context_k;
  r.options.prefetching = f.prefetch;
  if (f.device == "cpu") {
    r.device = planner::Device::kCpu;
  } else if (f.device == "gpu" || f.device == "cuda") {
    r.device = planner::Device::kGpu;
  } else {
    return InvalidArgument("--device must be cpu or gpu, got '" + f.device + "'");
  }
  if (f.compare && !(f.mem_bw_gbs > 0)) {
    return InvalidArgument("--compare needs a positive --mem-bw-gbs");
  }
  if (!f.compare && flags.Seen("mem-bw-gbs"))
    return InvalidArgument("--mem-bw-gbs needs --compare");
  return Status::Ok();
}

StatusOr<PlanRequest> CheckFlags(const CommandLine& flags, const PlanFlags& f) {
  if (!flags.positional().empty()) {
    return InvalidArgument("unexpected argument '" + flags.positional()[0] + "'");
  }
  PlanRequest r;
  NS_RETURN_IF_ERROR(CheckModelFlags(flags, f, r));
  NS_RETURN_IF_ERROR(CheckMemoryFlags(flags, f, r));
  NS_RETURN_IF_ERROR(CheckRunFlags(flags, f, r));
  const char* env = std::getenv(planner::kStreamingEnvVar);
  std::optional<std::string> explicit_request;
  if (flags.Seen("streaming")) explicit_request = f.streaming;
  NS_ASSIGN_OR_RETURN(r.streaming,
                      planner::ResolveStreamingRequest(
                          explicit_request, env ? std::optional<std::string>(env) : std::nullopt));
  return r;
}

// One priced model: the sizing and the plan made from it.
struct Priced {
  planner::Sizing sizing;
  PlanResult plan;
};

Priced PriceCatalog(const planner::ModelSpec& spec, const planner::PlanOptions& options) {
  planner::Sizing sizing =
      planner::HeuristicSizing(spec, options.prefetching, options.context_k, options.batch);
  return {sizing, planner::PlanSized(sizing, options)};
}

// Everything `plan` reports.
struct Report {
  PlanRequest request;
  Priced main;                      // exact in exact form, the estimate otherwise
  std::optional<Priced> heuristic;  // exact form only
  std::optional<planner::CheckpointShape> shape;
  // Exact form with a budget: the split between KV budget and pinned groups.
  std::optional<planner::PinSplitPlan> split;
  planner::Comparison comparison;  // computed always: the decision needs resident_fits
  planner::Decision decision;
};

Status Price(const PlanFlags& f, Report& report) {
  const PlanRequest& r = report.request;
  if (!r.exact) {
    report.main = PriceCatalog(r.spec, r.options);
  } else {
    NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt, checkpoint::ReadCheckpoint(f.model_dir));
    NS_ASSIGN_OR_RETURN(planner::CheckpointShape shape, planner::ShapeOf(ckpt));
    if (r.expert_slice_bytes != shape.moe.slice_bytes) {
      shape.moe = planner::MoeFactsOf(ckpt, r.expert_slice_bytes);
    }
    planner::Sizing sizing = planner::ExactSizing(shape, r.options, r.device);
    report.main = {sizing, planner::PlanSized(sizing, r.options)};
    report.main.plan.id = f.model_dir;
    report.heuristic = PriceCatalog(planner::HeuristicSpec(shape), r.options);
    report.shape = shape;
    if (r.options.budget_gb) {
      // The activation working set from the shape (the engine's figure).
      checkpoint::ModelConfig config;
      config.hidden_size = shape.hidden;
      config.num_heads = shape.heads;
      config.num_kv_heads = shape.kv_heads;
      config.head_dim = shape.head_dim;
      config.intermediate_size = shape.intermediate;
      // The loader's groups (StreamedGroupBytes at the slice size priced).
      const std::vector<uint64_t>& groups = shape.moe.group_bytes;
      const uint64_t working_set = planner::StreamBufferBytes(groups, {}, r.options.prefetching,
                                                              planner::DeferredGroups(shape.moe)) +
                                   planner::ActivationWorkingSetBytes(config, 0);
      const uint64_t kv_per_sequence =
          planner::KvBytesPerToken(shape, planner::ComputeDtypeBytes(shape, r.device)) *
          static_cast<uint64_t>(planner::ContextTokens(r.options.context_k));
      report.split = planner::PlanPinSplit(
          shape.moe, static_cast<uint64_t>(*r.options.budget_gb * 1e9), working_set,
          kv_per_sequence, r.options.batch, *r.options.disk.read_gbs * 1e9);
    }
  }
  report.comparison = planner::CompareResident(report.main.sizing, report.main.plan, r.options,
                                               f.compare ? f.mem_bw_gbs : 0.0);
  planner::DecideInput in;
  in.request = r.streaming;
  in.conventional_resolved = report.comparison.resident_fits;
  // A GPU worker streams on CUDA; a CPU worker is nightshift's default and
  // tested path, so CPU counts as a runtime here.
  in.accelerator =
      r.device == planner::Device::kGpu ? planner::Accelerator::kCuda : planner::Accelerator::kCpu;
  in.allow_cpu = true;
  in.read_gbs = r.options.disk.read_gbs;
  report.decision = planner::Decide(in);
  return Status::Ok();
}

// The rows a mixture of experts' expected bytes per pass are reported at:
// one sequence decoding, a small batch, a full micro-batch.
constexpr int64_t kMoeReportRows[] = {1, 16, 256};

nlohmann::ordered_json MoeJson(const planner::MoeFacts& m) {
  nlohmann::ordered_json expected = nlohmann::ordered_json::array();
  for (int64_t rows : kMoeReportRows) {
    expected.push_back(
        {{"rows", rows},
         {"bytes", planner::ExpectedStreamedBytesPerPass(m, rows)},
         {"experts_touched", planner::ExpectedExpertsTouched(m.experts, m.top_k, rows)}});
  }
  return {{"sparse_layers", m.sparse_layers},
          {"experts", m.experts},
          {"top_k", m.top_k},
          {"expert_slice_bytes", m.slice_bytes},
          {"total_parameters", m.total_parameters},
          {"active_parameters", m.active_parameters},
          {"total_bytes", m.total_bytes},
          {"dense_bytes", m.dense_bytes},
          {"expert_bytes", m.expert_bytes},
          {"largest_expert_bytes", m.largest_expert_bytes},
          {"widest_slice_bytes", m.widest_slice_bytes},
          {"expected_bytes_per_pass", std::move(expected)}};
}

nlohmann::ordered_json ReportJson(const PlanFlags& f, const Report& report) {
  nlohmann::ordered_json j = planner::PlanJson(report.main.plan);
  const PlanResult& p = report.main.plan;
  j["mode"] = report.request.exact ? "exact" : "catalog";
  j["budget_gb"] = report.request.options.budget_gb
                       ? nlohmann::ordered_json(*report.request.options.budget_gb)
                       : nlohmann::ordered_json();
  if (report.shape) {
    const planner::CheckpointShape& s = *report.shape;
    int dtype_bytes = planner::ComputeDtypeBytes(s, report.request.device);
    j["device"] = report.request.device == planner::Device::kGpu ? "gpu" : "cpu";
    j["compute_dtype_bytes"] = dtype_bytes;
    j["largest_layer_gb"] = planner::PyRound(static_cast<double>(s.largest_group_bytes) / 1e9, 6);
    j["kv_bytes_per_token"] = planner::KvBytesPerToken(s, dtype_bytes);
    j["tokens_per_pass"] = planner::SharedFirstPassTokens(
        p.batch, std::max<int64_t>(1, p.prompt_tokens), f.shared_prefix_tokens);
    j["parameters"] = s.parameters;
    if (s.moe.is_moe()) j["moe"] = MoeJson(s.moe);
    j["heuristic"] = planner::PlanJson(report.heuristic->plan);
  }
  if (report.split) {
    nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
    for (const planner::PinSplit& a : report.split->alternatives) {
      alternatives.push_back({{"kv_sequences", a.kv_sequences},
                              {"kv_budget_bytes", a.kv_budget_bytes},
                              {"pinned_bytes", a.pinned_bytes},
                              {"streamed_bytes", a.streamed_bytes},
                              {"seconds_per_pass", a.seconds_per_pass},
                              {"jobs_per_pass", a.jobs_per_pass},
                              {"jobs_per_second", a.jobs_per_second}});
    }
    nlohmann::ordered_json split = {{"working_set_bytes", report.split->working_set_bytes}};
    if (!report.split->alternatives.empty()) {
      split["chosen"] = alternatives[report.split->chosen];
    } else {
      split["chosen"] = nullptr;
    }
    split["alternatives"] = std::move(alternatives);
    j["memory_split"] = std::move(split);
  }
  if (f.shared_prefix_tokens > 0) {
    const int64_t unshared = p.batch * p.prompt_tokens;
    const int64_t shared =
        planner::SharedFirstPassTokens(p.batch, p.prompt_tokens, f.shared_prefix_tokens);
    j["shared_prefix"] = {{"tokens", f.shared_prefix_tokens},
                          {"first_pass_tokens", shared},
                          {"first_pass_tokens_unshared", unshared},
                          {"tokens_saved", unshared - shared}};
  }
  j["streaming"] = planner::DecisionJson(report.decision);
  if (f.compare) j["compare"] = planner::ComparisonJson(report.comparison);
  return j;
}

// ---- human output ----

std::string Gb(std::optional<double> gb) {
  if (!gb) return "?";
  if (*gb >= 1) return planner::FormatFixed(*gb, 2) + " GB";
  if (*gb >= 0.001) return planner::FormatFixed(*gb * 1e3, 1) + " MB";
  return planner::FormatFixed(*gb * 1e6, 1) + " kB";
}

std::string Number(std::optional<double> x) { return x ? planner::PyRepr(*x) : "?"; }

// A flag's value as typed: 70 rather than 70.0.
std::string Plain(double x) {
  std::string text = planner::PyRepr(x);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

using Column = std::vector<std::string>;

// The table's values for one plan, in the order of kRowLabels.
// `moe`: the table has the expected-read row (a mixture of experts).
Column PlanColumn(const PlanResult& p, bool moe) {
  std::string layers = p.layers ? std::to_string(*p.layers) : "?";
  if (p.layers_estimated) layers += " (estimated)";
  Column column = {
      Gb(p.resident_gb),
      YesNo(p.fits),
      Gb(p.checkpoint_gb),
      Gb(p.disk.steady_gb),
      YesNo(p.disk_fits),
      layers,
      Gb(p.kv_cache_gb),
      Gb(p.activation_gb),
      Number(p.seconds_per_pass),
      Number(p.seconds_per_token),
      Number(p.est_tokens_per_s),
      planner::HumanDuration(p.time_to_first_token_s),
      p.answer_human,
      Number(p.effective_tps),
      YesNo(p.usable),
  };
  if (moe) column.insert(column.begin() + 3, p.pass_read_gb ? Gb(p.pass_read_gb) : "-");
  return column;
}

std::vector<std::string> RowLabels(const PlanResult& p, bool moe) {
  std::vector<std::string> labels = {"resident memory",
                                     "fits memory",
                                     moe ? "checkpoint" : "checkpoint (read per pass)",
                                     "disk needed",
                                     "fits disk",
                                     "layers",
                                     "KV cache per sequence",
                                     "activations",
                                     "seconds per pass",
                                     "seconds per token",
                                     "tokens/s (one sequence)",
                                     "time to first token",
                                     "answer (" + std::to_string(p.answer_tokens) + " tokens)",
                                     "effective tokens/s (batch " + std::to_string(p.batch) + ")",
                                     "usable"};
  if (moe) {
    labels.insert(labels.begin() + 3, "read per pass (expected, " + std::to_string(p.batch) +
                                          (p.batch == 1 ? " row)" : " rows)"));
  }
  return labels;
}

void PrintTable(const std::vector<std::string>& labels, const std::vector<std::string>& headers,
                const std::vector<Column>& columns) {
  size_t label_width = 0;
  for (const std::string& l : labels) label_width = std::max(label_width, l.size());
  std::vector<size_t> widths;
  for (size_t c = 0; c < columns.size(); ++c) {
    size_t w = headers[c].size();
    for (const std::string& v : columns[c]) w = std::max(w, v.size());
    widths.push_back(w);
  }
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w - s.size() + 2, ' '); };
  auto print_row = [&](const std::string& label, auto value_of) {
    std::cout << "  " << pad(label, label_width);
    for (size_t c = 0; c + 1 < columns.size(); ++c) std::cout << pad(value_of(c), widths[c]);
    std::cout << value_of(columns.size() - 1) << "\n";
  };
  print_row("", [&](size_t c) { return headers[c]; });
  for (size_t row = 0; row < labels.size(); ++row) {
    print_row(labels[row], [&](size_t c) { return columns[c][row]; });
  }
}

void PrintList(const std::string& title, const std::vector<std::string>& items) {
  if (items.empty()) return;
  std::cout << title << ":\n";
  for (const std::string& item : items) std::cout << "  - " << item << "\n";
}

std::string Bytes(uint64_t bytes) { return Gb(static_cast<double>(bytes) / 1e9); }

// A parameter count as people say it: 30.53B, 3.35M, 258.4k.
std::string Count(uint64_t n) {
  const double x = static_cast<double>(n);
  if (x >= 1e9) return planner::FormatFixed(x / 1e9, 2) + "B";
  if (x >= 1e6) return planner::FormatFixed(x / 1e6, 2) + "M";
  if (x >= 1e3) return planner::FormatFixed(x / 1e3, 1) + "k";
  return std::to_string(n);
}

// A mixture of experts: its parameters, and what a pass of 1, 16 and 256
// rows is expected to read (uniform routing; a slice is read when any of
// its experts is routed).
void PrintMoe(const planner::MoeFacts& m, int64_t layers) {
  std::cout << "mixture of experts: " << m.sparse_layers << " of " << layers << " layers sparse, "
            << m.experts << " experts each, top " << m.top_k << "; parameters "
            << Count(m.total_parameters) << " total, " << Count(m.active_parameters)
            << " active per token\n"
            << "bytes per pass, expected under uniform routing (dense " << Bytes(m.dense_bytes)
            << " always, experts " << Bytes(m.expert_bytes) << " in slices of at most "
            << Bytes(m.slice_bytes) << ", widest " << Bytes(m.widest_slice_bytes)
            << ", of which a pass reads the routed experts):\n";
  std::vector<std::string> labels;
  std::vector<Column> columns(4);
  for (int64_t rows : kMoeReportRows) {
    const uint64_t bytes = planner::ExpectedStreamedBytesPerPass(m, rows);
    const double share =
        static_cast<double>(bytes) / static_cast<double>(std::max<uint64_t>(1, m.total_bytes));
    labels.push_back(std::to_string(rows) + (rows == 1 ? " row" : " rows"));
    columns[0].push_back(Bytes(bytes));
    columns[1].push_back(std::to_string(bytes));
    columns[2].push_back(planner::FormatFixed(100.0 * share, 0) + "%");
    columns[3].push_back(
        planner::FormatFixed(planner::ExpectedExpertsTouched(m.experts, m.top_k, rows), 1) +
        " of " + std::to_string(m.experts));
  }
  PrintTable(labels, {"read per pass", "bytes", "of all", "experts touched a layer"}, columns);
  std::cout << "\n";
}

// The split between KV budget and pinned groups, every alternative priced.
void PrintSplit(const planner::PinSplitPlan& split, int64_t queued) {
  std::cout << "memory split (partial residency): after the working set of "
            << Bytes(split.working_set_bytes)
            << " (stream buffers + activations), the budget goes to the KV cache or to pinned "
               "layers; seconds per pass = streamed bytes / read speed, "
            << queued << " job(s) queued (--batch):\n";
  if (split.alternatives.empty()) {
    std::cout << "  no room for one sequence's KV cache beside the working set\n\n";
    return;
  }
  std::vector<Column> columns(7);
  std::vector<std::string> labels;
  for (size_t i = 0; i < split.alternatives.size(); ++i) {
    const planner::PinSplit& a = split.alternatives[i];
    labels.push_back(i == split.chosen ? "chosen" : "");
    columns[0].push_back(std::to_string(a.kv_sequences));
    columns[1].push_back(Bytes(a.kv_budget_bytes));
    columns[2].push_back(Bytes(a.pinned_bytes));
    columns[3].push_back(Bytes(a.streamed_bytes));
    columns[4].push_back(planner::FormatFixed(a.seconds_per_pass, 3));
    columns[5].push_back(std::to_string(a.jobs_per_pass));
    columns[6].push_back(planner::FormatFixed(a.jobs_per_second, 3));
  }
  PrintTable(labels,
             {"KV seqs", "KV budget", "pinned", "streamed", "s/pass", "jobs/pass", "jobs/s"},
             columns);
  std::cout << "\n";
}

void PrintHuman(const PlanFlags& f, const Report& report) {
  const PlanRequest& r = report.request;
  const PlanResult& p = report.main.plan;
  if (r.exact) {
    std::cout << "plan for " << f.model_dir << " (exact, from the checkpoint; "
              << (r.device == planner::Device::kGpu ? "gpu" : "cpu") << " compute)\n";
  } else {
    std::cout << "plan for a " << Plain(f.size_b) << "B model stored as " << f.dtype
              << (f.moe ? " (mixture of experts)" : "") << " (catalog estimate)\n";
  }
  std::cout << "memory budget " << Gb(r.options.budget_gb) << ", disk "
            << Plain(*r.options.disk.read_gbs) << " GB/s with " << Gb(r.options.disk.free_gb)
            << " free, batch " << p.batch << ", context " << Plain(p.context_k) << "k, prefetch "
            << (p.prefetching ? "on" : "off") << "\n\n";
  const bool moe = report.shape && report.shape->moe.is_moe();
  std::vector<Column> columns = {PlanColumn(p, moe)};
  std::vector<std::string> headers = {r.exact ? "exact" : "estimate"};
  if (report.heuristic) {
    columns.push_back(PlanColumn(report.heuristic->plan, moe));
    headers.push_back("seed estimate");
  }
  PrintTable(RowLabels(p, moe), headers, columns);
  std::cout << "\n";
  if (moe) PrintMoe(report.shape->moe, report.shape->layers);
  if (f.shared_prefix_tokens > 0) {
    const int64_t unshared = p.batch * p.prompt_tokens;
    const int64_t shared =
        planner::SharedFirstPassTokens(p.batch, p.prompt_tokens, f.shared_prefix_tokens);
    std::cout << "shared prefix: " << f.shared_prefix_tokens << " of " << p.prompt_tokens
              << " prompt tokens shared by a batch of " << p.batch << ": the first pass computes "
              << shared << " tokens instead of " << unshared << " ("
              << planner::FormatFixed(static_cast<double>(unshared) / shared, 1) << "x fewer)\n\n";
  }
  PrintList("blockers", p.blockers);
  PrintList("warnings", p.warnings);
  if (f.compare) {
    const planner::Comparison& c = report.comparison;
    std::cout << "resident: " << Gb(c.resident_whole_gb) << " whole, "
              << (c.resident_fits ? "fits" : "does not fit") << "; answer "
              << planner::HumanDuration(c.resident_seconds) << " resident, "
              << planner::HumanDuration(c.streamed_seconds) << " streamed\n"
              << c.verdict << "\n";
  }
  if (report.split) PrintSplit(*report.split, p.batch);
  std::cout << "streaming (" << planner::StreamingRequestName(report.decision.request)
            << "): " << report.decision.reason << "\n";
}

int RunPlan(int argc, char** argv) {
  PlanFlags f;
  CommandLine flags(
      "nightshift plan (--size-b B [--layers N] [--dtype D] [--moe] | --model-dir DIR)\n"
      "       (--budget-gb X | --vram-gb X | --unified-gb X | --ram-gb X) "
      "[--available-ram-gb Y]\n"
      "       --read-gbs X --free-gb X [--batch N] [--new-tokens N] [--context-k K]\n"
      "       [--prompt-tokens N [--shared-prefix-tokens S]]\n"
      "       [--expert-slice SIZE]\n"
      "       [--no-prefetch] [--compare --mem-bw-gbs X] [--json]",
      "Prices streaming one model on this machine: resident memory, disk, seconds per pass\n"
      "and per token, time to the first token and to a whole answer, and whether it is usable.\n"
      "With --model-dir the figures come from the checkpoint's real layers and shapes, and the\n"
      "catalog estimate is shown beside them. With --shared-prefix-tokens, it also says how\n"
      "many tokens the batch's first pass computes when its prompts share that prefix.");
  DeclareFlags(flags, f);
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  StatusOr<PlanRequest> request = CheckFlags(flags, f);
  if (!request.ok()) return Fail("plan", request.status());
  Report report;
  report.request = *request;
  if (Status st = Price(f, report); !st.ok()) return Fail("plan", st);
  if (f.json) {
    std::cout << ReportJson(f, report).dump(2) << "\n";
  } else {
    PrintHuman(f, report);
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("plan", "price streaming a model: memory, disk, time per token and answer",
                    RunPlan);

}  // namespace nightshift::cli
