// PhotonInfer — error reporting: Status and Result<T>.
//
// No exception crosses the public API. A function that can fail returns a Status (no value) or a Result<T> (a value
// or a Status). Every error message says what went wrong and, where there is one, what to change
// ("config.json: field 'hidden_size' is missing; add it or pass a dummy:NAME preset").
//
// Thread safety: Status and Result are plain values; distinct objects may be used from different threads.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace photon {

/// Category of an error. Stable numeric values: they mirror the C ABI's photon_status codes.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,    ///< a caller-supplied value is wrong (flag, request field, shape)
  kNotFound = 2,           ///< a file, tensor or id does not exist
  kIoError = 3,            ///< reading or mapping a file, or a network connection, failed
  kFormatError = 4,        ///< a file exists but its contents are malformed (safetensors, JSON, tokenizer)
  kUnsupported = 5,        ///< valid input that this build does not handle (architecture, dtype, device)
  kOutOfMemory = 6,        ///< an allocation failed or the configured budget is too small
  kResourceExhausted = 7,  ///< a capacity limit was reached (KV cache, queue)
  kCancelled = 8,          ///< the operation was cancelled by the caller
  kInternal = 9,           ///< a bug in PhotonInfer; please report it
};

/// Short lower-case name of a code, e.g. "invalid argument".
constexpr std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kFormatError:
      return "format error";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kOutOfMemory:
      return "out of memory";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

/// Outcome of an operation: ok, or a code plus a human-readable message.
class [[nodiscard]] Status {
 public:
  /// The ok status.
  Status() = default;
  /// An error. `code` should not be kOk; `message` says what went wrong and what to change.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  /// The message alone (empty for ok).
  const std::string& message() const { return message_; }
  /// "code name: message", or "ok".
  std::string to_string() const {
    if (is_ok()) return "ok";
    return std::string(status_code_name(code_)) + ": " + message_;
  }
  /// Returns a copy whose message is prefixed with `context` and ": " (for adding a file name or a step).
  Status with_context(std::string_view context) const {
    if (is_ok()) return *this;
    return Status(code_, std::string(context) + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value of type T, or an error Status. Accessing value() of an error is a programming error (asserts).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor): natural `return value;`
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(data_).is_ok() && "a Result built from a Status must hold an error");
  }

  bool is_ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return is_ok(); }

  /// The error (or ok when a value is held).
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(data_); }

  T& value() & {
    assert(is_ok());
    return std::get<T>(data_);
  }
  const T& value() const& {
    assert(is_ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    assert(is_ok());
    return std::get<T>(std::move(data_));
  }

  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace photon

/// Returns the Status of `expr` from the enclosing function when it is an error.
#define PHOTON_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::photon::Status photon_status_ = (expr);           \
    if (!photon_status_.is_ok()) return photon_status_; \
  } while (0)

#define PHOTON_CONCAT_INNER_(a, b) a##b
#define PHOTON_CONCAT_(a, b) PHOTON_CONCAT_INNER_(a, b)
// `tmp` and `lhs` are a name and a declaration, which parentheses would break.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define PHOTON_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

/// `PHOTON_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define PHOTON_ASSIGN_OR_RETURN(lhs, expr) \
  PHOTON_ASSIGN_OR_RETURN_IMPL_(PHOTON_CONCAT_(photon_result_, __LINE__), lhs, expr)
