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

struct FileInfo {
  std::string
      name;  // relative to the checkpoint directory, e.g. "model-00001-of-00002.safetensors"
  std::string path;          // absolute path
  uint64_t size = 0;         // file size in bytes
  uint64_t data_offset = 0;  // 8 + header length: where the data section starts
};

struct TensorInfo {
  std::string name;
  int file = 0;  // index into Checkpoint::files
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute byte offset of the first element in the file
  uint64_t size = 0;    // bytes (= product(shape) * DTypeSize(dtype))

  int64_t numel() const;
};

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

  // The tensor called `name`, or nullptr. O(log n).
  const TensorInfo* Find(std::string_view name) const;
  // The largest of embedding, head and every layer group, in bytes.
  uint64_t LargestGroupBytes() const;
  // config["model_type"], or "" when absent.
  std::string ModelType() const;
};

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
// files, decoder layer indices that are not contiguous from 0.
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
