// Quantization configs and the folding of quantized modules' tensors.
#include "worker/checkpoint/quantization.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>

#include "worker/checkpoint/message.h"
#include "worker/checkpoint/model_config.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;

constexpr char kSupported[] =
    "supported: awq (GEMM int4), gptq (v1 int4), compressed-tensors (float-quantized FP8 per "
    "channel), fp8 (E4M3 block scales)";

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status Refuse(const std::string& label, const std::string& what) {
  return Unimplemented(label + ": " + what + " is not supported (" + kSupported + ")");
}

bool Absent(const json& q, const char* key) {
  auto it = q.find(key);
  return it == q.end() || it->is_null() || (it->is_object() && it->empty());
}

StatusOr<QuantizationInfo> ParseAwq(const json& q, const std::string& label) {
  ConfigReader r(q, label);
  QuantizationInfo info;
  info.format = QuantFormat::kAwq;
  const std::string version = Lower(r.String("version", "gemm"));
  info.bits = static_cast<int>(r.Int("bits", r.Int("w_bit", 4)));
  info.group_size = r.Int("group_size", r.Int("q_group_size", 128));
  const bool zero_point = r.Bool("zero_point", true);
  NS_RETURN_IF_ERROR(r.status());
  if (version != "gemm") {
    return Refuse(label, "AWQ version '" + version + "' (only the GEMM packing is read)");
  }
  if (info.bits != 4) return Refuse(label, "AWQ with " + std::to_string(info.bits) + " bits");
  if (!zero_point) return Refuse(label, "AWQ without zero points (zero_point false)");
  if (info.group_size <= 0) {
    return Refuse(label, "AWQ group_size " + std::to_string(info.group_size));
  }
  return info;
}

StatusOr<QuantizationInfo> ParseGptq(const json& q, const std::string& label) {
  ConfigReader r(q, label);
  QuantizationInfo info;
  info.format = QuantFormat::kGptq;
  info.bits = static_cast<int>(r.Int("bits", 4));
  info.group_size = r.Int("group_size", 128);
  info.desc_act = r.Bool("desc_act", false);
  info.symmetric = r.Bool("sym", true);
  const std::string format = Lower(r.String("checkpoint_format", "gptq"));
  std::string pack = Lower(r.String("pack_dtype", "int32"));
  const bool marlin = r.Bool("is_marlin_format", false);
  NS_RETURN_IF_ERROR(r.status());
  if (info.bits != 4) {
    return Refuse(label, "GPTQ with " + std::to_string(info.bits) + " bits (only 4-bit is read)");
  }
  if (marlin) return Refuse(label, "GPTQ in the Marlin format (is_marlin_format)");
  if (format != "gptq") return Refuse(label, "GPTQ checkpoint_format '" + format + "'");
  if (pack.rfind("torch.", 0) == 0) pack = pack.substr(6);
  if (pack != "int32") return Refuse(label, "GPTQ pack_dtype '" + pack + "'");
  if (info.group_size == 0 || info.group_size < -1) {
    return DataLoss(label + ": 'group_size' must be positive or -1, got " +
                    std::to_string(info.group_size));
  }
  return info;
}

// One compressed-tensors config group: weights 8-bit float per channel,
// activations float or dynamic.
Status CheckCtGroup(const std::string& name, const json& group, const std::string& top_format,
                    const std::string& label) {
  const std::string where = label + ": config_groups." + name;
  if (!group.is_object()) return DataLoss(where + " is not an object");
  ConfigReader r(group, where);
  const std::string format = Lower(r.String("format", top_format));
  NS_RETURN_IF_ERROR(r.status());
  if (format != "float-quantized") {
    return Refuse(where, "compressed-tensors format '" + format + "'");
  }
  auto weights = group.find("weights");
  if (weights == group.end() || !weights->is_object()) {
    return DataLoss(where + ": no 'weights' scheme");
  }
  ConfigReader w(*weights, where + ".weights");
  const int64_t bits = w.Int("num_bits", 8);
  const std::string type = Lower(w.String("type", "float"));
  const std::string strategy = Lower(w.String("strategy", "channel"));
  const bool symmetric = w.Bool("symmetric", true);
  const bool dynamic = w.Bool("dynamic", false);
  NS_RETURN_IF_ERROR(w.status());
  if (bits != 8 || type != "float") {
    return Refuse(where, "weights of " + std::to_string(bits) + "-bit " + type);
  }
  if (strategy != "channel") return Refuse(where, "weight strategy '" + strategy + "'");
  if (!symmetric) return Refuse(where, "asymmetric FP8 weights");
  if (dynamic) return Refuse(where, "dynamic weight quantization");
  auto acts = group.find("input_activations");
  if (acts != group.end() && !acts->is_null()) {
    ConfigReader a(*acts, where + ".input_activations");
    const bool act_dynamic = a.Bool("dynamic", false);
    NS_RETURN_IF_ERROR(a.status());
    if (!act_dynamic) {
      return Refuse(where, "static activation scales (input_activations.dynamic false)");
    }
  }
  if (!Absent(group, "output_activations")) return Refuse(where, "output activation quantization");
  return Status::Ok();
}

StatusOr<QuantizationInfo> ParseCompressedTensors(const json& q, const std::string& label) {
  ConfigReader r(q, label);
  const std::string top_format = Lower(r.String("format", "float-quantized"));
  NS_RETURN_IF_ERROR(r.status());
  if (!Absent(q, "kv_cache_scheme"))
    return Refuse(label, "KV-cache quantization (kv_cache_scheme)");
  if (!Absent(q, "sparsity_config")) return Refuse(label, "sparsity_config");
  if (!Absent(q, "transform_config")) return Refuse(label, "transform_config");
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return DataLoss(label + ": no 'config_groups'");
  }
  for (const auto& [name, group] : groups->items()) {
    NS_RETURN_IF_ERROR(CheckCtGroup(name, group, top_format, label));
  }
  QuantizationInfo info;
  info.format = QuantFormat::kFp8Channel;
  info.bits = 8;
  info.symmetric = true;
  return info;
}

StatusOr<QuantizationInfo> ParseFp8(const json& q, const std::string& label) {
  ConfigReader r(q, label);
  const std::string fmt = Lower(r.String("fmt", "e4m3"));
  const std::string scheme = Lower(r.String("activation_scheme", "dynamic"));
  const std::vector<int64_t> block = r.IntList("weight_block_size");
  NS_RETURN_IF_ERROR(r.status());
  if (fmt != "e4m3") return Refuse(label, "fp8 fmt '" + fmt + "'");
  if (scheme != "dynamic") {
    return Refuse(label, "static activation scales (activation_scheme '" + scheme + "')");
  }
  if (block.empty()) return Refuse(label, "fp8 without weight_block_size (per-tensor scales)");
  if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
    return DataLoss(label + ": 'weight_block_size' must be two positive integers");
  }
  QuantizationInfo info;
  info.format = QuantFormat::kFp8Block;
  info.bits = 8;
  info.symmetric = true;
  info.block_out = block[0];
  info.block_in = block[1];
  return info;
}

// ---- Folding ----

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsFloatDType(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

std::string Shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The tensors of a checkpoint by name, consumed as modules claim them.
class Parts {
 public:
  Parts(const std::string& dir_label, std::vector<TensorInfo>* tensors)
      : dir_(dir_label), tensors_(tensors) {
    for (size_t i = 0; i < tensors->size(); ++i) index_[(*tensors)[i].name] = i;
  }

  // The tensor `name`, claimed; `module` and `format` word the error when it
  // is missing.
  StatusOr<TensorInfo> Take(const std::string& name, const std::string& module,
                            const char* format) {
    auto it = index_.find(name);
    if (it == index_.end() || taken_.count(name)) {
      return DataLoss(dir_ + ": " + format + " module " + Quoted(module) + " has no tensor " +
                      Quoted(name));
    }
    taken_.insert({name, true});
    return (*tensors_)[it->second];
  }
  bool Has(const std::string& name) const { return index_.count(name) > 0; }
  bool Taken(const std::string& name) const { return taken_.count(name) > 0; }

  Status Expect(const TensorInfo& t, const std::vector<int64_t>& shape, bool float_dtype,
                DType dtype, const std::string& why) const {
    if (t.shape != shape) {
      return DataLoss(dir_ + ": tensor " + Quoted(t.name) + " has shape " + Shape(t.shape) +
                      ", expected " + Shape(shape) + " (" + why + ")");
    }
    const bool ok = float_dtype ? IsFloatDType(t.dtype) : t.dtype == dtype;
    if (!ok) {
      return DataLoss(dir_ + ": tensor " + Quoted(t.name) + " has dtype " + DTypeName(t.dtype) +
                      ", expected " + (float_dtype ? "F32, F16 or BF16" : DTypeName(dtype)));
    }
    return Status::Ok();
  }

 private:
  std::string dir_;
  std::vector<TensorInfo>* tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, bool> taken_;
};

Status Check2d(const std::string& dir, const TensorInfo& t) {
  if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0) {
    return DataLoss(dir + ": tensor " + Quoted(t.name) + " has shape " + Shape(t.shape) +
                    ", expected a non-empty matrix");
  }
  return Status::Ok();
}

// Places the parts in a loader buffer (QuantizedTensor::part_offsets) and
// builds the folded tensor.
TensorInfo Folded(const std::string& module, std::shared_ptr<QuantizedTensor> q) {
  uint64_t region = 0;
  uint64_t first = 0;
  TensorInfo t;
  for (size_t k = 0; k < q->parts.size(); ++k) {
    const TensorInfo& p = q->parts[k];
    const uint64_t dst = region + p.offset % kPartAlign;
    if (k == 0) first = dst;
    q->part_offsets.push_back(dst - first);
    region += RoundUp(p.offset + p.size, kPartAlign) - p.offset / kPartAlign * kPartAlign;
    t.size += p.size;
  }
  q->region_bytes = region;
  t.name = module + ".weight";
  t.file = q->parts[0].file;
  t.dtype = q->parts[0].dtype;
  t.offset = q->parts[0].offset;
  t.shape = {q->out, q->in};
  t.quant = std::move(q);
  return t;
}

// The last component of a module name ("lm_head", "embed_tokens", ...).
bool IsEmbeddingOrHead(const std::string& module) {
  for (const char* name : {"lm_head", "embed_out", "embed_tokens", "embed_in", "wte"}) {
    const std::string n = name;
    if (module == n || EndsWith(module, "." + n)) return true;
  }
  return false;
}

StatusOr<TensorInfo> FoldInt4(const std::string& dir, const QuantizationInfo& info,
                              const std::string& module, Parts& parts) {
  const bool awq = info.format == QuantFormat::kAwq;
  const char* fmt = awq ? "AWQ" : "GPTQ";
  auto q = std::make_shared<QuantizedTensor>();
  q->format = info.format;
  NS_ASSIGN_OR_RETURN(TensorInfo qweight, parts.Take(module + ".qweight", module, fmt));
  NS_ASSIGN_OR_RETURN(TensorInfo qzeros, parts.Take(module + ".qzeros", module, fmt));
  NS_ASSIGN_OR_RETURN(TensorInfo scales, parts.Take(module + ".scales", module, fmt));
  NS_RETURN_IF_ERROR(Check2d(dir, qweight));
  if (qweight.dtype != DType::kI32) {
    return DataLoss(dir + ": tensor " + Quoted(qweight.name) + " has dtype " +
                    DTypeName(qweight.dtype) + ", expected I32 (" + fmt + " packs 8 nibbles)");
  }
  if (awq) {
    q->in = qweight.shape[0];
    q->out = qweight.shape[1] * 8;
    q->group_size = info.group_size;
    if (q->in % q->group_size != 0) {
      return DataLoss(dir + ": tensor " + Quoted(qweight.name) + ": " + std::to_string(q->in) +
                      " input rows are not a whole number of groups of " +
                      std::to_string(q->group_size));
    }
    q->groups = q->in / q->group_size;
  } else {
    q->in = qweight.shape[0] * 8;
    q->out = qweight.shape[1];
    if (q->out % 8 != 0) {
      return DataLoss(dir + ": tensor " + Quoted(qweight.name) + ": " + std::to_string(q->out) +
                      " output columns do not pack into qzeros' int32s");
    }
    q->group_size = info.group_size > 0 ? info.group_size : q->in;
    q->groups = CeilDiv(q->in, q->group_size);
  }
  const std::string why = std::string(fmt) + " group " + std::to_string(q->group_size) + " of " +
                          std::to_string(q->in) + " x " + std::to_string(q->out);
  NS_RETURN_IF_ERROR(parts.Expect(qzeros, {q->groups, q->out / 8}, false, DType::kI32, why));
  NS_RETURN_IF_ERROR(parts.Expect(scales, {q->groups, q->out}, true, DType::kF16, why));
  q->parts = {qweight, qzeros, scales};
  if (!awq) {
    const std::string g_idx = module + ".g_idx";
    if (parts.Has(g_idx)) {
      NS_ASSIGN_OR_RETURN(TensorInfo t, parts.Take(g_idx, module, fmt));
      NS_RETURN_IF_ERROR(parts.Expect(t, {q->in}, false, DType::kI32, why));
      q->parts.push_back(t);
    } else if (info.desc_act) {
      return DataLoss(dir + ": GPTQ module " + Quoted(module) + " has desc_act but no tensor " +
                      Quoted(g_idx));
    }
  }
  return Folded(module, std::move(q));
}

StatusOr<TensorInfo> FoldFp8(const std::string& dir, const QuantizationInfo& info,
                             const std::string& module, Parts& parts) {
  const bool block = info.format == QuantFormat::kFp8Block;
  const char* fmt = block ? "FP8 block" : "compressed-tensors FP8";
  auto q = std::make_shared<QuantizedTensor>();
  q->format = info.format;
  NS_ASSIGN_OR_RETURN(TensorInfo weight, parts.Take(module + ".weight", module, fmt));
  NS_RETURN_IF_ERROR(Check2d(dir, weight));
  q->out = weight.shape[0];
  q->in = weight.shape[1];
  const std::string scale_name = module + (block ? ".weight_scale_inv" : ".weight_scale");
  NS_ASSIGN_OR_RETURN(TensorInfo scale, parts.Take(scale_name, module, fmt));
  if (block) {
    q->block_out = info.block_out;
    q->block_in = info.block_in;
    NS_RETURN_IF_ERROR(parts.Expect(
        scale, {CeilDiv(q->out, q->block_out), CeilDiv(q->in, q->block_in)}, true, DType::kF32,
        "blocks of " + std::to_string(q->block_out) + " x " + std::to_string(q->block_in) +
            " over " + std::to_string(q->out) + " x " + std::to_string(q->in)));
  } else {
    const std::vector<int64_t> expected =
        scale.shape.size() == 1 ? std::vector<int64_t>{q->out} : std::vector<int64_t>{q->out, 1};
    NS_RETURN_IF_ERROR(parts.Expect(scale, expected, true, DType::kF32, "one scale per channel"));
  }
  q->parts = {weight, scale};
  return Folded(module, std::move(q));
}

}  // namespace

const char* QuantFormatName(QuantFormat format) {
  switch (format) {
    case QuantFormat::kNone:
      return "none";
    case QuantFormat::kAwq:
      return "awq";
    case QuantFormat::kGptq:
      return "gptq";
    case QuantFormat::kFp8Channel:
      return "fp8-channel";
    case QuantFormat::kFp8Block:
      return "fp8-block";
  }
  return "?";
}

std::string QuantizationInfo::Describe() const {
  switch (format) {
    case QuantFormat::kNone:
      return "";
    case QuantFormat::kAwq:
      return "AWQ GEMM int4, group " + std::to_string(group_size);
    case QuantFormat::kGptq:
      return "GPTQ int4, group " + (group_size > 0 ? std::to_string(group_size) : "all") +
             (symmetric ? ", symmetric" : ", asymmetric") + (desc_act ? ", act-order" : "");
    case QuantFormat::kFp8Channel:
      return "compressed-tensors FP8 E4M3, per channel";
    case QuantFormat::kFp8Block:
      return "FP8 E4M3, block " + std::to_string(block_out) + "x" + std::to_string(block_in);
  }
  return "";
}

StatusOr<QuantizationInfo> ParseQuantization(const json& config, const json& quantize_config,
                                             const std::string& dir_label) {
  const json* q = nullptr;
  std::string label;
  bool from_file = false;
  auto it = config.find("quantization_config");
  if (it != config.end() && !it->is_null()) {
    q = &*it;
    label = dir_label + "/config.json: quantization_config";
  } else if (quantize_config.is_object()) {
    q = &quantize_config;
    label = dir_label + "/quantize_config.json";
    from_file = true;
  } else {
    return QuantizationInfo{};
  }
  if (!q->is_object()) return DataLoss(label + " is not an object");
  ConfigReader r(*q, label);
  // quantize_config.json is AutoGPTQ's, which may not name its method.
  const std::string method = Lower(r.String("quant_method", from_file ? "gptq" : ""));
  NS_RETURN_IF_ERROR(r.status());
  if (method == "awq") return ParseAwq(*q, label);
  if (method == "gptq") return ParseGptq(*q, label);
  if (method == "compressed-tensors") return ParseCompressedTensors(*q, label);
  if (method == "fp8") return ParseFp8(*q, label);
  if (method.empty()) return DataLoss(label + ": no 'quant_method'");
  return Refuse(label, "quant_method '" + method + "'");
}

Status FoldQuantizedTensors(const std::string& dir, const QuantizationInfo& info,
                            std::vector<TensorInfo>* tensors) {
  if (info.format == QuantFormat::kNone) return Status::Ok();
  const bool int4 = info.format == QuantFormat::kAwq || info.format == QuantFormat::kGptq;
  std::vector<std::string> modules;
  for (const TensorInfo& t : *tensors) {
    for (const char* suffix : {".input_scale", ".k_scale", ".v_scale", ".kv_scale"}) {
      if (EndsWith(t.name, suffix)) {
        return Unimplemented(dir + ": tensor " + Quoted(t.name) +
                             ": static activation or KV-cache scales are not supported (only "
                             "dynamic activation quantization, which is ignored)");
      }
    }
    if (EndsWith(t.name, ".weight_zero_point")) {
      return Unimplemented(dir + ": tensor " + Quoted(t.name) +
                           ": asymmetric FP8 weights are not supported");
    }
    if (int4 && EndsWith(t.name, ".qweight")) {
      modules.push_back(t.name.substr(0, t.name.size() - 8));
    } else if (!int4 && EndsWith(t.name, ".weight") && t.dtype == DType::kF8E4M3) {
      modules.push_back(t.name.substr(0, t.name.size() - 7));
    }
  }
  Parts parts(dir, tensors);
  std::vector<TensorInfo> folded;
  for (const std::string& module : modules) {
    if (IsEmbeddingOrHead(module)) {
      return Unimplemented(dir + ": module " + Quoted(module) +
                           " is quantized; quantized embeddings and LM heads are not supported");
    }
    StatusOr<TensorInfo> t =
        int4 ? FoldInt4(dir, info, module, parts) : FoldFp8(dir, info, module, parts);
    NS_RETURN_IF_ERROR(t.status());
    folded.push_back(std::move(t).value());
  }
  std::vector<TensorInfo> out;
  for (TensorInfo& t : *tensors) {
    if (parts.Taken(t.name)) continue;
    for (const char* suffix :
         {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_scale_inv"}) {
      if (EndsWith(t.name, suffix)) {
        return DataLoss(dir + ": tensor " + Quoted(t.name) + " belongs to no quantized module (" +
                        info.Describe() + ")");
      }
    }
    out.push_back(std::move(t));
  }
  for (TensorInfo& t : folded) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  *tensors = std::move(out);
  return Status::Ok();
}

const float* Fp8E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) {
      const int sign = b >> 7, exponent = (b >> 3) & 0xf, mantissa = b & 7;
      float v;
      if (exponent == 0xf && mantissa == 7) {
        v = std::numeric_limits<float>::quiet_NaN();
      } else if (exponent == 0) {
        v = std::ldexp(static_cast<float>(mantissa), -9);  // m/8 x 2^-6
      } else {
        v = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1 + m/8) 2^(e-7)
      }
      t[static_cast<size_t>(b)] = sign ? -v : v;
    }
    return t;
  }();
  return table.data();
}

}  // namespace nightshift::checkpoint
