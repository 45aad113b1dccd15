// The service layer's errors: what went wrong (an ErrorKind), the API's stable code for it
// ("sandbox_not_found", "recipe_failed", see docs/api.md) and a message. No HTTP here: the kind
// becomes a status in one place, daemon/errors.cc (api_error), at the edge.
#pragma once

#include <expected>
#include <string>

#include "runtime/base/error.h"

namespace hutch::daemon::service {

struct ServiceError {
  ErrorKind kind = ErrorKind::kFailure;
  std::string code;  // stable, snake_case
  std::string message;
};

template <class T>
using ServiceResult = std::expected<T, ServiceError>;

std::unexpected<ServiceError> service_error(ErrorKind kind, std::string code, std::string message);

// A runtime Error as the API reports it: its message, and the code of its kind (runtime_error,
// bad_request, not_found, conflict, unsupported).
ServiceError from_runtime(const Error& error);

}  // namespace hutch::daemon::service
