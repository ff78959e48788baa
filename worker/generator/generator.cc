#include "worker/generator/generator.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "worker/checkpoint/model_config.h"
#include "worker/engine/architecture.h"

namespace nightshift::generator {
namespace fs = std::filesystem;
using checkpoint::DType;
using engine::LayerWeight;
using nlohmann::json;

namespace {

// How a tensor's values are drawn.
enum class Init { kLinear, kNorm, kBias };

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::kLinear;
  uint64_t bytes = 0;
  int shard = 0;
  uint64_t offset = 0;  // within its shard's data section
  DType dtype = DType::kBF16;
  // A quantized projection's part: `part` of QuantizedParts(module), whose
  // float weight [out, in] is drawn as "<module>.weight" would be.
  std::string module;
  int part = -1;
  int64_t out = 0, in = 0;
};

// SplitMix64: tiny, fast, and good enough for weights nobody will train.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Approximately N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall),
  // centred and scaled to unit variance. One 64-bit draw per value.
  float Normal() {
    uint64_t r = Next();
    uint32_t sum = static_cast<uint32_t>(r & 0xFFFF) + static_cast<uint32_t>((r >> 16) & 0xFFFF) +
                   static_cast<uint32_t>((r >> 32) & 0xFFFF) + static_cast<uint32_t>(r >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) per unit of 2^16
    return (static_cast<float>(sum) - 2.0f * 65535.0f) * kScale;
  }
};

uint64_t SeedFor(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint16_t ToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

uint16_t ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = u & 0x7FFFFFu;
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow: inf
  if (exp <= 0) {                                               // subnormal or zero
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exp: correct
  return static_cast<uint16_t>(half);
}

Init InitFor(LayerWeight role) {
  switch (role) {
    case LayerWeight::kAttnNorm:
    case LayerWeight::kMlpNorm:
    case LayerWeight::kQNorm:
    case LayerWeight::kKNorm:
      return Init::kNorm;
    case LayerWeight::kAttnNormBias:
    case LayerWeight::kQBias:
    case LayerWeight::kKBias:
    case LayerWeight::kVBias:
    case LayerWeight::kQkvBias:
    case LayerWeight::kOBias:
    case LayerWeight::kMlpNormBias:
    case LayerWeight::kGateBias:
    case LayerWeight::kUpBias:
    case LayerWeight::kDownBias:
      return Init::kBias;
    default:
      return Init::kLinear;
  }
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<json> ReadJsonFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path.string() + ": cannot open");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path.string() + ": not valid JSON");
  return j;
}

// The id of a special token named in tokenizer_config.json (a string or an
// object with "content"), looked up in tokenizer.json's added tokens and vocab.
std::optional<int64_t> SpecialTokenId(const json& tokenizer, const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  std::string content = v.is_string() ? v.get<std::string>()
                        : v.is_object() && v.value("content", json()).is_string()
                            ? v["content"].get<std::string>()
                            : "";
  if (content.empty()) return std::nullopt;
  for (const json& t : tokenizer.value("added_tokens", json::array())) {
    if (t.value("content", "") == content && t.contains("id")) return t["id"].get<int64_t>();
  }
  const json& vocab = tokenizer["model"].value("vocab", json());
  if (vocab.is_object() && vocab.contains(content)) return vocab[content].get<int64_t>();
  return std::nullopt;
}

// Reads the tokenizer in `spec.tokenizer_dir` into the spec: vocabulary size
// (largest id + 1, unless the spec asks for a larger padded one) and BOS/EOS.
Status AdoptTokenizer(CheckpointSpec* spec) {
  fs::path dir(spec->tokenizer_dir);
  NS_ASSIGN_OR_RETURN(json tokenizer, ReadJsonFile(dir / "tokenizer.json"));
  int64_t max_id = -1;
  const json& vocab =
      tokenizer.contains("model") ? tokenizer["model"].value("vocab", json()) : json();
  if (vocab.is_object()) {
    for (const auto& [token, id] : vocab.items()) max_id = std::max(max_id, id.get<int64_t>());
  } else if (vocab.is_array()) {  // Unigram: [[piece, score], ...]
    max_id = static_cast<int64_t>(vocab.size()) - 1;
  }
  for (const json& t : tokenizer.value("added_tokens", json::array())) {
    max_id = std::max(max_id, t.value("id", int64_t{-1}));
  }
  if (max_id < 0) return InvalidArgument((dir / "tokenizer.json").string() + ": no vocabulary");
  if (spec->vocab != 0 && spec->vocab <= max_id) {
    return InvalidArgument("--vocab " + std::to_string(spec->vocab) +
                           " is smaller than the tokenizer's " + std::to_string(max_id + 1));
  }
  if (spec->vocab == 0) spec->vocab = max_id + 1;
  if (fs::exists(dir / "tokenizer_config.json")) {
    NS_ASSIGN_OR_RETURN(json config, ReadJsonFile(dir / "tokenizer_config.json"));
    if (auto id = SpecialTokenId(tokenizer, config, "bos_token")) spec->bos_token_id = *id;
    if (auto id = SpecialTokenId(tokenizer, config, "eos_token")) spec->eos_token_id = *id;
  }
  return Status::Ok();
}

PlannedTensor Planned(std::string name, std::vector<int64_t> shape, Init init, uint64_t bytes,
                      DType dtype) {
  PlannedTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.init = init;
  t.bytes = bytes;
  t.dtype = dtype;
  return t;
}

// Every tensor the engine expects for `config`, in checkpoint order (a
// sparse layer's experts after its other tensors); with `quantize`, each
// projection (experts included) as its quantized parts (InvalidArgument when
// one does not pack).
StatusOr<std::vector<PlannedTensor>> PlanTensors(const engine::Architecture& arch,
                                                 const checkpoint::ModelConfig& c, DType dtype,
                                                 const QuantizeSpec& quantize) {
  const engine::TensorNames& names = arch.names;
  std::vector<PlannedTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init) {
    uint64_t bytes = static_cast<uint64_t>(Numel(shape)) * checkpoint::DTypeSize(dtype);
    out.push_back(Planned(std::move(name), std::move(shape), init, bytes, dtype));
  };
  // A projection [out, in]: as it is, or as its quantized parts.
  auto add_projection = [&](const std::string& name, const std::vector<int64_t>& shape) -> Status {
    if (quantize.format == checkpoint::QuantFormat::kNone) {
      add(name, shape, Init::kLinear);
      return Status::Ok();
    }
    const std::string module = name.substr(0, name.size() - 7);  // less ".weight"
    NS_RETURN_IF_ERROR(CheckQuantizable(quantize, module, shape[0], shape[1]));
    const std::vector<PartPlan> parts = QuantizedParts(quantize, module, shape[0], shape[1], dtype);
    for (size_t k = 0; k < parts.size(); ++k) {
      PlannedTensor t = Planned(
          parts[k].name, parts[k].shape, Init::kLinear,
          static_cast<uint64_t>(Numel(parts[k].shape)) * checkpoint::DTypeSize(parts[k].dtype),
          parts[k].dtype);
      t.module = module;
      t.part = static_cast<int>(k);
      t.out = shape[0];
      t.in = shape[1];
      out.push_back(std::move(t));
    }
    return Status::Ok();
  };
  const int64_t h = c.hidden_size, width = c.moe.expert_intermediate_size;
  const std::vector<int64_t> expert_shapes[engine::kExpertWeightCount] = {
      {width, h}, {width, h}, {h, width}};
  add(names.embedding, {c.vocab_size, c.hidden_size}, Init::kLinear);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string prefix = names.layer_prefix + std::to_string(i) + ".";
    for (LayerWeight role : engine::ExpectedLayerWeights(c, i)) {
      const std::string name = prefix + names.layer[static_cast<size_t>(role)];
      if (IsProjection(role)) {
        NS_RETURN_IF_ERROR(add_projection(name, engine::ExpectedShape(c, role)));
      } else {
        add(name, engine::ExpectedShape(c, role), InitFor(role));
      }
    }
    if (!c.IsSparseLayer(i)) continue;
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      const std::string expert = prefix + names.expert_prefix + std::to_string(e) + ".";
      for (size_t w = 0; w < engine::kExpertWeightCount; ++w) {
        NS_RETURN_IF_ERROR(add_projection(expert + names.expert[w], expert_shapes[w]));
      }
    }
  }
  add(names.final_norm, {c.hidden_size}, Init::kNorm);
  if (c.norm == checkpoint::NormKind::kLayerNorm)
    add(names.final_norm_bias, {c.hidden_size}, Init::kBias);
  if (!c.tied_embeddings) add(names.lm_head, {c.vocab_size, c.hidden_size}, Init::kLinear);
  return out;
}

// Splits tensors into `shards` files of about equal size, at tensor
// boundaries and in order (as HuggingFace's save_pretrained does), and sets
// each tensor's offset inside its file.
void AssignShards(std::vector<PlannedTensor>& tensors, int shards) {
  uint64_t total = 0;
  for (const PlannedTensor& t : tensors) total += t.bytes;
  uint64_t target = (total + static_cast<uint64_t>(shards) - 1) / static_cast<uint64_t>(shards);
  int shard = 0;
  uint64_t in_shard = 0;
  for (PlannedTensor& t : tensors) {
    if (in_shard > 0 && in_shard + t.bytes / 2 > target && shard + 1 < shards) {
      ++shard;
      in_shard = 0;
    }
    t.shard = shard;
    t.offset = in_shard;
    in_shard += t.bytes;
  }
}

std::string ShardName(int shard, int shards) {
  if (shards == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", shard + 1, shards);
  return buf;
}

// Draws `count` values of tensor `t` from `rng` into `out` (float32).
void DrawValues(Rng& rng, const PlannedTensor& t, int64_t count, float* out) {
  float scale = 1.0f;
  float offset = 0.0f;
  switch (t.init) {
    case Init::kLinear:
      scale = 1.0f / std::sqrt(static_cast<float>(t.shape.back()));
      break;
    case Init::kNorm:
      scale = 0.1f;
      offset = 1.0f;
      break;
    case Init::kBias:
      scale = 0.02f;
      break;
  }
  for (int64_t i = 0; i < count; ++i) out[i] = offset + scale * rng.Normal();
}

std::string DtypeConfigName(DType dtype) {
  return dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
}

Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Unavailable(path.string() + ": write failed");
  return Status::Ok();
}

// RAII for a FILE*.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// The last quantized module's parts, kept while its parts are written (they
// are planned one after another, possibly across two shards).
struct ModuleCache {
  std::string module;
  std::vector<std::string> parts;
};

// The parts of `t`'s module: its float weight drawn as the unquantized
// "<module>.weight" would be, then quantized.
const std::vector<std::string>& QuantizedModule(const CheckpointSpec& spec, const PlannedTensor& t,
                                                ModuleCache& cache) {
  if (cache.module == t.module) return cache.parts;
  const PlannedTensor weight =
      Planned(t.module + ".weight", {t.out, t.in}, Init::kLinear, 0, DType::kF32);
  std::vector<float> w(static_cast<size_t>(t.out * t.in));
  Rng rng{SeedFor(spec.seed, weight.name)};
  DrawValues(rng, weight, static_cast<int64_t>(w.size()), w.data());
  cache.module = t.module;
  cache.parts = QuantizeMatrix(spec.quantize, w.data(), t.out, t.in, spec.dtype);
  return cache.parts;
}

Status WriteShard(const CheckpointSpec& spec, const std::vector<PlannedTensor>& tensors, int shard,
                  const fs::path& path, uint64_t* done, uint64_t total,
                  const std::function<void(uint64_t, uint64_t)>& progress, ModuleCache& cache) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  for (const PlannedTensor& t : tensors) {
    if (t.shard != shard) continue;
    header[t.name] = {{"dtype", checkpoint::DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {t.offset, t.offset + t.bytes}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned
  fs::path tmp = path.string() + ".partial";
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return Unavailable(tmp.string() + ": " + std::strerror(errno));
  uint64_t len = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(len >> (8 * i));
  bool ok = std::fwrite(prefix, 1, 8, f.get()) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  const size_t elem = checkpoint::DTypeSize(spec.dtype);
  const int64_t kChunk = 1 << 20;  // values per write
  std::vector<float> values(static_cast<size_t>(kChunk));
  std::vector<char> buffer(static_cast<size_t>(kChunk) * elem);
  for (const PlannedTensor& t : tensors) {
    if (t.shard != shard || !ok) continue;
    if (t.part >= 0) {  // a quantized projection's part
      const std::vector<std::string>& parts = QuantizedModule(spec, t, cache);
      const std::string& bytes = parts[static_cast<size_t>(t.part)];
      ok = std::fwrite(bytes.data(), 1, bytes.size(), f.get()) == bytes.size();
      *done += t.bytes;
      if (progress) progress(*done, total);
      continue;
    }
    Rng rng{SeedFor(spec.seed, t.name)};
    int64_t n = Numel(t.shape);
    for (int64_t first = 0; first < n && ok; first += kChunk) {
      int64_t count = std::min(kChunk, n - first);
      DrawValues(rng, t, count, values.data());
      FromFloat(values.data(), count, spec.dtype, buffer.data());
      size_t bytes = static_cast<size_t>(count) * elem;
      ok = std::fwrite(buffer.data(), 1, bytes, f.get()) == bytes;
    }
    *done += t.bytes;
    if (progress) progress(*done, total);
  }
  ok = ok && std::fflush(f.get()) == 0;
  if (!ok) return Unavailable(tmp.string() + ": write failed: " + std::strerror(errno));
  f.reset();
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Unavailable(path.string() + ": " + ec.message());
  return Status::Ok();
}

CheckpointSpec Shape(std::string arch, int64_t hidden, int64_t layers, int64_t heads,
                     int64_t kv_heads, int64_t intermediate, int64_t vocab, int64_t max_position,
                     double theta, double eps) {
  CheckpointSpec s;
  s.arch = std::move(arch);
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.intermediate = intermediate;
  s.vocab = vocab;
  s.max_position = max_position;
  s.rope_theta = theta;
  s.norm_eps = eps;
  return s;
}

const std::map<std::string, CheckpointSpec>& Presets() {
  static const std::map<std::string, CheckpointSpec> presets = [] {
    std::map<std::string, CheckpointSpec> p;
    CheckpointSpec llama3 = Shape("llama", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0, 1e-5);
    llama3.rope_scaling = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
    llama3.bos_token_id = 128000;
    llama3.eos_token_id = 128001;
    p["llama-3-8b"] = llama3;
    CheckpointSpec qwen = Shape("qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, 1000000.0, 1e-6);
    qwen.bos_token_id = 151643;
    qwen.eos_token_id = 151645;
    p["qwen2.5-7b"] = qwen;
    p["llama-2-70b"] = Shape("llama", 8192, 80, 64, 8, 28672, 32000, 4096, 10000.0, 1e-5);
    // The shape llama.cpp was measured with in the streaming benchmark: 1.7 GB in F16.
    CheckpointSpec bench = Shape("llama", 2048, 16, 16, 4, 5632, 32000, 2048, 10000.0, 1e-5);
    bench.dtype = DType::kF16;
    p["bench-1.7b"] = bench;
    // Small enough to stream in seconds on a laptop CPU; the demo's model.
    p["demo-150m"] = Shape("llama", 768, 12, 12, 4, 2048, 32000, 4096, 10000.0, 1e-5);
    // Mixtures of experts (their published config.json files' numbers).
    CheckpointSpec mixtral =
        Shape("mixtral", 4096, 32, 32, 8, 14336, 32000, 32768, 1000000.0, 1e-5);
    mixtral.experts = 8;  // of 14336 (intermediate_size), top 2, renormalised
    mixtral.top_k = 2;
    p["mixtral-8x7b"] = mixtral;
    // Qwen3-MoE: 128 experts, top 8 renormalised, head_dim 128 (not hidden /
    // heads); every layer sparse (`intermediate` is then unused, but written).
    auto qwen3_moe = [](int64_t hidden, int64_t layers, int64_t heads, int64_t intermediate,
                        int64_t expert_width) {
      CheckpointSpec s = Shape("qwen3_moe", hidden, layers, heads, 4, intermediate, 151936, 40960,
                               1000000.0, 1e-6);
      s.head_dim = 128;
      s.experts = 128;
      s.top_k = 8;
      s.moe_intermediate = expert_width;
      s.norm_topk_prob = true;
      s.decoder_sparse_step = 1;
      s.bos_token_id = 151643;
      s.eos_token_id = 151645;
      return s;
    };
    p["qwen3-30b-a3b"] = qwen3_moe(2048, 48, 32, 6144, 768);
    p["qwen3-235b-a22b"] = qwen3_moe(4096, 94, 64, 12288, 1536);
    return p;
  }();
  return presets;
}

// The spec's mixture of experts over the family's defaults (`model` as its
// parser read the spec's sizes).
Status ApplyMoe(const CheckpointSpec& s, checkpoint::ModelConfig* model) {
  if (!model->is_moe()) {
    if (!s.HasMoeFields()) return Status::Ok();
    return InvalidArgument(
        "experts (--experts, --top-k, --moe-intermediate, ...) are for the "
        "mixtures of experts mixtral, qwen2_moe and qwen3_moe, not '" +
        s.arch + "'");
  }
  checkpoint::MoeConfig& m = model->moe;
  if (s.experts != 0) m.num_experts = s.experts;
  if (s.top_k != 0) m.top_k = s.top_k;
  m.expert_intermediate_size = s.moe_intermediate != 0 ? s.moe_intermediate : s.intermediate;
  if (m.shared_expert_intermediate_size > 0 || s.shared_expert_intermediate) {
    m.shared_expert_intermediate_size = s.shared_expert_intermediate.value_or(s.intermediate);
  }
  if (s.decoder_sparse_step) m.decoder_sparse_step = *s.decoder_sparse_step;
  if (s.norm_topk_prob) m.norm_topk_prob = *s.norm_topk_prob;
  m.mlp_only_layers = s.mlp_only_layers;
  return checkpoint::ValidateModelConfig(*model);
}

// What the family's config.json cannot say is refused by its flag, rather
// than written as something else: Mixtral's experts are intermediate_size
// wide, all its layers sparse and renormalised; only Qwen2-MoE has a shared
// expert.
Status CheckMoeStored(const checkpoint::ModelConfig& model, const json& written) {
  NS_ASSIGN_OR_RETURN(checkpoint::ModelConfig back, checkpoint::ParseModelConfig(written));
  const checkpoint::MoeConfig &want = model.moe, &got = back.moe;
  const char* flag = nullptr;
  if (got.expert_intermediate_size != want.expert_intermediate_size) {
    flag = "--moe-intermediate (its experts are --intermediate wide)";
  } else if (got.shared_expert_intermediate_size != want.shared_expert_intermediate_size) {
    flag = "--shared-expert-intermediate (only qwen2_moe has a shared expert)";
  } else if (got.decoder_sparse_step != want.decoder_sparse_step ||
             got.mlp_only_layers != want.mlp_only_layers) {
    flag = "--decoder-sparse-step or --mlp-only-layers (every layer is sparse)";
  } else if (got.norm_topk_prob != want.norm_topk_prob) {
    flag = "--norm-topk-prob (it always renormalises the top-k weights)";
  } else if (!(got == want)) {
    flag = "these experts";
  }
  if (flag == nullptr) return Status::Ok();
  return InvalidArgument("model_type '" + model.model_type + "' cannot store " + flag);
}

}  // namespace

void FromFloat(const float* in, int64_t count, DType dtype, void* out) {
  char* bytes = static_cast<char*>(out);
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes + 4 * i, &in[i], 4);
      continue;
    }
    uint16_t h = dtype == DType::kBF16 ? ToBF16(in[i]) : ToF16(in[i]);
    std::memcpy(bytes + 2 * i, &h, 2);
  }
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : Presets()) names.push_back(name);
  return names;
}

StatusOr<CheckpointSpec> Preset(const std::string& name) {
  auto it = Presets().find(name);
  if (it != Presets().end()) return it->second;
  std::string known;
  for (const std::string& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown preset '" + name + "' (known: " + known + ")");
}

bool IsMixtureOfExperts(const std::string& arch) {
  const json probe = {{"model_type", arch},          {"hidden_size", 64},
                      {"num_hidden_layers", 1},      {"num_attention_heads", 1},
                      {"intermediate_size", 64},     {"vocab_size", 1},
                      {"max_position_embeddings", 1}};
  StatusOr<checkpoint::ModelConfig> c = checkpoint::ParseModelConfig(probe);
  return c.ok() && c->is_moe();
}

bool CheckpointSpec::HasMoeFields() const {
  return experts != 0 || top_k != 0 || moe_intermediate != 0 ||
         shared_expert_intermediate.has_value() || decoder_sparse_step.has_value() ||
         norm_topk_prob.has_value() || !mlp_only_layers.empty();
}

StatusOr<json> ConfigJson(const CheckpointSpec& s) {
  static const std::map<std::string, std::string> kClass = {
      {"llama", "LlamaForCausalLM"},        {"mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},        {"qwen3", "Qwen3ForCausalLM"},
      {"gemma", "GemmaForCausalLM"},        {"gpt_neox", "GPTNeoXForCausalLM"},
      {"phi3", "Phi3ForCausalLM"},          {"mixtral", "MixtralForCausalLM"},
      {"qwen2_moe", "Qwen2MoeForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"},
  };
  // The spec's numbers in the keys every family reads alike; the family's
  // parser fills in its defaults for the rest (activation, rotary fraction,
  // biases, ...) and checks the sizes.
  json base = {
      {"model_type", s.arch},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim.value_or(s.heads > 0 ? s.hidden / s.heads : 0)},
      {"intermediate_size", s.intermediate},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", s.max_position},
      {"rope_theta", s.rope_theta},
      {"rope_scaling", s.rope_scaling},
      {"eos_token_id", s.eos_token_id},
  };
  NS_ASSIGN_OR_RETURN(checkpoint::ModelConfig model, checkpoint::ParseModelConfig(base));
  model.norm_eps = s.norm_eps;
  model.tied_embeddings = s.tie_embeddings;
  model.sliding_window.reset();  // full attention (Mistral's reader defaults to a window)
  NS_RETURN_IF_ERROR(ApplyMoe(s, &model));
  // Then written back in the family's own spelling by the one config writer.
  NS_ASSIGN_OR_RETURN(json c, checkpoint::ModelConfigJson(model));
  if (model.is_moe()) NS_RETURN_IF_ERROR(CheckMoeStored(model, c));
  auto cls = kClass.find(s.arch);
  c["architectures"] = {cls == kClass.end() ? s.arch : cls->second};
  c["bos_token_id"] = s.bos_token_id;
  c["torch_dtype"] = DtypeConfigName(s.dtype);
  c["use_cache"] = true;
  if (s.quantize.format != checkpoint::QuantFormat::kNone) {
    c["quantization_config"] = QuantizationConfigJson(s.quantize);
  }
  return c;
}

StatusOr<WriteReport> WriteCheckpoint(const CheckpointSpec& given, const std::string& out_dir,
                                      const std::function<void(uint64_t, uint64_t)>& progress) {
  auto start = std::chrono::steady_clock::now();
  CheckpointSpec spec = given;
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kF16 && spec.dtype != DType::kBF16) {
    return InvalidArgument(std::string("dtype ") + checkpoint::DTypeName(spec.dtype) +
                           " is not a weight dtype (use bf16, f16 or f32)");
  }
  if (spec.shards < 1) return InvalidArgument("shards must be at least 1");
  if (!spec.tokenizer_dir.empty()) NS_RETURN_IF_ERROR(AdoptTokenizer(&spec));

  NS_ASSIGN_OR_RETURN(json config, ConfigJson(spec));
  NS_ASSIGN_OR_RETURN(checkpoint::ModelConfig model, checkpoint::ParseModelConfig(config));
  NS_ASSIGN_OR_RETURN(const engine::Architecture* arch, engine::FindArchitecture(spec.arch));
  NS_ASSIGN_OR_RETURN(std::vector<PlannedTensor> tensors,
                      PlanTensors(*arch, model, spec.dtype, spec.quantize));
  if (static_cast<size_t>(spec.shards) > tensors.size()) {
    return InvalidArgument("--shards " + std::to_string(spec.shards) + " is more than the " +
                           std::to_string(tensors.size()) + " tensors");
  }
  AssignShards(tensors, spec.shards);

  fs::path dir(out_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return FailedPrecondition(out_dir + ": exists and is not empty");
  }
  fs::create_directories(dir, ec);
  if (ec) return Unavailable(out_dir + ": " + ec.message());

  WriteReport report;
  uint64_t total = 0;
  for (const PlannedTensor& t : tensors) total += t.bytes;
  uint64_t done = 0;
  ModuleCache cache;
  for (int shard = 0; shard < spec.shards; ++shard) {
    NS_RETURN_IF_ERROR(WriteShard(spec, tensors, shard, dir / ShardName(shard, spec.shards), &done,
                                  total, progress, cache));
  }
  if (spec.shards > 1) {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
    for (const PlannedTensor& t : tensors) {
      index["weight_map"][t.name] = ShardName(t.shard, spec.shards);
    }
    NS_RETURN_IF_ERROR(WriteText(dir / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  json generation = {{"bos_token_id", spec.bos_token_id},
                     {"eos_token_id", spec.eos_token_id},
                     {"do_sample", false}};
  NS_RETURN_IF_ERROR(WriteText(dir / "generation_config.json", generation.dump(2) + "\n"));
  if (!spec.tokenizer_dir.empty()) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "chat_template.jinja"}) {
      fs::path from = fs::path(spec.tokenizer_dir) / name;
      if (!fs::exists(from)) continue;
      fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing, ec);
      if (ec) return Unavailable((dir / name).string() + ": " + ec.message());
    }
  }
  // config.json last: a directory without it is visibly incomplete.
  NS_RETURN_IF_ERROR(WriteText(dir / "config.json", config.dump(2) + "\n"));

  report.tensor_bytes = total;
  report.tensors = static_cast<int64_t>(tensors.size());
  report.files = spec.shards;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace nightshift::generator
