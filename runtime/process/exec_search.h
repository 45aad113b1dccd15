// Finding the command to run: execvpe's search, but in the sandbox's PATH (glibc's execvpe would
// search hutch's own environment).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hutch {

inline constexpr std::string_view kDefaultSearchPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// The directories of a PATH value, in order; an empty entry means ".". Pure.
std::vector<std::string> split_search_path(std::string_view path);

// execve(file), searched in `dirs` (null-terminated) when `file` has no '/'. Only syscalls on
// this stack: safe in a vfork child. Returns only on failure, with the errno a shell reports:
// ENOENT when found nowhere, EACCES when found but not executable.
int exec_in_path(const char* file, char* const* argv, char* const* envp, const char* const* dirs);

}  // namespace hutch
