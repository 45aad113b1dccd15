// The daemon's error model: every failed request answers
// {"error":{"code":"…","message":"…"}} with a stable code and its HTTP status (docs/api.md).
// The service layer (daemon/service/) returns ServiceErrors; a route turns one into an ApiError
// with or_throw(), and the route wrapper in server.cc catches it (and nlohmann's exceptions,
// which become invalid_json) once, at the edge (STYLE.md rule 10).
#pragma once

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "daemon/service/error.h"
#include "runtime/base/error.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::daemon {

struct ApiError : std::exception {
  ApiError(int status, std::string code, std::string message)
      : status(status), code(std::move(code)), message(std::move(message)) {}
  const char* what() const noexcept override { return message.c_str(); }

  int status;
  std::string code;
  std::string message;
};

inline ApiError bad_request(std::string message) {
  return ApiError(400, "bad_request", std::move(message));
}
// The one mapping of error kinds to HTTP statuses: invalid 400, not found 404, conflict 409,
// unsupported 501, failure 500. The code and message are the service's.
int http_status(ErrorKind kind);
ApiError api_error(const service::ServiceError& error);
// A runtime failure: the status of its kind, with the runtime's own message (syscall, argument,
// errno).
inline ApiError runtime_failure(const Error& error) {
  return api_error(service::from_runtime(error));
}
// A route's call into the service or the runtime: the value, or the error thrown for the route
// wrapper to answer.
template <class T>
T or_throw(service::ServiceResult<T> result) {
  if (!result) throw api_error(result.error());
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}
template <class T>
T or_throw(Result<T> result) {
  if (!result) throw runtime_failure(result.error());
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}
// A files::FsError: the code is errc_name() (too_large is reported as payload_too_large and io
// as io_error), with the HTTP status of its family.
ApiError fs_failure(const files::FsError& error);

}  // namespace hutch::daemon
