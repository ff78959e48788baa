// ParseSafetensorsHeader: one safetensors header, validated.
//
// Format: the file is an 8-byte little-endian header length N, N bytes of
// JSON, then the data section. The JSON maps tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to
// the data section, plus an optional "__metadata__" object of strings.
#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/message.h"

namespace nightshift::checkpoint {
namespace {

using nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";

// Reads a JSON value as a non-negative integer that fits in int64.
// `what` names the value in the error.
StatusOr<uint64_t> NonNegativeInt(const json& value, const std::string& what) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return DataLoss(what + " " + std::to_string(v) + " is too large");
    }
    return v;
  }
  if (!value.is_number_integer()) return DataLoss(what + " is not an integer");
  const int64_t v = value.get<int64_t>();  // "-0" parses as a signed zero
  if (v < 0) return DataLoss(what + " is negative");
  return static_cast<uint64_t>(v);
}

// Parses `text` as JSON, refusing duplicate top-level keys (nlohmann would
// keep the last one silently, hiding the first tensor's span).
StatusOr<json> ParseHeaderJson(std::string_view text) {
  std::set<std::string> keys;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    // parse_error carries the byte position; its what() may quote raw bytes.
    const auto* pe = dynamic_cast<const json::parse_error*>(&e);
    return DataLoss(
        "header is not valid JSON" +
        (pe ? " (syntax error at byte " + std::to_string(pe->byte) + ")" : std::string()));
  }
  if (!header.is_object()) return DataLoss("header is not a JSON object");
  if (!duplicate.empty()) return DataLoss("tensor " + Quoted(duplicate) + " appears twice");
  return header;
}

Status CheckMetadata(const json& metadata) {
  if (!metadata.is_object()) return DataLoss("__metadata__ is not an object");
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      return DataLoss("__metadata__ " + Quoted(key) + " is not a string");
    }
  }
  return Status::Ok();
}

// Shape entries: non-negative int64s whose product times `element_size`
// fits in uint64. Returns the byte size.
StatusOr<uint64_t> ParseShape(const json& shape, size_t element_size, std::vector<int64_t>* out) {
  if (!shape.is_array()) return DataLoss("shape is not an array");
  uint64_t bytes = element_size;
  for (size_t i = 0; i < shape.size(); ++i) {
    NS_ASSIGN_OR_RETURN(uint64_t dim, NonNegativeInt(shape[i], "shape[" + std::to_string(i) + "]"));
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return DataLoss("shape overflows 64 bits at shape[" + std::to_string(i) + "]");
    }
    out->push_back(static_cast<int64_t>(dim));
  }
  return bytes;
}

// "[2, 3]", eliding the middle of very long shapes.
std::string ShapeText(const std::vector<int64_t>& shape) {
  constexpr size_t kMaxShown = 8;
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape.size() > kMaxShown && i == kMaxShown / 2) {
      out += "..., ";
      i = shape.size() - kMaxShown / 2;
    }
    out += std::to_string(shape[i]) + (i + 1 < shape.size() ? ", " : "");
  }
  return out + "]";
}

// One tensor entry, without the file-level checks (overlaps).
StatusOr<TensorInfo> ParseTensor(const std::string& name, const json& entry, uint64_t data_size) {
  if (!entry.is_object()) return DataLoss("entry is not an object");
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end()) return DataLoss("no dtype");
  if (shape_it == entry.end()) return DataLoss("no shape");
  if (offsets_it == entry.end()) return DataLoss("no data_offsets");
  if (!dtype_it->is_string()) return DataLoss("dtype is not a string");

  TensorInfo t;
  t.name = name;
  StatusOr<DType> dtype = ParseDType(dtype_it->get<std::string>());
  if (!dtype.ok()) return DataLoss(dtype.status().message());
  t.dtype = *dtype;
  NS_ASSIGN_OR_RETURN(uint64_t shape_bytes, ParseShape(*shape_it, DTypeSize(t.dtype), &t.shape));

  const json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2) {
    return DataLoss("data_offsets is not [begin, end]");
  }
  NS_ASSIGN_OR_RETURN(uint64_t begin, NonNegativeInt(offsets[0], "data_offsets begin"));
  NS_ASSIGN_OR_RETURN(uint64_t end, NonNegativeInt(offsets[1], "data_offsets end"));
  const std::string span = "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
  if (end < begin) return DataLoss("data_offsets " + span + " end before begin");
  if (end > data_size) {
    return DataLoss("span " + span + " runs past the data section (" + std::to_string(data_size) +
                    " bytes)");
  }
  if (end - begin != shape_bytes) {
    return DataLoss("shape " + ShapeText(t.shape) + " x " + DTypeName(t.dtype) + " is " +
                    std::to_string(shape_bytes) + " bytes but span " + span + " holds " +
                    std::to_string(end - begin));
  }
  t.offset = begin;
  t.size = shape_bytes;
  return t;
}

// Spans must not overlap; zero-size spans overlap nothing. `tensors` sorted
// by offset.
Status CheckNoOverlap(const std::vector<TensorInfo>& tensors) {
  const TensorInfo* reach = nullptr;  // the nonempty tensor ending furthest so far
  for (const TensorInfo& t : tensors) {
    if (t.size == 0) continue;
    if (reach != nullptr && t.offset < reach->offset + reach->size) {
      return DataLoss("tensor " + Quoted(t.name) + ": span [" + std::to_string(t.offset) + ", " +
                      std::to_string(t.offset + t.size) + ") overlaps " + Quoted(reach->name));
    }
    if (reach == nullptr || t.offset + t.size > reach->offset + reach->size) reach = &t;
  }
  return Status::Ok();
}

StatusOr<std::vector<TensorInfo>> ParseHeader(std::string_view text, uint64_t data_size) {
  NS_ASSIGN_OR_RETURN(json header, ParseHeaderJson(text));
  std::vector<TensorInfo> tensors;
  tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      NS_RETURN_IF_ERROR(CheckMetadata(entry));
      continue;
    }
    StatusOr<TensorInfo> t = ParseTensor(name, entry, data_size);
    if (!t.ok()) return t.status().Prefixed("tensor " + Quoted(name));
    tensors.push_back(std::move(t).value());
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
  });
  NS_RETURN_IF_ERROR(CheckNoOverlap(tensors));
  return tensors;
}

}  // namespace

StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(std::string_view header,
                                                         uint64_t data_size,
                                                         std::string_view file_name) {
  StatusOr<std::vector<TensorInfo>> tensors = ParseHeader(header, data_size);
  if (!tensors.ok()) return tensors.status().Prefixed(std::string(file_name));
  return tensors;
}

}  // namespace nightshift::checkpoint
