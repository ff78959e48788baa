// `nightshift inspect`: what a checkpoint directory holds, from its config and
// safetensors headers (no tensor data is read), or why it is refused.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "planner/model_facts.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/quantization.h"

namespace nightshift::cli {
namespace {

using checkpoint::Checkpoint;
using checkpoint::TensorGroup;
using nlohmann::json;

constexpr char kDescription[] =
    "Reads config.json and every safetensors header of a HuggingFace checkpoint directory,\n"
    "validates them, and prints the architecture, the decoder layers and their sizes, the\n"
    "embedding and LM head (or that the head is tied to the embedding), the dtypes, the total\n"
    "size and the files. No tensor data is read. A malformed checkpoint prints one line on\n"
    "stderr naming the file and tensor, and exits 1.\n"
    "\n"
    "--json prints one object with these keys:\n"
    "  dir              canonical checkpoint directory\n"
    "  model_type       config.json model_type (\"\" when absent)\n"
    "  architecture     config.json architectures[0] (\"\" when absent)\n"
    "  layers           number of decoder layers\n"
    "  layer_bytes      [bytes of layer 0, layer 1, ...]\n"
    "  largest_group    {\"name\": \"embedding\" | \"layer N\" | \"head\", \"bytes\"}\n"
    "  embedding        {\"tensors\": [names], \"bytes\"}\n"
    "  head             {\"tensors\": [names], \"bytes\"} (final norm + LM head)\n"
    "  lm_head          name of the LM head tensor, or null when tied\n"
    "  tied_embeddings  true when there is no LM head tensor\n"
    "  other            {\"tensors\": [names], \"bytes\"} (not streamed, e.g. "
    "rotary_emb.inv_freq)\n"
    "  dtypes           {\"BF16\": {\"tensors\", \"bytes\"}, ...} of the stored tensors\n"
    "  quantization     null, or {\"format\": \"awq\" | \"gptq\" | \"fp8-channel\" | "
    "\"fp8-block\",\n"
    "                   \"description\", \"bits\", \"group_size\" (AWQ/GPTQ, else 0),\n"
    "                   \"block\" ([out, in] for fp8-block, else null), \"modules\" (quantized\n"
    "                   projections), \"bytes\" (theirs, as stored), \"bf16_bytes\" (the same\n"
    "                   matrices in BF16)}; each quantized projection is listed as one tensor\n"
    "                   <module>.weight [out, in] made of its stored parts\n"
    "  tensors          number of tensors (a quantized projection counts once)\n"
    "  total_bytes      sum of all tensor sizes\n"
    "  parameters       elements of the embedding, the layers and the head (a quantized\n"
    "                   projection counts its [out, in]; `other` tensors are not parameters)\n"
    "  active_parameters  those a token uses: all of them, less in each sparse layer of a\n"
    "                   mixture of experts all but top_k of its experts (the largest kept)\n"
    "  moe              null, or for a mixture of experts (config.json of mixtral, qwen2_moe\n"
    "                   or qwen3_moe; experts found by name, `.experts.<e>.`):\n"
    "                   {\"experts\" (per sparse layer), \"top_k\", \"norm_topk_prob\",\n"
    "                   \"shared_expert_intermediate_size\" (0: none), \"sparse_layers\" [i, "
    "...],\n"
    "                   \"experts_per_layer\" [experts found in layer 0, ...],\n"
    "                   \"dense_bytes\" (every layer less its experts), \"dense_layer_bytes\"\n"
    "                   [per layer], \"largest_dense_layer\" {\"layer\", \"bytes\"},\n"
    "                   \"expert_bytes\" and \"expert_parameters\" (the largest expert),\n"
    "                   \"expert_slice\" {\"limit_bytes\", \"layer\", \"first\", \"end\",\n"
    "                   \"bytes\", \"slices\"}: the widest run of whole experts the loader\n"
    "                   reads at once at the default slice size, and the slices of its layer}\n"
    "  files            [{\"name\", \"bytes\", \"tensors\"}] in shard order\n"
    "On failure --json prints {\"dir\", \"error\"} on stdout as well.";

// "276.6 KiB".
std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), unit == 0 ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return buf;
}

std::string ConfigString(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_array() && !it->empty() && it->front().is_string()) return it->front();
  return it->is_string() ? it->get<std::string>() : "";
}

struct Largest {
  std::string name;
  uint64_t bytes = 0;
};

// The largest streamed group by name; the first one wins ties.
Largest LargestGroup(const Checkpoint& ckpt) {
  Largest largest{"embedding", ckpt.embedding.bytes};
  for (const TensorGroup& g : ckpt.layers) {
    if (g.bytes > largest.bytes) largest = {"layer " + std::to_string(g.layer), g.bytes};
  }
  if (ckpt.head.bytes > largest.bytes) largest = {"head", ckpt.head.bytes};
  return largest;
}

// A mixture of experts as the checkpoint stores it: config.json's routing and
// each layer's tensors split by checkpoint::ExpertIndex into experts and the
// dense rest (attention, norms, router, shared expert or dense MLP).
struct MoeSummary {
  checkpoint::MoeConfig config;
  std::vector<int64_t> sparse_layers;       // by the config
  std::vector<int64_t> experts_per_layer;   // distinct expert indices found
  std::vector<uint64_t> dense_layer_bytes;  // per layer, less its experts
  uint64_t dense_bytes = 0;
  int64_t largest_dense_layer = 0;
  uint64_t expert_bytes = 0;  // the largest expert's
  int64_t expert_parameters = 0;
  int64_t slice_layer = -1;  // the widest slice, at planner::kDefaultExpertSliceBytes
  planner::ExpertSlice widest_slice;
  size_t slices = 0;  // in slice_layer
};

// Elements of the tensors a pass uses: every group but `other`; `active`
// counts of each layer's experts only the top_k largest.
struct Parameters {
  int64_t total = 0;
  int64_t active = 0;
};

struct ExpertTotals {
  uint64_t bytes = 0;
  int64_t parameters = 0;
};

// Expert index -> its tensors' bytes and elements, for one layer.
std::map<int, ExpertTotals> LayerExperts(const Checkpoint& ckpt, const TensorGroup& layer) {
  std::map<int, ExpertTotals> experts;
  for (int i : layer.tensors) {
    const checkpoint::TensorInfo& t = ckpt.tensors[static_cast<size_t>(i)];
    const int e = checkpoint::ExpertIndex(t.name);
    if (e < 0) continue;
    experts[e].bytes += t.size;
    experts[e].parameters += t.numel();
  }
  return experts;
}

// The config's mixture of experts, or nullopt for a dense model or a
// config.json the engine's reader refuses (inspect describes those too).
std::optional<checkpoint::ModelConfig> MoeConfig(const Checkpoint& ckpt) {
  StatusOr<checkpoint::ModelConfig> config = checkpoint::ParseModelConfig(ckpt.config);
  if (!config.ok() || !config->is_moe()) return std::nullopt;
  return *config;
}

std::optional<MoeSummary> SummarizeMoe(const Checkpoint& ckpt) {
  const std::optional<checkpoint::ModelConfig> config = MoeConfig(ckpt);
  if (!config) return std::nullopt;
  MoeSummary moe;
  moe.config = config->moe;
  for (const TensorGroup& layer : ckpt.layers) {
    if (config->IsSparseLayer(layer.layer)) moe.sparse_layers.push_back(layer.layer);
    const std::map<int, ExpertTotals> experts = LayerExperts(ckpt, layer);
    uint64_t expert_bytes = 0;
    std::vector<uint64_t> by_index(experts.empty() ? 0 : experts.rbegin()->first + 1, 0);
    for (const auto& [e, totals] : experts) {
      expert_bytes += totals.bytes;
      by_index[static_cast<size_t>(e)] = totals.bytes;
      if (totals.bytes > moe.expert_bytes) {
        moe.expert_bytes = totals.bytes;
        moe.expert_parameters = totals.parameters;
      }
    }
    moe.experts_per_layer.push_back(static_cast<int64_t>(experts.size()));
    const uint64_t dense = layer.bytes - expert_bytes;
    moe.dense_layer_bytes.push_back(dense);
    moe.dense_bytes += dense;
    if (dense > moe.dense_layer_bytes[static_cast<size_t>(moe.largest_dense_layer)]) {
      moe.largest_dense_layer = layer.layer;
    }
    if (by_index.empty()) continue;
    const std::vector<planner::ExpertSlice> slices =
        planner::ExpertSlices(by_index, planner::kDefaultExpertSliceBytes);
    for (const planner::ExpertSlice& slice : slices) {
      if (moe.slice_layer < 0 || slice.bytes > moe.widest_slice.bytes) {
        moe.slice_layer = layer.layer;
        moe.widest_slice = slice;
        moe.slices = slices.size();
      }
    }
  }
  return moe;
}

int64_t GroupParameters(const Checkpoint& ckpt, const TensorGroup& group) {
  int64_t n = 0;
  for (int i : group.tensors) n += ckpt.tensors[static_cast<size_t>(i)].numel();
  return n;
}

Parameters CountParameters(const Checkpoint& ckpt) {
  Parameters p;
  p.total = GroupParameters(ckpt, ckpt.embedding) + GroupParameters(ckpt, ckpt.head);
  p.active = p.total;
  const std::optional<checkpoint::ModelConfig> moe = MoeConfig(ckpt);
  for (const TensorGroup& layer : ckpt.layers) {
    const int64_t all = GroupParameters(ckpt, layer);
    p.total += all;
    if (!moe) {
      p.active += all;
      continue;
    }
    // The dense rest, and top_k of the layer's experts (the largest).
    std::vector<int64_t> experts;
    int64_t in_experts = 0;
    for (const auto& [e, totals] : LayerExperts(ckpt, layer)) {
      experts.push_back(totals.parameters);
      in_experts += totals.parameters;
    }
    std::sort(experts.rbegin(), experts.rend());
    int64_t active = all - in_experts;
    for (size_t k = 0; k < experts.size() && static_cast<int64_t>(k) < moe->moe.top_k; ++k) {
      active += experts[k];
    }
    p.active += active;
  }
  return p;
}

json MoeJson(const std::optional<MoeSummary>& moe) {
  if (!moe) return nullptr;
  const planner::ExpertSlice& slice = moe->widest_slice;
  return {
      {"experts", moe->config.num_experts},
      {"top_k", moe->config.top_k},
      {"norm_topk_prob", moe->config.norm_topk_prob},
      {"shared_expert_intermediate_size", moe->config.shared_expert_intermediate_size},
      {"sparse_layers", moe->sparse_layers},
      {"experts_per_layer", moe->experts_per_layer},
      {"dense_bytes", moe->dense_bytes},
      {"dense_layer_bytes", moe->dense_layer_bytes},
      {"largest_dense_layer",
       {{"layer", moe->largest_dense_layer},
        {"bytes", moe->dense_layer_bytes.empty()
                      ? 0
                      : moe->dense_layer_bytes[static_cast<size_t>(moe->largest_dense_layer)]}}},
      {"expert_bytes", moe->expert_bytes},
      {"expert_parameters", moe->expert_parameters},
      {"expert_slice", moe->slice_layer < 0
                           ? json(nullptr)
                           : json{{"limit_bytes", planner::kDefaultExpertSliceBytes},
                                  {"layer", moe->slice_layer},
                                  {"first", slice.first},
                                  {"end", slice.end},
                                  {"bytes", slice.bytes},
                                  {"slices", moe->slices}}},
  };
}

struct DTypeTotal {
  int tensors = 0;
  uint64_t bytes = 0;
};

// The tensors as stored: a quantized projection's parts.
std::vector<const checkpoint::TensorInfo*> StoredTensors(const Checkpoint& ckpt) {
  std::vector<const checkpoint::TensorInfo*> out;
  for (const auto& t : ckpt.tensors) {
    if (!t.quant) {
      out.push_back(&t);
      continue;
    }
    for (const auto& part : t.quant->parts) out.push_back(&part);
  }
  return out;
}

std::map<std::string, DTypeTotal> DTypeTotals(const Checkpoint& ckpt) {
  std::map<std::string, DTypeTotal> totals;
  for (const checkpoint::TensorInfo* t : StoredTensors(ckpt)) {
    DTypeTotal& total = totals[checkpoint::DTypeName(t->dtype)];
    ++total.tensors;
    total.bytes += t->size;
  }
  return totals;
}

std::vector<int> TensorsPerFile(const Checkpoint& ckpt) {
  std::vector<int> counts(ckpt.files.size(), 0);
  for (const checkpoint::TensorInfo* t : StoredTensors(ckpt)) ++counts[t->file];
  return counts;
}

struct QuantTotals {
  int modules = 0;
  uint64_t bytes = 0;       // as stored
  uint64_t bf16_bytes = 0;  // the same matrices in BF16
};

QuantTotals QuantizedTotals(const Checkpoint& ckpt) {
  QuantTotals totals;
  for (const auto& t : ckpt.tensors) {
    if (!t.quant) continue;
    ++totals.modules;
    totals.bytes += t.size;
    totals.bf16_bytes += static_cast<uint64_t>(t.numel()) * 2;
  }
  return totals;
}

json QuantizationJson(const Checkpoint& ckpt) {
  const checkpoint::QuantizationInfo& q = ckpt.quantization;
  if (q.format == checkpoint::QuantFormat::kNone) return nullptr;
  const QuantTotals totals = QuantizedTotals(ckpt);
  return {{"format", checkpoint::QuantFormatName(q.format)},
          {"description", q.Describe()},
          {"bits", q.bits},
          {"group_size", q.group_size},
          {"block", q.format == checkpoint::QuantFormat::kFp8Block
                        ? json::array({q.block_out, q.block_in})
                        : json(nullptr)},
          {"modules", totals.modules},
          {"bytes", totals.bytes},
          {"bf16_bytes", totals.bf16_bytes}};
}

json GroupJson(const Checkpoint& ckpt, const TensorGroup& group) {
  json names = json::array();
  for (int i : group.tensors) names.push_back(ckpt.tensors[i].name);
  return {{"tensors", names}, {"bytes", group.bytes}};
}

json ToJson(const Checkpoint& ckpt) {
  json out;
  out["dir"] = ckpt.dir;
  out["model_type"] = ckpt.ModelType();
  out["architecture"] = ConfigString(ckpt.config, "architectures");
  out["layers"] = ckpt.layers.size();
  out["layer_bytes"] = json::array();
  for (const TensorGroup& g : ckpt.layers) out["layer_bytes"].push_back(g.bytes);
  const Largest largest = LargestGroup(ckpt);
  out["largest_group"] = {{"name", largest.name}, {"bytes", largest.bytes}};
  out["embedding"] = GroupJson(ckpt, ckpt.embedding);
  out["head"] = GroupJson(ckpt, ckpt.head);
  out["lm_head"] = ckpt.lm_head < 0 ? json(nullptr) : json(ckpt.tensors[ckpt.lm_head].name);
  out["tied_embeddings"] = ckpt.tied_embeddings;
  out["other"] = GroupJson(ckpt, ckpt.other);
  out["dtypes"] = json::object();
  for (const auto& [name, total] : DTypeTotals(ckpt)) {
    out["dtypes"][name] = {{"tensors", total.tensors}, {"bytes", total.bytes}};
  }
  out["quantization"] = QuantizationJson(ckpt);
  out["tensors"] = ckpt.tensors.size();
  out["total_bytes"] = ckpt.total_bytes;
  const Parameters parameters = CountParameters(ckpt);
  out["parameters"] = parameters.total;
  out["active_parameters"] = parameters.active;
  out["moe"] = MoeJson(SummarizeMoe(ckpt));
  out["files"] = json::array();
  const std::vector<int> per_file = TensorsPerFile(ckpt);
  for (size_t i = 0; i < ckpt.files.size(); ++i) {
    out["files"].push_back(
        {{"name", ckpt.files[i].name}, {"bytes", ckpt.files[i].size}, {"tensors", per_file[i]}});
  }
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// "model.embed_tokens.weight BF16 [384, 64]"; a quantized projection:
// "model.layers.0.mlp.up_proj.weight awq [384, 128] = qweight I32 [128, 48] + ...".
std::string Describe(const checkpoint::TensorInfo& t) {
  if (!t.quant) return t.name + " " + checkpoint::DTypeName(t.dtype) + " " + ShapeText(t.shape);
  std::string out =
      t.name + " " + checkpoint::QuantFormatName(t.quant->format) + " " + ShapeText(t.shape) + " =";
  const char* plus = " ";
  for (const checkpoint::TensorInfo& part : t.quant->parts) {
    out += plus + part.name.substr(part.name.rfind('.') + 1) + " " +
           checkpoint::DTypeName(part.dtype) + " " + ShapeText(part.shape);
    plus = " + ";
  }
  return out;
}

void PrintGroup(std::ostream& out, const char* label, const Checkpoint& ckpt,
                const TensorGroup& group) {
  out << label << HumanBytes(group.bytes) << " (" << group.bytes << " bytes)\n";
  for (int i : group.tensors) out << "    " << Describe(ckpt.tensors[i]) << "\n";
}

// "30.5 B"; counts under a thousand as they are.
std::string HumanCount(int64_t n) {
  static const char* const kUnits[] = {"", " K", " M", " B", " T"};
  double value = static_cast<double>(n);
  int unit = 0;
  while (value >= 1000 && unit < 4) {
    value /= 1000;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), unit == 0 ? "%.0f%s" : "%.3g%s", value, kUnits[unit]);
  return buf;
}

std::string LayerList(const std::vector<int64_t>& layers) {
  std::string out;
  for (int64_t layer : layers) out += (out.empty() ? "" : ", ") + std::to_string(layer);
  return out;
}

void PrintMoe(std::ostream& out, const MoeSummary& moe, size_t layers) {
  const checkpoint::MoeConfig& c = moe.config;
  out << "experts        " << c.num_experts << " per sparse layer, top " << c.top_k
      << (c.norm_topk_prob ? " renormalised" : " not renormalised") << "; sparse layers "
      << (moe.sparse_layers.size() == layers ? "all" : LayerList(moe.sparse_layers)) << " of "
      << layers;
  if (c.shared_expert_intermediate_size > 0) {
    out << "; a shared expert " << c.shared_expert_intermediate_size << " wide";
  }
  out << "\n";
  const uint64_t largest = moe.dense_layer_bytes[static_cast<size_t>(moe.largest_dense_layer)];
  out << "    dense part: " << HumanBytes(moe.dense_bytes) << " (" << moe.dense_bytes
      << " bytes), largest layer " << moe.largest_dense_layer << ": " << HumanBytes(largest) << " ("
      << largest << " bytes)\n";
  out << "    one expert: " << HumanBytes(moe.expert_bytes) << " (" << moe.expert_bytes
      << " bytes, " << moe.expert_parameters << " parameters)\n";
  if (moe.slice_layer >= 0) {
    const planner::ExpertSlice& s = moe.widest_slice;
    out << "    widest slice at " << HumanBytes(planner::kDefaultExpertSliceBytes) << ": experts "
        << s.first << "-" << s.end - 1 << " of layer " << moe.slice_layer << ", "
        << HumanBytes(s.bytes) << " (" << s.bytes << " bytes); " << moe.slices
        << (moe.slices == 1 ? " slice" : " slices") << " in that layer\n";
  }
}

void PrintText(std::ostream& out, const Checkpoint& ckpt) {
  const std::string arch = ConfigString(ckpt.config, "architectures");
  const std::optional<MoeSummary> moe = SummarizeMoe(ckpt);
  out << "checkpoint     " << ckpt.dir << "\n";
  out << "architecture   " << (ckpt.ModelType().empty() ? "?" : ckpt.ModelType())
      << (arch.empty() ? "" : " (" + arch + ")") << "\n";
  out << "layers         " << ckpt.layers.size() << "\n";
  for (const TensorGroup& g : ckpt.layers) {
    out << "    layer " << g.layer << ": " << HumanBytes(g.bytes) << " (" << g.bytes << " bytes, "
        << g.tensors.size() << " tensors";
    const size_t i = static_cast<size_t>(g.layer);
    if (moe && moe->experts_per_layer[i] > 0) {
      out << "; " << moe->experts_per_layer[i] << " experts, dense "
          << HumanBytes(moe->dense_layer_bytes[i]);
    }
    out << ")\n";
  }
  if (moe) PrintMoe(out, *moe, ckpt.layers.size());
  const Largest largest = LargestGroup(ckpt);
  out << "largest group  " << largest.name << ", " << HumanBytes(largest.bytes) << " ("
      << largest.bytes << " bytes)\n";
  PrintGroup(out, "embedding      ", ckpt, ckpt.embedding);
  PrintGroup(out, "head           ", ckpt, ckpt.head);
  out << "lm head        "
      << (ckpt.tied_embeddings ? "tied to the embedding" : ckpt.tensors[ckpt.lm_head].name) << "\n";
  if (!ckpt.other.tensors.empty()) {
    PrintGroup(out, "not streamed   ", ckpt, ckpt.other);
  }
  out << "dtypes         ";
  const char* separator = "";
  for (const auto& [name, total] : DTypeTotals(ckpt)) {
    out << separator << name << ": " << total.tensors << " tensors, " << HumanBytes(total.bytes);
    separator = "; ";
  }
  out << "\n";
  if (ckpt.quantization.format != checkpoint::QuantFormat::kNone) {
    const QuantTotals q = QuantizedTotals(ckpt);
    char ratio[16];
    std::snprintf(
        ratio, sizeof(ratio), "%.3f",
        static_cast<double>(q.bytes) / static_cast<double>(std::max<uint64_t>(q.bf16_bytes, 1)));
    out << "quantization   " << ckpt.quantization.Describe() << " (" << ckpt.quantization.bits
        << " bits): " << q.modules << " projections, " << HumanBytes(q.bytes) << " as stored, "
        << ratio << "x their BF16 " << HumanBytes(q.bf16_bytes) << "\n";
  }
  out << "total          " << HumanBytes(ckpt.total_bytes) << " (" << ckpt.total_bytes
      << " bytes) in " << ckpt.tensors.size() << " tensors"
      << (ckpt.quantization.format == checkpoint::QuantFormat::kNone
              ? std::string()
              : " (" + std::to_string(StoredTensors(ckpt).size()) + " as stored)")
      << "\n";
  const Parameters parameters = CountParameters(ckpt);
  out << "parameters     " << HumanCount(parameters.total) << " (" << parameters.total << ")";
  if (moe) {
    out << ", " << HumanCount(parameters.active) << " (" << parameters.active
        << ") active per token";
  }
  out << "\n";
  out << "files          " << ckpt.files.size() << "\n";
  const std::vector<int> per_file = TensorsPerFile(ckpt);
  for (size_t i = 0; i < ckpt.files.size(); ++i) {
    out << "    " << ckpt.files[i].name << ": " << HumanBytes(ckpt.files[i].size) << ", "
        << per_file[i] << " tensors\n";
  }
}

int RunInspect(int argc, char** argv) {
  std::string model_dir;
  bool as_json = false;
  CommandLine flags("nightshift inspect --model-dir DIR [--json]", kDescription);
  flags.String("model-dir", &model_dir, "checkpoint directory (config.json + *.safetensors)",
               "DIR");
  flags.Bool("json", &as_json, "print one JSON object instead of text");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (model_dir.empty() || !flags.positional().empty()) {
    std::cerr << "nightshift inspect: --model-dir DIR is required and takes no other arguments"
              << " (see --help)\n";
    return kExitUsage;
  }
  StatusOr<Checkpoint> ckpt = checkpoint::ReadCheckpoint(model_dir);
  if (!ckpt.ok()) {
    if (as_json) {
      std::cout << json{{"dir", model_dir}, {"error", ckpt.status().message()}}.dump(2) << "\n";
    }
    return Fail("inspect", ckpt.status());
  }
  if (as_json) {
    std::cout << ToJson(*ckpt).dump(2) << "\n";
  } else {
    PrintText(std::cout, *ckpt);
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("inspect", "describe a checkpoint: layers, sizes, dtypes, files", RunInspect);

}  // namespace nightshift::cli
