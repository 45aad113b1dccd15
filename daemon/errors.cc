#include "daemon/errors.h"

namespace hutch::daemon {

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalid:
      return 400;
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kConflict:
      return 409;
    case ErrorKind::kUnsupported:
      return 501;
    case ErrorKind::kFailure:
      break;
  }
  return 500;
}

ApiError api_error(const service::ServiceError& error) {
  return ApiError(http_status(error.kind), error.code, error.message);
}

ApiError fs_failure(const files::FsError& error) {
  using files::Errc;
  switch (error.code) {
    case Errc::kInvalidPath:
      return ApiError(400, "invalid_path", error.message);
    case Errc::kNotFound:
      return ApiError(404, "file_not_found", error.message);
    case Errc::kPermissionDenied:
      return ApiError(403, "permission_denied", error.message);
    case Errc::kIsDirectory:
    case Errc::kNotDirectory:
    case Errc::kAlreadyExists:
    case Errc::kNotEmpty:
      return ApiError(409, std::string(files::errc_name(error.code)), error.message);
    case Errc::kNoMatch:
    case Errc::kNotUnique:
      return ApiError(422, std::string(files::errc_name(error.code)), error.message);
    case Errc::kTooLarge:
      return ApiError(413, "payload_too_large", error.message);
    case Errc::kNotRegularFile:
      return ApiError(409, "not_a_regular_file", error.message);
    case Errc::kNoSpace:
      return ApiError(507, "insufficient_storage", error.message);
    case Errc::kIo:
      break;
  }
  return ApiError(500, "io_error", error.message);
}

}  // namespace hutch::daemon
