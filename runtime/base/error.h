// Runtime errors: which step failed, on what, the errno it failed with, and its kind.
#pragma once

#include <cerrno>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace hutch {

// What the caller can do about an error. The daemon maps it to a status once (404, 400, 409, 501,
// 500); everything else only reads step, detail and err.
enum class ErrorKind : uint8_t {
  kFailure,      // the runtime or the kernel failed: nothing the caller sent is wrong
  kInvalid,      // the caller's input is malformed or refused
  kNotFound,     // what the caller named does not exist
  kConflict,     // it exists, but its state forbids the operation (busy, paused, taken)
  kUnsupported,  // this kernel or host cannot do it
};

struct Error {
  std::string step;    // the syscall or operation: "mount", "clone3", "seccomp compile"
  std::string detail;  // the arguments that matter: "overlay on /root", "/proc/42/uid_map"
  int err = 0;         // errno, 0 when the failure is not a syscall's
  ErrorKind kind = ErrorKind::kFailure;

  // "mount(overlay on /root): Invalid argument", or "step: detail" when err is 0.
  std::string message() const;
};

template <class T>
using Result = std::expected<T, Error>;

// An Error for a failed syscall; reads errno unless given.
std::unexpected<Error> sys_error(std::string_view step, std::string detail, int err = errno);
// An Error that is not a syscall's (bad input, a broken invariant).
std::unexpected<Error> plain_error(std::string_view step, std::string detail);
// An Error of a given kind that is not a syscall's: kind_error(ErrorKind::kNotFound, "layer", d).
std::unexpected<Error> kind_error(ErrorKind kind, std::string_view step, std::string detail);

namespace detail {
// By value: the expected it came from dies at the end of the statement expression.
template <class E>
typename std::remove_cvref_t<E>::value_type try_value(E&& result) {
  if constexpr (std::is_void_v<typename std::remove_cvref_t<E>::value_type>)
    return;
  else
    return std::move(*result);
}
}  // namespace detail

}  // namespace hutch

// Propagates an expected's error to the caller, else yields its value (nothing for void):
//   auto fd = HUTCH_TRY(open_dir(path));   HUTCH_TRY(write_all(fd, data));
// A GNU statement expression (CMAKE_CXX_EXTENSIONS is on; g++ and clang both have them), the one
// spelling for the `if (!r) return std::unexpected(r.error());` that every caller wrote by hand.
// The error converts into the caller's own error type, so it works for Result and FsResult alike.
#define HUTCH_TRY(...)                                                                    \
  ({                                                                                      \
    auto&& hutch_try_result_ = (__VA_ARGS__);                                             \
    if (!hutch_try_result_) return std::unexpected(std::move(hutch_try_result_).error()); \
    ::hutch::detail::try_value(std::move(hutch_try_result_));                             \
  })
