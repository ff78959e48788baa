// Internal to worker/chat: how the parser, the interpreter and the builtins
// report a failure deep inside recursive code. Thrown as an exception and
// converted to a Status at the module's API (ChatTemplate::Compile/Render);
// nothing outside worker/chat sees it.
#pragma once

#include <string>
#include <utility>

#include "common/status.h"

namespace nightshift::chat {

struct TemplateError {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  int line = 0;         // template line, attached by the parser/interpreter
  bool raised = false;  // raise_exception(): the message is reported verbatim

  // "line N: message" (or the bare message of raise_exception).
  Status ToStatus() const {
    if (raised || line == 0) return Status(code, message);
    return Status(code, "line " + std::to_string(line) + ": " + message);
  }
};

// A failure the template or its data caused (Python's TypeError,
// UndefinedError, ...).
[[noreturn]] inline void ThrowError(std::string message) {
  throw TemplateError{StatusCode::kInvalidArgument, std::move(message)};
}

// A construct outside the supported Jinja subset, named in `what`.
[[noreturn]] inline void ThrowUnsupported(std::string what) {
  throw TemplateError{StatusCode::kUnimplemented, "unsupported " + std::move(what)};
}

// The value of `result`, or its error thrown.
template <typename T>
T ValueOrThrow(StatusOr<T> result) {
  if (!result.ok()) ThrowError(result.status().message());
  return std::move(result).value();
}

}  // namespace nightshift::chat
