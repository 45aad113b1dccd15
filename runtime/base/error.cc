#include "runtime/base/error.h"

#include <cstring>

namespace hutch {

std::string Error::message() const {
  if (err == 0) return detail.empty() ? step : step + ": " + detail;
  return step + "(" + detail + "): " + std::strerror(err);
}

std::unexpected<Error> sys_error(std::string_view step, std::string detail, int err) {
  return std::unexpected(Error{std::string(step), std::move(detail), err});
}

std::unexpected<Error> plain_error(std::string_view step, std::string detail) {
  return std::unexpected(Error{std::string(step), std::move(detail), 0});
}

std::unexpected<Error> kind_error(ErrorKind kind, std::string_view step, std::string detail) {
  return std::unexpected(Error{std::string(step), std::move(detail), 0, kind});
}

}  // namespace hutch
