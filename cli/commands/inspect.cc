// `nightshift inspect`: what a checkpoint directory holds, from its config and
// safetensors headers (no tensor data is read), or why it is refused.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "worker/checkpoint/checkpoint.h"
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

void PrintText(std::ostream& out, const Checkpoint& ckpt) {
  const std::string arch = ConfigString(ckpt.config, "architectures");
  out << "checkpoint     " << ckpt.dir << "\n";
  out << "architecture   " << (ckpt.ModelType().empty() ? "?" : ckpt.ModelType())
      << (arch.empty() ? "" : " (" + arch + ")") << "\n";
  out << "layers         " << ckpt.layers.size() << "\n";
  for (const TensorGroup& g : ckpt.layers) {
    out << "    layer " << g.layer << ": " << HumanBytes(g.bytes) << " (" << g.bytes << " bytes, "
        << g.tensors.size() << " tensors)\n";
  }
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
  FlagSet flags("nightshift inspect --model-dir DIR [--json]", kDescription);
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
