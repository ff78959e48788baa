#include "scheduler/http/multipart.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace nightshift::scheduler::http {
namespace {

constexpr size_t kReadSize = 64 << 10;
constexpr size_t kMaxHeaderBytes = 16 << 10;

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// The parameters of a header value such as `form-data; name="file";
// filename="a.jsonl"` (names in lower case), the first token in `kind`.
std::map<std::string, std::string> Parameters(std::string_view value, std::string* kind) {
  std::map<std::string, std::string> params;
  size_t at = value.find(';');
  *kind = Lower(Trim(value.substr(0, at)));
  while (at != std::string_view::npos && at < value.size()) {
    ++at;  // past ';'
    while (at < value.size() && (value[at] == ' ' || value[at] == '\t')) ++at;
    const size_t eq = value.find('=', at);
    if (eq == std::string_view::npos) break;
    std::string name = Lower(Trim(value.substr(at, eq - at)));
    std::string param;
    at = eq + 1;
    if (at < value.size() && value[at] == '"') {
      for (++at; at < value.size() && value[at] != '"'; ++at) {
        if (value[at] == '\\' && at + 1 < value.size()) ++at;
        param += value[at];
      }
      at = value.find(';', at);
    } else {
      const size_t end = value.find(';', at);
      param = std::string(Trim(value.substr(at, end == std::string_view::npos ? end : end - at)));
      at = end;
    }
    params.emplace(std::move(name), std::move(param));
  }
  return params;
}

}  // namespace

StatusOr<std::string> MultipartBoundary(std::string_view content_type) {
  std::string kind;
  auto params = Parameters(content_type, &kind);
  if (kind != "multipart/form-data") {
    return InvalidArgument("the body must be multipart/form-data, not '" +
                           std::string(content_type.substr(0, 60)) + "'");
  }
  auto it = params.find("boundary");
  if (it == params.end() || it->second.empty() || it->second.size() > 70) {
    return InvalidArgument("multipart/form-data without a valid boundary");
  }
  return it->second;
}

MultipartReader::MultipartReader(std::string boundary, BodyReader* body)
    : delimiter_("\r\n--" + std::move(boundary)), body_(body) {
  // The body's first delimiter has no CRLF before it; reading it as if it
  // had one makes every delimiter the same.
  buffer_ = "\r\n";
}

StatusOr<bool> MultipartReader::Fill() {
  const size_t old = buffer_.size();
  buffer_.resize(old + kReadSize);
  auto n = body_->Read(buffer_.data() + old, kReadSize);
  buffer_.resize(old + (n.ok() ? *n : 0));
  if (!n.ok()) return n.status();
  return *n > 0;
}

Status MultipartReader::SkipToDelimiter() {
  while (true) {
    const size_t at = buffer_.find(delimiter_);
    if (at != std::string::npos) {
      buffer_.erase(0, at + delimiter_.size());
      return Status::Ok();
    }
    // Keep what could be the start of a delimiter split across reads.
    if (buffer_.size() >= delimiter_.size()) buffer_.erase(0, buffer_.size() - delimiter_.size());
    NS_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) return InvalidArgument("the multipart body ends before its closing boundary");
  }
}

StatusOr<bool> MultipartReader::Next(MultipartPart* part) {
  if (finished_) return false;
  if (!started_ || in_part_) {
    NS_RETURN_IF_ERROR(SkipToDelimiter());  // the preamble, or the rest of the current part
    started_ = true;
    in_part_ = false;
  }
  // After a delimiter: "--" closes the body; else optional whitespace, CRLF, headers.
  while (buffer_.size() < 2) {
    NS_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) return InvalidArgument("the multipart body ends before its closing boundary");
  }
  if (buffer_.compare(0, 2, "--") == 0) {
    finished_ = true;
    return false;
  }
  size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (buffer_.size() > kMaxHeaderBytes) {
      return InvalidArgument("a multipart part's headers are over 16 KiB");
    }
    NS_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) return InvalidArgument("the multipart body ends inside a part's headers");
  }
  if (end > kMaxHeaderBytes) return InvalidArgument("a multipart part's headers are over 16 KiB");
  const std::string headers = buffer_.substr(0, end);
  buffer_.erase(0, end + 4);
  *part = MultipartPart{};
  bool disposition = false;
  // The first line is what followed the boundary on its line (transport padding).
  for (size_t at = headers.find("\r\n"); at != std::string::npos;) {
    const size_t next = headers.find("\r\n", at + 2);
    const std::string line =
        headers.substr(at + 2, next == std::string::npos ? std::string::npos : next - at - 2);
    at = next;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = Lower(Trim(std::string_view(line).substr(0, colon)));
    const std::string_view value = Trim(std::string_view(line).substr(colon + 1));
    if (name == "content-disposition") {
      std::string kind;
      auto params = Parameters(value, &kind);
      if (kind != "form-data") continue;
      disposition = true;
      part->name = params["name"];
      part->filename = params["filename"];
    } else if (name == "content-type") {
      part->content_type = std::string(value);
    }
  }
  if (!disposition)
    return InvalidArgument("a multipart part has no Content-Disposition: form-data");
  in_part_ = true;
  return true;
}

StatusOr<size_t> MultipartReader::Read(char* data, size_t size) {
  if (!in_part_ || size == 0) return size_t{0};
  while (true) {
    const size_t at = buffer_.find(delimiter_);
    if (at == 0) {
      buffer_.erase(0, delimiter_.size());
      in_part_ = false;
      return size_t{0};
    }
    // Bytes that are surely data: up to the delimiter, or all but what
    // could begin one.
    size_t safe = at;
    if (at == std::string::npos) {
      safe = buffer_.size() >= delimiter_.size() ? buffer_.size() - delimiter_.size() + 1 : 0;
    }
    if (safe > 0) {
      const size_t n = std::min(safe, size);
      std::memcpy(data, buffer_.data(), n);
      buffer_.erase(0, n);
      return n;
    }
    NS_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) return InvalidArgument("the multipart body ends inside a part");
  }
}

}  // namespace nightshift::scheduler::http
