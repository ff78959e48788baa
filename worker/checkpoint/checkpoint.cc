// ReadCheckpoint: finds the weight files of a checkpoint directory, reads and
// validates their headers, checks them against the shard index and groups
// the tensors for streaming.
#include "worker/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "worker/checkpoint/message.h"
#include "worker/checkpoint/quantization.h"

namespace nightshift::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kConfig[] = "config.json";
constexpr char kGenerationConfig[] = "generation_config.json";
constexpr char kQuantizeConfig[] = "quantize_config.json";  // AutoGPTQ's
constexpr char kIndex[] = "model.safetensors.index.json";
constexpr char kSingleFile[] = "model.safetensors";
constexpr char kPickle[] = "pytorch_model.bin";
constexpr char kPickleIndex[] = "pytorch_model.bin.index.json";

// "DIR/NAME" for messages; `name` comes from the index, so it is quoted if
// it holds anything unprintable.
std::string FileLabel(const std::string& dir_label, const std::string& name) {
  const bool printable = std::all_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  return dir_label + "/" + (printable ? name : Quoted(name));
}

// Tensor name -> file name, from the index (or the single file).
using WeightMap = std::map<std::string, std::string>;

// Thread-safe, unlike strerror.
std::string ErrnoText() { return std::error_code(errno, std::generic_category()).message(); }

// An open file descriptor, closed on destruction.
class File {
 public:
  explicit File(int fd) : fd_(fd) {}
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `size` bytes at `offset` into `out`; `label` names the file.
Status ReadAt(const File& file, uint64_t offset, uint64_t size, const std::string& label,
              std::string* out) {
  out->resize(size);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pread(file.fd(), out->data() + done, size - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return DataLoss(label + ": read failed: " + ErrnoText());
    if (n == 0) return DataLoss(label + ": file shrank while reading");
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

StatusOr<uint64_t> FileSize(const File& file, const std::string& label) {
  struct stat st;
  if (fstat(file.fd(), &st) != 0) return DataLoss(label + ": stat failed: " + ErrnoText());
  if (!S_ISREG(st.st_mode)) return DataLoss(label + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

StatusOr<std::unique_ptr<File>> OpenFile(const std::string& path, const std::string& label) {
  // O_NONBLOCK: a FIFO planted in the directory must not hang the reader.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(label + ": no such file");
    return DataLoss(label + ": cannot open: " + ErrnoText());
  }
  return std::make_unique<File>(fd);
}

// Reads a JSON file that must hold an object, at most `max_bytes` long.
StatusOr<json> ReadJsonObject(const std::string& path, const std::string& label,
                              uint64_t max_bytes) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<File> file, OpenFile(path, label));
  NS_ASSIGN_OR_RETURN(uint64_t size, FileSize(*file, label));
  if (size > max_bytes) {
    return DataLoss(label + ": " + std::to_string(size) + " bytes, over the cap of " +
                    std::to_string(max_bytes));
  }
  std::string text;
  NS_RETURN_IF_ERROR(ReadAt(*file, 0, size, label, &text));
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return DataLoss(label + ": not valid JSON");
  if (!value.is_object()) return DataLoss(label + ": not a JSON object");
  return value;
}

// Whether `path` exists; unreadable counts as absent (the open that follows
// reports why).
bool Exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

bool IsUnder(const fs::path& path, const fs::path& dir) {
  auto [dir_end, path_at] = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end());
  return dir_end == dir.end() && path_at != path.end();
}

// Resolves a weight file named by the index (or the single file) to an
// absolute path inside `dir` (canonical). `label` names the index.
StatusOr<std::string> ResolveWeightFile(const fs::path& dir, const std::string& name,
                                        const std::string& label) {
  const fs::path rel(name);
  if (name.empty() || name.find('\0') != std::string::npos || rel.is_absolute()) {
    return DataLoss(label + ": file name " + Quoted(name) + " is not a relative path");
  }
  for (const fs::path& part : rel) {
    if (part == "..") {
      return DataLoss(label + ": file name " + Quoted(name) + " climbs out of the directory");
    }
  }
  std::error_code ec;
  const fs::path resolved = fs::canonical(dir / rel, ec);
  if (ec) return NotFound(label + ": names " + Quoted(name) + ", which does not exist");
  if (!IsUnder(resolved, dir)) {
    return DataLoss(label + ": file " + Quoted(name) + " is a link to " +
                    Quoted(resolved.string()) + ", outside the checkpoint directory");
  }
  return resolved.string();
}

// Reads and validates one safetensors file. Tensors come back with absolute
// offsets and TensorInfo::file = `file_index`.
Status ReadSafetensors(const std::string& label, const ReadOptions& options, int file_index,
                       FileInfo* info, std::vector<TensorInfo>* tensors) {
  NS_ASSIGN_OR_RETURN(std::unique_ptr<File> file, OpenFile(info->path, label));
  NS_ASSIGN_OR_RETURN(info->size, FileSize(*file, label));
  if (info->size < 8) {
    return DataLoss(label + ": " + std::to_string(info->size) +
                    " bytes, too short for a safetensors header");
  }
  std::string prefix;
  NS_RETURN_IF_ERROR(ReadAt(*file, 0, 8, label, &prefix));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<unsigned char>(prefix[i]);
  if (header_len > options.max_header_bytes) {
    return DataLoss(label + ": header length " + std::to_string(header_len) +
                    " is over the cap of " + std::to_string(options.max_header_bytes));
  }
  if (header_len > info->size - 8) {
    return DataLoss(label + ": header length " + std::to_string(header_len) +
                    " runs past the end of the file (" + std::to_string(info->size) + " bytes)");
  }
  std::string header;
  NS_RETURN_IF_ERROR(ReadAt(*file, 8, header_len, label, &header));
  info->data_offset = 8 + header_len;
  NS_ASSIGN_OR_RETURN(std::vector<TensorInfo> found,
                      ParseSafetensorsHeader(header, info->size - info->data_offset, label));
  for (TensorInfo& t : found) {
    t.file = file_index;
    t.offset += info->data_offset;
    tensors->push_back(std::move(t));
  }
  return Status::Ok();
}

// The weight map of a sharded checkpoint, from its index file.
StatusOr<WeightMap> ReadIndex(const std::string& path, const std::string& label,
                              uint64_t max_bytes) {
  NS_ASSIGN_OR_RETURN(json index, ReadJsonObject(path, label, max_bytes));
  auto it = index.find("weight_map");
  if (it == index.end() || !it->is_object()) {
    return DataLoss(label + ": no weight_map object");
  }
  WeightMap map;
  for (const auto& [tensor, file] : it->items()) {
    if (!file.is_string()) {
      return DataLoss(label + ": tensor " + Quoted(tensor) + ": weight_map entry is not a string");
    }
    map.emplace(tensor, file.get<std::string>());
  }
  if (map.empty()) return DataLoss(label + ": weight_map is empty");
  return map;
}

// Where the weights are: the index's map, or {"" -> model.safetensors} for a
// single file (an empty tensor name meaning "whatever the file holds").
StatusOr<WeightMap> FindWeights(const std::string& dir_label, const fs::path& dir,
                                const ReadOptions& options, bool* sharded) {
  *sharded = Exists(dir / kIndex);
  if (*sharded) {
    return ReadIndex((dir / kIndex).string(), dir_label + "/" + kIndex, options.max_header_bytes);
  }
  if (Exists(dir / kSingleFile)) return WeightMap{{"", kSingleFile}};
  if (Exists(dir / kPickle) || Exists(dir / kPickleIndex)) {
    return Unimplemented(dir_label +
                         ": only pytorch_model.bin, no safetensors: refused, because "
                         "reading one layer of a pickle means reading the whole file; convert "
                         "the checkpoint to safetensors");
  }
  return NotFound(dir_label + ": no " + kSingleFile + " or " + kIndex);
}

// One header cannot repeat a name (the parser refuses it), but two shards
// can. `tensors` sorted by name.
Status CheckUniqueNames(const std::string& dir_label, const std::vector<FileInfo>& files,
                        const std::vector<TensorInfo>& tensors) {
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].name == tensors[i - 1].name) {
      return DataLoss(dir_label + ": tensor " + Quoted(tensors[i].name) + " is in both " +
                      Quoted(files[tensors[i - 1].file].name) + " and " +
                      Quoted(files[tensors[i].file].name));
    }
  }
  return Status::Ok();
}

// Checks every tensor the files hold against the index, both ways.
Status CheckAgainstIndex(const std::string& dir_label, const WeightMap& map,
                         const std::vector<FileInfo>& files,
                         const std::vector<TensorInfo>& tensors) {
  std::set<std::string> held;
  for (const TensorInfo& t : tensors) {
    const std::string& file = files[t.file].name;
    const std::string label = FileLabel(dir_label, file) + ": tensor " + Quoted(t.name);
    auto listed = map.find(t.name);
    if (listed == map.end()) return DataLoss(label + " is not listed in " + kIndex);
    if (listed->second != file) {
      return DataLoss(label + " is listed in " + kIndex + " under " + Quoted(listed->second));
    }
    held.insert(t.name);
  }
  for (const auto& [tensor, file] : map) {
    if (held.count(tensor) == 0) {
      return DataLoss(dir_label + "/" + kIndex + ": tensor " + Quoted(tensor) +
                      " is listed under " + Quoted(file) + ", which does not hold it");
    }
  }
  return Status::Ok();
}

// "model.layers.0.mlp" -> {"model", "layers", "0", "mlp"}.
std::vector<std::string> SplitName(std::string_view name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    parts.emplace_back(name.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool HasAny(const std::vector<std::string>& parts, std::initializer_list<const char*> names) {
  for (const std::string& p : parts) {
    for (const char* n : names) {
      if (p == n) return true;
    }
  }
  return false;
}

bool IsLmHead(const std::vector<std::string>& parts) {
  return HasAny(parts, {"lm_head", "embed_out"});
}

// Where a tensor is streamed: its group kind and, for layers, the index.
struct Placement {
  TensorGroup::Kind kind = TensorGroup::Kind::kOther;
  int layer = -1;
};

StatusOr<Placement> Place(const std::string& name, const std::vector<std::string>& parts) {
  if (name.find("rotary_emb.") != std::string::npos) return Placement{};
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    if (!AllDigits(parts[i])) continue;
    if (parts[i].size() > 9) return DataLoss("tensor " + Quoted(name) + ": layer index too large");
    return Placement{TensorGroup::Kind::kLayer, std::stoi(parts[i])};
  }
  if (HasAny(parts, {"embed_tokens", "embed_in", "embed_positions", "wte", "wpe", "word_embeddings",
                     "word_embeddings_layernorm"})) {
    return Placement{TensorGroup::Kind::kEmbedding, -1};
  }
  if (IsLmHead(parts) ||
      HasAny(parts, {"norm", "final_layer_norm", "final_layernorm", "final_norm", "ln_f"})) {
    return Placement{TensorGroup::Kind::kHead, -1};
  }
  return Placement{};
}

void Add(const TensorInfo& t, int index, TensorGroup* group) {
  group->tensors.push_back(index);
  group->bytes += t.size;
}

// Fills the groups, tied_embeddings and total_bytes of `ckpt` from its
// (name-sorted) tensors. `dir_label` names the checkpoint in errors.
Status GroupTensors(const std::string& dir_label, Checkpoint* ckpt) {
  ckpt->embedding.kind = TensorGroup::Kind::kEmbedding;
  ckpt->head.kind = TensorGroup::Kind::kHead;
  ckpt->other.kind = TensorGroup::Kind::kOther;
  std::map<int, TensorGroup> layers;
  for (size_t i = 0; i < ckpt->tensors.size(); ++i) {
    const TensorInfo& t = ckpt->tensors[i];
    ckpt->total_bytes += t.size;
    const std::vector<std::string> parts = SplitName(t.name);
    StatusOr<Placement> placement = Place(t.name, parts);
    if (!placement.ok()) return placement.status().Prefixed(dir_label);
    switch (placement->kind) {
      case TensorGroup::Kind::kEmbedding:
        Add(t, static_cast<int>(i), &ckpt->embedding);
        break;
      case TensorGroup::Kind::kHead:
        Add(t, static_cast<int>(i), &ckpt->head);
        if (IsLmHead(parts) && (ckpt->lm_head < 0 || parts.back() == "weight")) {
          ckpt->lm_head = static_cast<int>(i);
        }
        break;
      case TensorGroup::Kind::kLayer: {
        TensorGroup& g = layers[placement->layer];
        g.kind = TensorGroup::Kind::kLayer;
        g.layer = placement->layer;
        Add(t, static_cast<int>(i), &g);
        break;
      }
      case TensorGroup::Kind::kOther:
        Add(t, static_cast<int>(i), &ckpt->other);
        break;
    }
  }
  ckpt->tied_embeddings = ckpt->lm_head < 0;
  for (auto& [index, group] : layers) {
    const int expected = static_cast<int>(ckpt->layers.size());
    if (index != expected) {
      return DataLoss(dir_label + ": decoder layer " + std::to_string(expected) +
                      " has no tensors, but layer " + std::to_string(index) + " has");
    }
    ckpt->layers.push_back(std::move(group));
  }
  return Status::Ok();
}

Status ReadConfigs(const std::string& dir_label, const fs::path& dir, const ReadOptions& options,
                   Checkpoint* ckpt) {
  NS_ASSIGN_OR_RETURN(ckpt->config,
                      ReadJsonObject((dir / kConfig).string(), dir_label + "/" + kConfig,
                                     options.max_header_bytes));
  if (Exists(dir / kGenerationConfig)) {
    NS_ASSIGN_OR_RETURN(ckpt->generation_config, ReadJsonObject((dir / kGenerationConfig).string(),
                                                                dir_label + "/" + kGenerationConfig,
                                                                options.max_header_bytes));
  }
  json quantize_config;
  if (Exists(dir / kQuantizeConfig)) {
    NS_ASSIGN_OR_RETURN(quantize_config, ReadJsonObject((dir / kQuantizeConfig).string(),
                                                        dir_label + "/" + kQuantizeConfig,
                                                        options.max_header_bytes));
  }
  NS_ASSIGN_OR_RETURN(ckpt->quantization,
                      ParseQuantization(ckpt->config, quantize_config, dir_label));
  return Status::Ok();
}

}  // namespace

StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir, const ReadOptions& options) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  if (ec) return NotFound(dir + ": no such directory");
  if (!fs::is_directory(canonical, ec)) return NotFound(dir + ": not a directory");

  Checkpoint ckpt;
  ckpt.dir = canonical.string();
  NS_RETURN_IF_ERROR(ReadConfigs(dir, canonical, options, &ckpt));

  bool sharded = false;
  NS_ASSIGN_OR_RETURN(WeightMap map, FindWeights(dir, canonical, options, &sharded));
  std::set<std::string> file_names;  // sorted, so shards come in order
  for (const auto& entry : map) file_names.insert(entry.second);
  const std::string index_label = dir + "/" + (sharded ? kIndex : kSingleFile);
  for (const std::string& name : file_names) {
    FileInfo info;
    info.name = name;
    NS_ASSIGN_OR_RETURN(info.path, ResolveWeightFile(canonical, name, index_label));
    NS_RETURN_IF_ERROR(ReadSafetensors(FileLabel(dir, name), options,
                                       static_cast<int>(ckpt.files.size()), &info, &ckpt.tensors));
    ckpt.files.push_back(std::move(info));
  }
  std::sort(ckpt.tensors.begin(), ckpt.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  NS_RETURN_IF_ERROR(CheckUniqueNames(dir, ckpt.files, ckpt.tensors));
  if (sharded) NS_RETURN_IF_ERROR(CheckAgainstIndex(dir, map, ckpt.files, ckpt.tensors));
  NS_RETURN_IF_ERROR(FoldQuantizedTensors(dir, ckpt.quantization, &ckpt.tensors));
  NS_RETURN_IF_ERROR(GroupTensors(dir, &ckpt));
  return ckpt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int ExpertIndex(std::string_view name) {
  size_t begin = 0;
  bool after_experts = false;
  while (begin <= name.size()) {
    size_t end = name.find('.', begin);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(begin, end - begin);
    if (after_experts) {
      const bool digits =
          !part.empty() && part.size() < 9 &&
          std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      return digits ? std::stoi(std::string(part)) : -1;
    }
    after_experts = part == "experts";
    begin = end + 1;
  }
  return -1;
}

const TensorInfo* Checkpoint::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

uint64_t Checkpoint::LargestGroupBytes() const {
  uint64_t largest = std::max(embedding.bytes, head.bytes);
  for (const TensorGroup& g : layers) largest = std::max(largest, g.bytes);
  return largest;
}

std::string Checkpoint::ModelType() const {
  auto it = config.find("model_type");
  return it != config.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace nightshift::checkpoint
