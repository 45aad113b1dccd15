// Runtime errors: which step failed, on what, and the errno it failed with.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <string_view>

namespace hutch {

struct Error {
  std::string step;    // the syscall or operation: "mount", "clone3", "seccomp compile"
  std::string detail;  // the arguments that matter: "overlay on /root", "/proc/42/uid_map"
  int err = 0;         // errno, 0 when the failure is not a syscall's

  // "mount(overlay on /root): Invalid argument", or "step: detail" when err is 0.
  std::string message() const;
};

template <class T>
using Result = std::expected<T, Error>;

// An Error for a failed syscall; reads errno unless given.
std::unexpected<Error> sys_error(std::string_view step, std::string detail, int err = errno);
// An Error that is not a syscall's (bad input, a broken invariant).
std::unexpected<Error> plain_error(std::string_view step, std::string detail);

}  // namespace hutch
