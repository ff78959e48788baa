#include "worker/daemon/model_catalog.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/disk_bench.h"
#include "planner/checkpoint_shape.h"
#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/engine/architecture.h"
#include "worker/engine/engine.h"

namespace nightshift::worker {
namespace {

namespace fs = std::filesystem;

// The canonical form of `path`; NotFound when it does not exist.
StatusOr<fs::path> Canonical(const std::string& path) {
  std::error_code ec;
  fs::path canonical = fs::canonical(path, ec);
  if (ec) return NotFound(path + ": " + ec.message());
  return canonical;
}

bool IsInside(const fs::path& root, const fs::path& path) {
  auto r = root.begin();
  auto p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (p == path.end() || *r != *p) return false;
  }
  return true;
}

Status CheckName(const std::string& name) {
  if (name.empty()) return InvalidArgument("model name is empty");
  if (name == "." || name == "..") return InvalidArgument("model name '" + name + "' is refused");
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return InvalidArgument("model name '" + name + "' is not a plain directory name");
  }
  return Status::Ok();
}

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path.string() + ": cannot be read");
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// Reads the metadata of checkpoint `name` under `root`, checking that every
// file the engine reads resolves inside the root: the JSON files before
// they are read, the weights files (which the reader keeps inside the
// directory) after.
StatusOr<checkpoint::Checkpoint> ReadCheckpointInsideRoot(const std::string& root,
                                                          const std::string& name) {
  NS_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(root, name));
  NS_RETURN_IF_ERROR(CheckInsideRoot(root, (fs::path(dir) / "config.json").string()));
  const fs::path generation = fs::path(dir) / "generation_config.json";
  std::error_code ec;
  if (fs::exists(fs::symlink_status(generation, ec))) {
    NS_RETURN_IF_ERROR(CheckInsideRoot(root, generation.string()));
  }
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt, checkpoint::ReadCheckpoint(dir));
  for (const checkpoint::FileInfo& file : ckpt.files) {
    NS_RETURN_IF_ERROR(CheckInsideRoot(root, file.path));
  }
  return ckpt;
}

// Prices entry's pass from the bytes a pass of the advert's tokens reads
// (AdvertPassBytes; a dense checkpoint's whatever the tokens), at its
// read bandwidth.
void PriceRead(ModelEntry* entry, uint64_t kv_budget_bytes) {
  const uint64_t pass_bytes = AdvertPassBytes(*entry, AdvertPassTokens(*entry, kv_budget_bytes));
  entry->offer.checkpoint_bytes = static_cast<int64_t>(pass_bytes);
  entry->offer.seconds_per_pass = planner::PassSeconds(pass_bytes, entry->read_bytes_per_second);
}

// Places and prices one valid checkpoint; the reason when it cannot be served.
StatusOr<ModelEntry> Price(const CatalogOptions& options, const checkpoint::Checkpoint& ckpt,
                           const engine::ModelConfig& config, checkpoint::DType projection_dtype,
                           double read_bytes_per_second, double one_read_bytes_per_second) {
  NS_ASSIGN_OR_RETURN(planner::CheckpointShape shape, planner::ShapeOf(ckpt));
  const std::vector<uint64_t> groups = planner::StreamedGroupBytes(ckpt);
  const planner::MoeFacts moe = planner::MoeFactsOf(ckpt);
  const std::vector<bool> deferred = planner::DeferredGroups(moe);
  read_bytes_per_second =
      StreamReadBandwidth(groups, read_bytes_per_second, one_read_bytes_per_second);
  const int compute_bytes = planner::ComputeDtypeBytes(shape, options.device);
  // Weights are held in the compute dtype once loaded (fp32 on a CPU).
  const double widen = static_cast<double>(compute_bytes) / std::max(1, shape.stored_dtype_bytes);
  const int64_t context = planner::MaxContextTokens(config);
  const uint64_t activations =
      planner::ActivationBytes(shape, compute_bytes, /*batch=*/1, /*prompt_tokens=*/0, context);
  const uint64_t whole = static_cast<uint64_t>(shape.tensor_bytes * widen) + activations;
  // Streaming holds the layer being computed and the one being prefetched.
  const uint64_t streamed =
      static_cast<uint64_t>(2 * shape.largest_group_bytes * widen) + activations;

  planner::DecideInput in;
  in.request = options.streaming;
  in.conventional_resolved = whole <= options.memory_budget_bytes;
  in.accelerator = options.device == planner::Device::kGpu ? planner::Accelerator::kCuda
                                                           : planner::Accelerator::kCpu;
  in.allow_cpu = true;  // the operator started this worker on this machine
  in.read_gbs = read_bytes_per_second / 1e9;
  const planner::Decision decision = planner::Decide(in);
  if (!decision.activate && !in.conventional_resolved) {
    return ResourceExhausted("needs " + std::to_string(whole) + " bytes resident, budget is " +
                             std::to_string(options.memory_budget_bytes) +
                             " and streaming is off (" + decision.reason + ")");
  }
  ModelEntry entry;
  entry.resident = !decision.activate;
  entry.footprint_bytes = entry.resident ? whole : streamed;
  if (entry.footprint_bytes >= options.memory_budget_bytes) {
    return ResourceExhausted("needs " + std::to_string(entry.footprint_bytes) +
                             " bytes even streamed, leaving nothing of the memory budget of " +
                             std::to_string(options.memory_budget_bytes) + " for the KV cache");
  }
  entry.dir = ckpt.dir;
  // The model facts the scheduler sizes and prices with, from the functions
  // the engine uses (planner/model_facts.h): KV bytes in the dtype of the
  // engine's cache (another figure, the stored dtype on a GPU, would lease
  // other than the jobs the engine admits), the bytes a pass streams at the measured bandwidth,
  // (less what it pins) and the engine's default context.
  const int kv_dtype_bytes =
      options.kv_dtype_bytes > 0
          ? options.kv_dtype_bytes
          : engine::KvDTypeBytes(engine::ResolveKvDType(
                engine::KvDType::kAuto, options.device == planner::Device::kGpu, projection_dtype));
  entry.offer.kv_bytes_per_token =
      static_cast<int64_t>(planner::KvBytesPerToken(config, kv_dtype_bytes));
  const bool partial = !entry.resident && options.streaming != planner::StreamingRequest::kAlways;
  std::vector<bool> pinned;
  if (partial && options.kv_budget_bytes > 0) {
    // What the engine will pin under this memory budget (EngineOptions::
    // memory_budget_bytes with a KV budget: stream buffers, the full
    // activation working set and the KV budget first).
    const uint64_t pin_budget = planner::PinBudgetBytes(
        options.memory_budget_bytes,
        planner::StreamBufferBytes(groups, {}, /*prefetch=*/true, deferred),
        planner::ActivationWorkingSetBytes(config, 0), options.kv_budget_bytes);
    pinned = planner::ChoosePinnedGroups(groups, pin_budget);
    entry.pinned_bytes = planner::PinnedBytes(groups, pinned);
    if (entry.pinned_bytes > 0) entry.memory_budget_bytes = options.memory_budget_bytes;
  } else if (partial) {
    // No KV budget given: the derived one is a ceiling the scheduler sizes
    // batches against, and the engine splits the memory budget between the
    // KV of the jobs in flight and pinned groups pass by pass
    // (EngineOptions::adaptive_split). The advert prices the full batch's
    // split, every group streamed; the measured passes take over.
    entry.adaptive_split = true;
    entry.memory_budget_bytes = options.memory_budget_bytes;
  }
  entry.unread_groups = pinned;
  entry.unread_groups.resize(groups.size(), false);
  if (partial && options.device == planner::Device::kGpu && options.host_memory_budget_bytes > 0) {
    // What the engine's host tier then keeps (Engine::Impl::FixHostTier).
    const std::vector<bool> host =
        planner::ChooseHostTierGroups(groups, pinned, options.host_memory_budget_bytes,
                                      /*prefetch=*/true, planner::PinPlacement::kSpread, deferred);
    entry.host_pinned_bytes = planner::PinnedBytes(groups, host);
    if (entry.host_pinned_bytes > 0) {
      entry.host_memory_budget_bytes = options.host_memory_budget_bytes;
    }
    for (size_t g = 0; g < host.size() && g < groups.size(); ++g) {
      if (host[g]) entry.unread_groups[g] = true;
    }
  }
  entry.moe = moe;
  entry.read_bytes_per_second = read_bytes_per_second;
  entry.layer_flops_per_token = planner::LayerFlopsPerToken(ckpt);
  entry.head_flops_per_row = planner::HeadFlopsPerRow(ckpt);
  entry.offer.max_context_tokens = context;
  entry.offer.pass_token_budget = options.pass_token_budget > 0
                                      ? options.pass_token_budget
                                      : planner::DefaultPassTokenBudget(config);
  // A pass of the advert's tokens (AdvertPassTokens; a derived KV budget
  // reprices it once known, ScanModelRoots).
  PriceRead(&entry, options.kv_budget_bytes);
  return entry;
}

// Reads, validates, places and prices `root/name`, with its tokenizer.
StatusOr<ModelEntry> ScanOne(const CatalogOptions& options, const std::string& root,
                             const std::string& name, double read_bytes_per_second,
                             double one_read_bytes_per_second) {
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt, ReadCheckpointInsideRoot(root, name));
  const std::string& dir = ckpt.dir;
  NS_ASSIGN_OR_RETURN(engine::ModelConfig config, engine::ParseModelConfig(ckpt.config));
  NS_ASSIGN_OR_RETURN(const engine::Architecture* arch,
                      engine::FindArchitecture(config.model_type));
  NS_ASSIGN_OR_RETURN(engine::ModelTensors tensors, engine::BindTensors(*arch, config, ckpt));
  NS_ASSIGN_OR_RETURN(ModelEntry entry,
                      Price(options, ckpt, config, engine::ProjectionDType(tensors),
                            read_bytes_per_second, one_read_bytes_per_second));
  entry.root = root;
  entry.offer.name = name;
  NS_ASSIGN_OR_RETURN(entry.tokenizer_files, ReadTokenizerFiles(root, dir));
  if (!entry.tokenizer_files.files.empty()) {
    NS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromModelDir(dir));
    if (tok.vocab_size() > config.vocab_size) {
      return InvalidArgument("tokenizer.json has " + std::to_string(tok.vocab_size()) +
                             " ids, the model only " + std::to_string(config.vocab_size));
    }
    entry.tokenizer_files.eos_ids = tok.eos_ids();
    entry.tokenizer = std::make_shared<const tokenizer::Tokenizer>(std::move(tok));
    entry.offer.tokenizer_hash = api::TokenizerHash(entry.tokenizer_files);
  }
  return entry;
}

std::vector<std::string> SubdirectoryNames(const fs::path& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code type_ec;
    if (fs::is_directory(it->path(), type_ec)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Status CheckInsideRoot(const std::string& root, const std::string& path) {
  NS_ASSIGN_OR_RETURN(fs::path canonical_root, Canonical(root));
  NS_ASSIGN_OR_RETURN(fs::path canonical, Canonical(path));
  if (!IsInside(canonical_root, canonical)) {
    return InvalidArgument(path + " resolves to " + canonical.string() +
                           ", outside the model root " + canonical_root.string());
  }
  return Status::Ok();
}

StatusOr<std::string> ResolveModelDir(const std::string& root, const std::string& name) {
  NS_RETURN_IF_ERROR(CheckName(name));
  if (fs::path(name).is_absolute()) return InvalidArgument("model name '" + name + "' is absolute");
  const std::string path = (fs::path(root) / name).string();
  NS_RETURN_IF_ERROR(CheckInsideRoot(root, path));
  NS_ASSIGN_OR_RETURN(fs::path canonical, Canonical(path));
  std::error_code ec;
  if (!fs::is_directory(canonical, ec)) return NotFound(path + " is not a directory");
  return canonical.string();
}

Status RecheckModelPaths(const ModelEntry& model) {
  NS_ASSIGN_OR_RETURN(checkpoint::Checkpoint ckpt,
                      ReadCheckpointInsideRoot(model.root, model.offer.name));
  if (ckpt.dir != model.dir) {
    return InvalidArgument("model " + model.offer.name + " now resolves to " + ckpt.dir +
                           ", not the advertised " + model.dir);
  }
  return Status::Ok();
}

StatusOr<api::TokenizerFiles> ReadTokenizerFiles(const std::string& root, const std::string& dir) {
  static const char* const kNames[] = {"tokenizer.json", "tokenizer_config.json",
                                       "special_tokens_map.json", "chat_template.jinja",
                                       "chat_template.json"};
  api::TokenizerFiles files;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "tokenizer.json", ec)) return files;
  for (const char* name : kNames) {
    const fs::path path = fs::path(dir) / name;
    if (!fs::exists(path, ec)) continue;
    NS_RETURN_IF_ERROR(CheckInsideRoot(root, path.string()));
    NS_ASSIGN_OR_RETURN(files.files[name], ReadFile(path));
  }
  return files;
}

const ModelEntry* Catalog::Find(const std::string& name) const {
  for (const ModelEntry& m : models) {
    if (m.offer.name == name) return &m;
  }
  return nullptr;
}

double StreamReadBandwidth(const std::vector<uint64_t>& group_bytes, double read_bytes_per_second,
                           double one_read_bytes_per_second) {
  const bool one_read = std::all_of(group_bytes.begin(), group_bytes.end(),
                                    [](uint64_t bytes) { return bytes <= kDefaultReadChunkBytes; });
  return one_read && one_read_bytes_per_second > 0 ? one_read_bytes_per_second
                                                   : read_bytes_per_second;
}

int64_t AdvertPassTokens(const ModelEntry& entry, uint64_t kv_budget_bytes) {
  const uint64_t per_sequence =
      static_cast<uint64_t>(std::max<int64_t>(0, entry.offer.kv_bytes_per_token)) *
      static_cast<uint64_t>(std::max<int64_t>(0, entry.offer.max_context_tokens));
  const int64_t sequences =
      per_sequence > 0
          ? static_cast<int64_t>(std::min<uint64_t>(kv_budget_bytes / per_sequence, INT64_MAX))
          : 1;
  int64_t tokens = std::max<int64_t>(1, sequences);
  if (entry.offer.pass_token_budget > 0) tokens = std::min(tokens, entry.offer.pass_token_budget);
  return tokens;
}

uint64_t AdvertPassBytes(const ModelEntry& entry, int64_t rows) {
  return planner::ExpectedStreamedBytesPerPass(entry.moe, rows, entry.unread_groups);
}

void PriceCompute(ModelEntry* entry, uint64_t kv_budget_bytes, double flops_per_second) {
  entry->advert_pass_tokens = AdvertPassTokens(*entry, kv_budget_bytes);
  if (entry->moe.is_moe()) {
    entry->offer.checkpoint_bytes =
        static_cast<int64_t>(AdvertPassBytes(*entry, entry->advert_pass_tokens));
  }
  entry->compute_flops_per_second = flops_per_second > 0 ? flops_per_second : 0;
  const double flops = planner::PassFlops(entry->layer_flops_per_token, entry->head_flops_per_row,
                                          entry->advert_pass_tokens, entry->advert_pass_tokens);
  entry->offer.seconds_per_pass = planner::PassSecondsWithCompute(
      static_cast<uint64_t>(std::max<int64_t>(0, entry->offer.checkpoint_bytes)),
      entry->read_bytes_per_second, flops, entry->compute_flops_per_second);
}

StatusOr<Catalog> ScanModelRoots(const CatalogOptions& options) {
  if (options.roots.empty()) return InvalidArgument("no model root");
  if (options.read_bytes_per_second.size() != options.roots.size()) {
    return InvalidArgument("one read bandwidth per model root is needed");
  }
  if (!options.one_read_bytes_per_second.empty() &&
      options.one_read_bytes_per_second.size() != options.roots.size()) {
    return InvalidArgument("one one-stream read bandwidth per model root, or none, is needed");
  }
  Catalog catalog;
  for (size_t i = 0; i < options.roots.size(); ++i) {
    NS_ASSIGN_OR_RETURN(fs::path root, Canonical(options.roots[i]));
    std::error_code ec;
    if (!fs::is_directory(root, ec)) return NotFound(options.roots[i] + " is not a directory");
    for (const std::string& name : SubdirectoryNames(root)) {
      if (catalog.Find(name) != nullptr) {
        catalog.skipped.push_back(
            {name, root.string(), "a model of that name is in an earlier root"});
        continue;
      }
      const double one_read =
          options.one_read_bytes_per_second.empty() ? 0 : options.one_read_bytes_per_second[i];
      auto entry =
          ScanOne(options, root.string(), name, options.read_bytes_per_second[i], one_read);
      if (!entry.ok()) {
        catalog.skipped.push_back({name, root.string(), entry.status().ToString()});
        continue;
      }
      catalog.models.push_back(std::move(*entry));
    }
  }
  catalog.kv_budget_bytes = options.kv_budget_bytes;
  if (catalog.kv_budget_bytes == 0) {
    uint64_t largest = 0;
    for (const ModelEntry& m : catalog.models) largest = std::max(largest, m.footprint_bytes);
    catalog.kv_budget_bytes = options.memory_budget_bytes - largest;  // Price kept largest below
    // A mixture of experts' pass reads more experts with more rows.
    for (ModelEntry& m : catalog.models) PriceRead(&m, catalog.kv_budget_bytes);
  }
  return catalog;
}

}  // namespace nightshift::worker
