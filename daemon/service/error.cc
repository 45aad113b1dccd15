#include "daemon/service/error.h"

#include "runtime/live_sandbox.h"

namespace hutch::daemon::service {

std::unexpected<ServiceError> service_error(ErrorKind kind, std::string code, std::string message) {
  return std::unexpected(ServiceError{kind, std::move(code), std::move(message)});
}

ServiceError from_runtime(const Error& error) {
  if (error.step == kOutdatedExecStep)
    return {ErrorKind::kConflict, "sandbox_outdated", error.message()};
  switch (error.kind) {
    case ErrorKind::kInvalid:
      return {error.kind, "bad_request", error.message()};
    case ErrorKind::kNotFound:
      return {error.kind, "not_found", error.message()};
    case ErrorKind::kConflict:
      return {error.kind, "conflict", error.message()};
    case ErrorKind::kUnsupported:
      return {error.kind, "unsupported", error.message()};
    case ErrorKind::kFailure:
      break;
  }
  return {ErrorKind::kFailure, "runtime_error", error.message()};
}

}  // namespace hutch::daemon::service
