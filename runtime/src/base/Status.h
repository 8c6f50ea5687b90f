//===- Status.h - Runtime error values ----------------------------*- C++ -*-===//
//
// kiln::rt::Status is the runtime's internal error value (errors are values,
// STYLE.md section 5): a code from api.h plus a human-readable message. The C
// API turns a failed Status into a heap kiln_rt_status_t.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_BASE_STATUS_H
#define KILN_RUNTIME_BASE_STATUS_H

#include "kiln_rt/api.h"

#include <string>
#include <utility>

namespace kiln::rt {

/// An error code and message; default-constructed is success.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(kiln_rt_status_code_t code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == KILN_RT_OK; }
  explicit operator bool() const { return !isOk(); } ///< true on error
  kiln_rt_status_code_t code() const { return code_; }
  const std::string &message() const { return message_; }

  /// Converts to the C API form (NULL on success); caller owns the result.
  kiln_rt_status_t release() const;

private:
  kiln_rt_status_code_t code_ = KILN_RT_OK;
  std::string message_;
};

inline Status invalidArgument(std::string m) {
  return Status(KILN_RT_INVALID_ARGUMENT, std::move(m));
}
inline Status notFound(std::string m) { return Status(KILN_RT_NOT_FOUND, std::move(m)); }
inline Status dataLoss(std::string m) { return Status(KILN_RT_DATA_LOSS, std::move(m)); }
inline Status unimplemented(std::string m) {
  return Status(KILN_RT_UNIMPLEMENTED, std::move(m));
}
inline Status outOfRange(std::string m) { return Status(KILN_RT_OUT_OF_RANGE, std::move(m)); }
inline Status internalError(std::string m) { return Status(KILN_RT_INTERNAL, std::move(m)); }
inline Status resourceExhausted(std::string m) {
  return Status(KILN_RT_RESOURCE_EXHAUSTED, std::move(m));
}
inline Status failedPrecondition(std::string m) {
  return Status(KILN_RT_FAILED_PRECONDITION, std::move(m));
}
inline Status permissionDenied(std::string m) {
  return Status(KILN_RT_PERMISSION_DENIED, std::move(m));
}

/// The result of a C backend table's call (the CUDA executor, the
/// communicator): 0 is ok; otherwise a KILN_RT_* code (anything else is
/// KILN_RT_INTERNAL) and the NUL-terminated message the backend wrote into
/// its fixed `capacity`-byte buffer, or `fallback` when it wrote none.
inline Status backendStatus(int32_t code, const char *message, size_t capacity,
                            const std::string &fallback) {
  if (code == 0)
    return Status::ok();
  size_t n = 0;
  while (n < capacity && message[n])
    ++n;
  const kiln_rt_status_code_t c = code > 0 && code <= KILN_RT_DEADLINE_EXCEEDED
                                      ? kiln_rt_status_code_t(code)
                                      : KILN_RT_INTERNAL;
  return Status(c, n ? std::string(message, n) : fallback);
}

} // namespace kiln::rt

#define KILN_RT_RETURN_IF_ERROR(expr)                                          \
  do {                                                                         \
    ::kiln::rt::Status kilnStatus_ = (expr);                                   \
    if (!kilnStatus_.isOk())                                                   \
      return kilnStatus_;                                                      \
  } while (0)

#endif // KILN_RUNTIME_BASE_STATUS_H
