// A streaming reader of multipart/form-data bodies (RFC 7578), as the
// OpenAI SDKs send `POST /v1/files`: each part's headers, then its bytes in
// pieces, so a large file goes to disk without being held in memory.
//
//   MultipartReader parts(boundary, request.body);
//   MultipartPart part;
//   while (*parts.Next(&part)) {            // (check the StatusOr first)
//     while (size_t n = *parts.Read(buf, sizeof(buf))) ...
//   }
//
// Memory is one read buffer (64 KiB) plus the boundary, whatever the sizes.
//
// Not thread-safe; one reader per body.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "scheduler/http/http.h"

namespace nightshift::scheduler::http {

// The boundary of a `multipart/form-data; boundary=...` Content-Type;
// InvalidArgument for any other type or a missing or malformed boundary.
StatusOr<std::string> MultipartBoundary(std::string_view content_type);

struct MultipartPart {
  std::string name;          // Content-Disposition's name
  std::string filename;      // its filename, "" when none
  std::string content_type;  // "" when none
};

class MultipartReader {
 public:
  // `body` is not owned and must outlive the reader.
  MultipartReader(std::string boundary, BodyReader* body);

  // Moves to the next part (skipping what is left of the current one) and
  // fills `part`: true, or false after the closing boundary. InvalidArgument
  // for a malformed body (a part without Content-Disposition, headers over
  // 16 KiB, the body ending before the closing boundary); the body's own
  // errors as they are.
  StatusOr<bool> Next(MultipartPart* part);

  // Reads up to `size` bytes of the current part's data; 0 at its end.
  // Errors as Next's.
  StatusOr<size_t> Read(char* data, size_t size);

 private:
  // Reads more of the body into buffer_; false at its end.
  StatusOr<bool> Fill();
  // Skips buffer_ up to and including the next delimiter.
  Status SkipToDelimiter();

  std::string delimiter_;  // "\r\n--" + boundary
  BodyReader* body_;
  std::string buffer_;  // read, not yet consumed
  bool started_ = false;
  bool in_part_ = false;  // between a part's headers and its delimiter
  bool finished_ = false;
};

}  // namespace nightshift::scheduler::http
