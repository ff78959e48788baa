// Errors as values at module boundaries (LevelDB / Abseil style).
//
// A Status is either OK or carries a code and a one-line message meant for a
// human ("model.safetensors: tensor 'x': span [8, 40) overlaps 'y'"). StatusOr<T>
// holds either a T or a non-OK Status. Both are cheap to move and copy and are
// not synchronised: share them across threads only by copy.
//
// libtorch exceptions, SQLite result codes and gRPC status codes are converted
// to and from these at the edges; one place (scheduler service) maps them to
// gRPC codes.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace nightshift {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (bad flag, malformed file)
  kNotFound,            // a named thing does not exist
  kAlreadyExists,       // insert-once violated (e.g. a second result for a job)
  kFailedPrecondition,  // the system is not in a state that allows it
  kOutOfRange,          // a value outside what the system supports
  kUnimplemented,       // a feature we refuse by name rather than approximate
  kResourceExhausted,   // a budget (memory, KV cache) does not allow it
  kDataLoss,            // stored data is corrupt (checkpoint, database)
  kUnavailable,         // transient; retrying may succeed
  kCancelled,
  kInternal,  // a bug: an invariant of ours broke
};

// Stable lower-case name of a code, e.g. "invalid_argument".
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: message", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "prefix: message" (no-op when OK).
  Status Prefixed(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK status. Accessing value() of a non-OK StatusOr is
// a programming error (asserts in debug builds).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr built from an OK status without a value");
    if (status_.ok()) status_ = Internal("StatusOr built from an OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace nightshift

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define NS_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::nightshift::Status _ns_st = (expr); \
    if (!_ns_st.ok()) return _ns_st;      \
  } while (0)

#define NS_CONCAT_INNER_(a, b) a##b
#define NS_CONCAT_(a, b) NS_CONCAT_INNER_(a, b)
// `NS_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr or returns
// its status from the enclosing function.
#define NS_ASSIGN_OR_RETURN(lhs, expr) \
  NS_ASSIGN_OR_RETURN_IMPL_(NS_CONCAT_(_ns_sor_, __LINE__), lhs, expr)
#define NS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
