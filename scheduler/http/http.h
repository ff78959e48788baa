// The HTTP exchange as the Batch API's handlers see it, apart from the
// transport: a request with a body to read in pieces, a response whose body
// is either a string or written in pieces. http_server.h carries these over
// Boost.Beast (plain TCP or TLS); tests call the handlers with in-memory
// bodies. No Beast or socket types appear here.
//
// Not thread-safe: one request and its response belong to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nightshift::scheduler::http {

// A request body, read once from start to end.
class BodyReader {
 public:
  virtual ~BodyReader() = default;
  // Reads up to `size` bytes into `data`; 0 at the end of the body. Errors
  // (Unavailable) when the connection fails or the body is malformed.
  virtual StatusOr<size_t> Read(char* data, size_t size) = 0;
};

// Where a streamed response body goes.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  // Sends `data`; Unavailable when the client went away.
  virtual Status Write(std::string_view data) = 0;
};

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // "/v1/files/file-3", without the query
  std::map<std::string, std::string> query;    // decoded ?key=value pairs
  std::map<std::string, std::string> headers;  // lower-case names
  std::optional<int64_t> content_length;       // absent for a chunked body
  BodyReader* body = nullptr;                  // never null for a handler; not owned

  // The header's value, "" when absent. `name` in lower case.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When set, the body is written by this instead of `body`, in pieces:
  // with Content-Length `stream_length` when known, else chunked. Called
  // once, after the status and headers are out; an error ends the connection.
  std::function<Status(BodyWriter&)> stream;
  std::optional<int64_t> stream_length;
  // Close the connection after the response (e.g. a request body was left
  // unread because it was too large).
  bool close = false;
};

// Reads the rest of `body` into a string; ResourceExhausted once it passes
// `limit` bytes (a caller answers 413), or the body's own error.
inline StatusOr<std::string> ReadAll(BodyReader& body, size_t limit) {
  std::string out;
  char chunk[16 << 10];
  while (true) {
    NS_ASSIGN_OR_RETURN(size_t n, body.Read(chunk, sizeof(chunk)));
    if (n == 0) return out;
    if (out.size() + n > limit) {
      return ResourceExhausted("the request body is over " + std::to_string(limit) + " bytes");
    }
    out.append(chunk, n);
  }
}

// A body held in memory, for tests and for bodies already read.
class StringBody : public BodyReader {
 public:
  explicit StringBody(std::string data, size_t piece = SIZE_MAX)
      : data_(std::move(data)), piece_(piece) {}
  StatusOr<size_t> Read(char* data, size_t size) override {
    const size_t n = std::min({size, piece_, data_.size() - at_});
    data_.copy(data, n, at_);
    at_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t piece_;  // at most this many bytes per Read, to exercise split reads
  size_t at_ = 0;
};

// Collects a streamed body, for tests.
class StringWriter : public BodyWriter {
 public:
  Status Write(std::string_view data) override {
    out.append(data);
    return Status::Ok();
  }
  std::string out;
};

}  // namespace nightshift::scheduler::http
