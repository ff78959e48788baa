// nightshift make-checkpoint: writes a random-weight checkpoint of a real
// shape (see worker/generator/generator.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "worker/checkpoint/model_config.h"
#include "worker/generator/generator.h"

namespace nightshift::cli {
namespace {

// The registered families, "llama, mistral, ...".
std::string FamilyList(const char* separator) {
  std::string out;
  for (const checkpoint::ModelFamily* family : checkpoint::ModelFamilies()) {
    out += (out.empty() ? "" : separator) + family->model_type;
  }
  return out;
}

std::string PresetList() {
  std::string out;
  for (const std::string& name : generator::PresetNames()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

StatusOr<checkpoint::DType> WeightDType(const std::string& name) {
  if (name == "bf16") return checkpoint::DType::kBF16;
  if (name == "f16" || name == "fp16") return checkpoint::DType::kF16;
  if (name == "f32" || name == "fp32") return checkpoint::DType::kF32;
  return InvalidArgument("--dtype must be bf16, f16 or f32, got '" + name + "'");
}

int RunMakeCheckpoint(int argc, char** argv) {
  std::string arch, preset, dtype, tokenizer, out, quantize;
  int64_t group_size = 128;
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0;
  int64_t head_dim = 0, shards = 1, seed = 0, max_position = 4096;
  int64_t experts = 0, top_k = 0, moe_intermediate = 0, shared_expert = 0, sparse_step = 1;
  std::string mlp_only_layers;
  bool tie = false, json = false, quiet = false, norm_topk = false;
  const std::string usage =
      "nightshift make-checkpoint --arch " + FamilyList("|") +
      " (--preset NAME | --hidden H --layers L --heads N --kv-heads K --intermediate I --vocab V) "
      "[--head-dim D] [--experts E --top-k K [--moe-intermediate I] "
      "[--shared-expert-intermediate S] [--decoder-sparse-step N] [--mlp-only-layers L,...] "
      "[--[no-]norm-topk-prob]] [--dtype bf16|f16|f32] "
      "[--quantize awq|gptq|fp8|fp8-block [--group-size G]] "
      "[--shards N] [--tie-embeddings] [--tokenizer DIR] --seed S --out DIR";
  CommandLine flags(
      usage,
      "Writes a HuggingFace-format checkpoint with random weights: config.json,\n"
      "generation_config.json, model.safetensors or N shards with\n"
      "model.safetensors.index.json, and with --tokenizer a copy of tokenizer.json and\n"
      "tokenizer_config.json (the vocabulary size and BOS/EOS ids then come from it).\n"
      "Tensors are exactly those the engine expects for the architecture; values\n"
      "depend only on --seed and each tensor's name. Random weights produce noise,\n"
      "not language: these checkpoints are for benchmarks, demos and tests.\n"
      "--quantize stores every decoder projection in a published format, rounded to\n"
      "nearest from the same float weights (embeddings, norms, biases and the LM head\n"
      "stay in --dtype): awq = AutoAWQ GEMM int4 with zero points, gptq = GPTQ v1 int4\n"
      "(asymmetric, g_idx), both in groups of --group-size input rows (default 128);\n"
      "fp8 = compressed-tensors float-quantized E4M3 with one --dtype scale per output\n"
      "row; fp8-block = E4M3 with F32 scales per 128x128 block (DeepSeek-V3 layout).\n"
      "Mixtures of experts (mixtral, qwen2_moe, qwen3_moe) take --experts and --top-k:\n"
      "each sparse layer gets a router and that many gated experts of\n"
      "--moe-intermediate (default --intermediate; Mixtral's are --intermediate), and\n"
      "for qwen2_moe a shared expert of --shared-expert-intermediate (default\n"
      "--intermediate; 0: none) with its sigmoid gate. Qwen layers are sparse when\n"
      "(i + 1) % --decoder-sparse-step == 0 and i is not in --mlp-only-layers; the\n"
      "others get a dense MLP of --intermediate. --quantize covers the experts; the\n"
      "router stays in --dtype.\n"
      "Presets: " +
          PresetList() +
          ".\n"
          "Progress goes to stderr; the summary (with --json, one object: out, files,\n"
          "tensors, bytes, seconds, mb_per_s) to stdout.");
  flags.String("arch", &arch, "model_type: " + FamilyList(", ") + " (implied by --preset)", "ARCH");
  flags.String("preset", &preset, "a real model's shape: " + PresetList(), "NAME");
  flags.Int("hidden", &hidden, "hidden size", "H");
  flags.Int("layers", &layers, "decoder layers", "L");
  flags.Int("heads", &heads, "attention heads", "N");
  flags.Int("kv-heads", &kv_heads, "key/value heads (default: --heads)", "K");
  flags.Int("intermediate", &intermediate, "MLP intermediate size", "I");
  flags.Int("vocab", &vocab, "vocabulary size (default with --tokenizer: the tokenizer's)", "V");
  flags.Int("head-dim", &head_dim, "head dimension (default hidden / heads)", "D");
  flags.Int("max-position", &max_position, "max_position_embeddings (default 4096)", "N");
  flags.Int("experts", &experts, "mixture of experts: experts per sparse layer", "E");
  flags.Int("top-k", &top_k, "mixture of experts: experts routed to per token", "K");
  flags.Int("moe-intermediate", &moe_intermediate,
            "an expert's intermediate size (default --intermediate)", "I");
  flags.Int("shared-expert-intermediate", &shared_expert,
            "qwen2_moe: the shared expert's intermediate size (default --intermediate; 0: none)",
            "S");
  flags.Int("decoder-sparse-step", &sparse_step,
            "qwen2_moe, qwen3_moe: layer i is sparse when (i + 1) % N == 0 (default 1)", "N");
  flags.String("mlp-only-layers", &mlp_only_layers,
               "qwen2_moe, qwen3_moe: layers kept dense, comma-separated", "L,...");
  flags.Bool("norm-topk-prob", &norm_topk,
             "qwen2_moe, qwen3_moe: renormalise the top-k routing weights (default: the "
             "family's, off; a preset's own)");
  flags.String("dtype", &dtype, "stored weight dtype: bf16 (default), f16 or f32", "DTYPE");
  flags.String("quantize", &quantize,
               "store the projections quantized: awq, gptq, fp8 or fp8-block", "FORMAT");
  flags.Int("group-size", &group_size, "input rows per int4 group (awq, gptq; default 128)", "G");
  flags.Int("shards", &shards, "number of safetensors files (default 1)", "N");
  flags.Bool("tie-embeddings", &tie, "no lm_head: the LM head is the token embedding");
  flags.String("tokenizer", &tokenizer, "copy tokenizer.json and tokenizer_config.json from DIR",
               "DIR");
  flags.Int("seed", &seed, "random seed (required)", "S");
  flags.String("out", &out, "output directory (created; must be empty)", "DIR");
  flags.Bool("json", &json, "print the summary as JSON");
  flags.Bool("quiet", &quiet, "no progress on stderr");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;

  if (out.empty()) return Fail("make-checkpoint", InvalidArgument("--out DIR is required"));
  if (!flags.Seen("seed")) return Fail("make-checkpoint", InvalidArgument("--seed S is required"));
  generator::CheckpointSpec spec;
  if (!preset.empty()) {
    auto found = generator::Preset(preset);
    if (!found.ok()) return Fail("make-checkpoint", InvalidArgument(found.status().message()));
    spec = *found;
    if (!arch.empty() && arch != spec.arch) {
      return Fail("make-checkpoint", InvalidArgument("--preset " + preset + " is a " + spec.arch +
                                                     " model, not --arch " + arch));
    }
  } else {
    if (arch.empty())
      return Fail("make-checkpoint", InvalidArgument("--arch or --preset is required"));
    for (const char* need : {"hidden", "layers", "heads", "intermediate"}) {
      if (!flags.Seen(need)) {
        return Fail("make-checkpoint",
                    InvalidArgument(std::string("--") + need + " is required without --preset"));
      }
    }
    if (!flags.Seen("vocab") && tokenizer.empty()) {
      return Fail("make-checkpoint", InvalidArgument("--vocab or --tokenizer is required"));
    }
    spec.arch = arch;
    spec.hidden = hidden;
    spec.layers = layers;
    spec.heads = heads;
    spec.kv_heads = flags.Seen("kv-heads") ? kv_heads : heads;
    spec.intermediate = intermediate;
    spec.max_position = max_position;
    if (generator::IsMixtureOfExperts(arch)) {
      for (const char* need : {"experts", "top-k"}) {
        if (!flags.Seen(need)) {
          return Fail("make-checkpoint", InvalidArgument(std::string("--") + need +
                                                         " is required for --arch " + arch));
        }
      }
    }
  }
  // Flags given with a preset override its numbers.
  if (flags.Seen("hidden")) spec.hidden = hidden;
  if (flags.Seen("layers")) spec.layers = layers;
  if (flags.Seen("heads")) spec.heads = heads;
  if (flags.Seen("kv-heads")) spec.kv_heads = kv_heads;
  if (flags.Seen("intermediate")) spec.intermediate = intermediate;
  if (flags.Seen("max-position")) spec.max_position = max_position;
  if (flags.Seen("vocab")) spec.vocab = vocab;
  if (!tokenizer.empty() && !flags.Seen("vocab")) spec.vocab = 0;  // the tokenizer's
  if (flags.Seen("head-dim")) spec.head_dim = head_dim;
  if (flags.Seen("experts")) spec.experts = experts;
  if (flags.Seen("top-k")) spec.top_k = top_k;
  if (flags.Seen("moe-intermediate")) spec.moe_intermediate = moe_intermediate;
  if (flags.Seen("shared-expert-intermediate")) spec.shared_expert_intermediate = shared_expert;
  if (flags.Seen("decoder-sparse-step")) spec.decoder_sparse_step = sparse_step;
  if (flags.Seen("norm-topk-prob")) spec.norm_topk_prob = norm_topk;
  if (flags.Seen("mlp-only-layers")) {
    auto layers_list = ParseIntList(mlp_only_layers, "--mlp-only-layers");
    if (!layers_list.ok()) return Fail("make-checkpoint", layers_list.status());
    spec.mlp_only_layers = *layers_list;
  }
  if (!dtype.empty()) {
    auto parsed = WeightDType(dtype);
    if (!parsed.ok()) return Fail("make-checkpoint", parsed.status());
    spec.dtype = *parsed;
  }
  for (auto [name, value] : {std::pair{"hidden", spec.hidden},
                             {"layers", spec.layers},
                             {"heads", spec.heads},
                             {"kv-heads", spec.kv_heads},
                             {"intermediate", spec.intermediate},
                             {"shards", shards}}) {
    if (value <= 0) {
      return Fail("make-checkpoint",
                  InvalidArgument(std::string("--") + name + " must be positive"));
    }
  }
  for (auto [name, value] : {std::pair{"experts", experts},
                             {"top-k", top_k},
                             {"moe-intermediate", moe_intermediate},
                             {"decoder-sparse-step", sparse_step}}) {
    if (flags.Seen(name) && value <= 0) {
      return Fail("make-checkpoint",
                  InvalidArgument(std::string("--") + name + " must be positive"));
    }
  }
  if (shared_expert < 0) {
    return Fail("make-checkpoint",
                InvalidArgument("--shared-expert-intermediate must not be negative"));
  }
  if (seed < 0) return Fail("make-checkpoint", InvalidArgument("--seed must be non-negative"));
  if (!quantize.empty()) {
    auto format = generator::ParseQuantizeFormat(quantize);
    if (!format.ok()) return Fail("make-checkpoint", format.status());
    spec.quantize.format = *format;
    spec.quantize.group_size = group_size;
  } else if (flags.Seen("group-size")) {
    return Fail("make-checkpoint", InvalidArgument("--group-size needs --quantize awq or gptq"));
  }
  spec.shards = static_cast<int>(shards);
  spec.tie_embeddings = spec.tie_embeddings || tie;
  spec.tokenizer_dir = tokenizer;
  spec.seed = static_cast<uint64_t>(seed);

  const bool tty = isatty(STDERR_FILENO);
  int last_percent = -1;
  auto progress = [&](uint64_t done, uint64_t total) {
    int percent = total ? static_cast<int>(100 * done / total) : 100;
    if (quiet || percent == last_percent || (!tty && percent / 10 == last_percent / 10)) return;
    last_percent = percent;
    std::fprintf(stderr, tty ? "\rwriting %s: %3d%% of %.2f GB" : "writing %s: %d%% of %.2f GB\n",
                 out.c_str(), percent, static_cast<double>(total) / 1e9);
  };
  auto report = generator::WriteCheckpoint(spec, out, progress);
  if (tty && !quiet && last_percent >= 0) std::fputc('\n', stderr);
  if (!report.ok()) return Fail("make-checkpoint", report.status());

  double mbps =
      report->seconds > 0 ? static_cast<double>(report->tensor_bytes) / 1e6 / report->seconds : 0.0;
  if (json) {
    std::cout << nlohmann::json{{"out", out},
                                {"files", report->files},
                                {"tensors", report->tensors},
                                {"bytes", report->tensor_bytes},
                                {"seconds", report->seconds},
                                {"mb_per_s", mbps}}
                     .dump()
              << "\n";
  } else {
    std::printf("wrote %s: %lld tensors, %.3f GB in %d file(s), %.1f s (%.0f MB/s)\n", out.c_str(),
                static_cast<long long>(report->tensors),
                static_cast<double>(report->tensor_bytes) / 1e9, report->files, report->seconds,
                mbps);
  }
  return kExitOk;
}

}  // namespace

NS_REGISTER_COMMAND("make-checkpoint", "write a random-weight checkpoint of a real shape",
                    RunMakeCheckpoint);

}  // namespace nightshift::cli
