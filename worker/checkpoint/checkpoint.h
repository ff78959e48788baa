// Checkpoint metadata reader: what a HuggingFace checkpoint directory holds,
// without reading any tensor data.
//
// ReadCheckpoint() reads `config.json` (and `generation_config.json` when
// present), finds `model.safetensors` or the shards listed by
// `model.safetensors.index.json`, and parses and validates every safetensors
// header before anyone trusts a byte of it. Validation failures are
// DataLoss/InvalidArgument statuses whose one-line message names the file and,
// where there is one, the tensor.
//
// The result is plain data: the planner (exact mode), the engine (to map and
// stream tensors) and the worker's model scan all read it. It has no libtorch
// dependency. A Checkpoint is immutable after ReadCheckpoint returns and safe
// to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nightshift::checkpoint {

// safetensors dtypes this reader knows the size of. Anything else in a header
// is refused by name ("unsupported dtype 'F4'").
enum class DType { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element.
size_t DTypeSize(DType dtype);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
const char* DTypeName(DType dtype);
// Parses the safetensors spelling; InvalidArgument for unknown names.
StatusOr<DType> ParseDType(std::string_view name);

// How a checkpoint's projections are quantized (quantization.h reads it).
enum class QuantFormat {
  kNone,
  kAwq,         // AutoAWQ GEMM int4: qweight [in, out/8], qzeros, scales (W = (q - z) s)
  kGptq,        // GPTQ v1 int4: qweight [in/8, out], qzeros (zero - 1), scales, g_idx
  kFp8Channel,  // compressed-tensors float-quantized: F8_E4M3 weight, weight_scale [out, 1]
  kFp8Block,    // quant_method fp8: F8_E4M3 weight, weight_scale_inv [ceil(out/bo), ceil(in/bi)]
};

struct QuantizationInfo {
  QuantFormat format = QuantFormat::kNone;
  int bits = 16;
  // AWQ/GPTQ: input rows per group (GPTQ group_size -1: every row, stored
  // as the input size of each module); 0 otherwise.
  int64_t group_size = 0;
  bool desc_act = false;  // GPTQ: g_idx may permute the groups
  bool symmetric = false;
  int64_t block_out = 0, block_in = 0;  // kFp8Block's weight_block_size
  // "AWQ GEMM int4, group 32", "FP8 E4M3 block 128x128", ...; "" for kNone.
  std::string Describe() const;
};

struct FileInfo {
  std::string
      name;  // relative to the checkpoint directory, e.g. "model-00001-of-00002.safetensors"
  std::string path;          // absolute path
  uint64_t size = 0;         // file size in bytes
  uint64_t data_offset = 0;  // 8 + header length: where the data section starts
};

struct QuantizedTensor;

struct TensorInfo {
  std::string name;
  int file = 0;  // index into Checkpoint::files
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute byte offset of the first element in the file
  uint64_t size = 0;    // bytes (= product(shape) * DTypeSize(dtype))
  // Set for a quantized projection (see quantization.h): the tensor is then
  // the logical weight `<module>.weight` [out, in], stored as the parts the
  // pointee lists (dtype, file and offset are its first part's, size their
  // sum), and a loader places those parts at QuantizedTensor::part_offsets.
  std::shared_ptr<const QuantizedTensor> quant;

  int64_t numel() const;
};

// A quantized projection's stored tensors, validated against each other.
// Parts, by format: kAwq {qweight, qzeros, scales}; kGptq {qweight, qzeros,
// scales, g_idx} (g_idx absent: {qweight, qzeros, scales}, groups in order);
// kFp8Channel {weight, weight_scale}; kFp8Block {weight, weight_scale_inv}.
struct QuantizedTensor {
  QuantFormat format = QuantFormat::kNone;
  int64_t out = 0, in = 0;
  int64_t group_size = 0;               // AWQ/GPTQ input rows per group
  int64_t groups = 0;                   // AWQ/GPTQ: rows of qzeros and scales
  int64_t block_out = 0, block_in = 0;  // kFp8Block
  std::vector<TensorInfo> parts;
  // Where a loader buffer holds each part, relative to part 0's bytes: each
  // part in its own kPartAlign-aligned region, in order, at its file offset
  // modulo kPartAlign (the layer loader's O_DIRECT layout); region_bytes
  // is the whole run of regions.
  std::vector<uint64_t> part_offsets;
  uint64_t region_bytes = 0;
};
inline constexpr uint64_t kPartAlign = 4096;

// Tensors that are streamed together. Grouping is family-agnostic, from the
// tensor names: a decoder layer is any name with a `<container>.<index>.`
// component (`model.layers.3.`, `gpt_neox.layers.3.`, `transformer.h.3.`,
// also `h.3.` at the start of the name); the first all-digit component is the
// index. Outside layers, the embedding is any name with a component
// `embed_tokens`, `embed_in`, `embed_positions`, `wte`, `wpe` or
// `word_embeddings(_layernorm)`; the head is any name with a component `norm`,
// `final_layer_norm`, `final_layernorm`, `final_norm`, `ln_f`, `lm_head` or
// `embed_out`. Everything else goes to `other`.
//
// Persisted rotary tables (any name containing `rotary_emb.`, e.g.
// `model.layers.0.self_attn.rotary_emb.inv_freq`) go to `other` even inside a
// layer: they are derived from the config, the engine ignores them, and
// keeping them out of the layer keeps layer groups identical across families.
struct TensorGroup {
  enum class Kind { kEmbedding, kLayer, kHead, kOther };
  Kind kind = Kind::kOther;
  int layer = -1;            // decoder layer index for kLayer, else -1
  std::vector<int> tensors;  // indices into Checkpoint::tensors, sorted by name
  uint64_t bytes = 0;        // sum of the tensors' sizes
};

struct Checkpoint {
  std::string dir;                   // absolute, canonical
  nlohmann::json config;             // config.json (an object)
  nlohmann::json generation_config;  // generation_config.json, or null when absent
  std::vector<FileInfo> files;       // safetensors files, sorted by name (= shard order)
  std::vector<TensorInfo> tensors;   // every tensor, sorted by name

  TensorGroup embedding;            // token embedding (and position embeddings, if any)
  std::vector<TensorGroup> layers;  // layers[i].layer == i, contiguous from 0
  TensorGroup head;                 // final norm + LM head (no LM head tensor when tied)
  TensorGroup other;                // anything not recognised (e.g. rotary_emb.inv_freq)

  // No LM head tensor (`lm_head.weight` / `embed_out.weight`, i.e. a head
  // tensor whose name has a component `lm_head` or `embed_out`). Read from the
  // tensors, not from config `tie_word_embeddings`: a checkpoint that stores a
  // copy of the embedding as lm_head is streamed as untied.
  bool tied_embeddings = false;
  // Index into `tensors` of the LM head weight (a head tensor named as above,
  // preferring one ending in "weight"), or -1 when tied.
  int lm_head = -1;
  uint64_t total_bytes = 0;  // sum of all tensor sizes
  // config.json `quantization_config` (or quantize_config.json) as read;
  // format kNone for an unquantized checkpoint. Quantized modules' parts are
  // folded into one tensor each (TensorInfo::quant).
  QuantizationInfo quantization;

  // The tensor called `name`, or nullptr. O(log n).
  const TensorInfo* Find(std::string_view name) const;
  // The largest of embedding, head and every layer group, in bytes.
  uint64_t LargestGroupBytes() const;
  // config["model_type"], or "" when absent.
  std::string ModelType() const;
};

// The expert index of a mixture-of-experts tensor, from its name: the
// all-digit component after an `experts` component
// ("model.layers.3.mlp.experts.12.up_proj.weight" is expert 12), or -1 for a
// name without one (a shared expert's `shared_expert.` is not `experts.`).
int ExpertIndex(std::string_view name);

struct ReadOptions {
  // Headers larger than this are refused (real ones are well under 10 MB).
  // config.json, generation_config.json and the index are held to it too.
  uint64_t max_header_bytes = 100ull << 20;
};

// Reads and validates the checkpoint in `dir`. Failure modes (each a one-line
// message naming file and tensor): missing directory or config.json, config
// not a JSON object, only `pytorch_model.bin` present (refused: a pickle must
// be read whole to read one layer), no safetensors, index naming a file
// outside the directory (`..`, absolute, or a symlink escaping it) or missing,
// header length past the file or over the cap, header not a JSON object,
// unknown dtype, negative or overflowing shape, shape x dtype != byte span,
// span outside the data section, overlapping spans, a tensor listed in the
// index but absent from its file (or the reverse), the same tensor in two
// files, decoder layer indices that are not contiguous from 0; and for a
// quantized checkpoint (config.json `quantization_config`, or
// quantize_config.json), the refusals and checks of quantization.h, after
// which each quantized module is one tensor (TensorInfo::quant).
//
// Status codes: NotFound for a missing directory, config.json or weights file;
// Unimplemented for a pytorch_model.bin-only directory; DataLoss for anything
// malformed inside the files. Messages name files by `dir` as the caller gave
// it ("DIR/model.safetensors: tensor 'x': ..."); names taken from the files
// are quoted with control bytes escaped, so a message is always one line.
// Reads only config files and headers (never tensor data); thread-safe (no
// shared state).
StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir, const ReadOptions& options = {});

// Parses one safetensors header. `header` is the JSON text (the bytes after
// the 8-byte length prefix), `data_size` the size of the data section that
// follows it. Returns the tensors with offsets relative to the data section
// start (the caller adds FileInfo::data_offset), sorted by offset;
// TensorInfo::file is 0. `__metadata__` must be an object of strings and is
// skipped. A tensor entry is an object with `dtype` (string), `shape` (array
// of integers) and `data_offsets` ([begin, end], begin <= end); other keys are
// ignored. Zero-size spans may share offsets; gaps between spans are allowed.
// Failures are DataLoss "FILE_NAME: tensor 'x': ...". `file_name` only labels
// error messages. Pure function; thread-safe. Exposed for tests and fuzzing.
StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(std::string_view header,
                                                         uint64_t data_size,
                                                         std::string_view file_name);

}  // namespace nightshift::checkpoint
