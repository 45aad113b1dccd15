// Path strings: validation and joining, no filesystem access.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch {

// "/a/b": absolute, no empty, "." or ".." components, no trailing slash, no NUL. "/" is normal.
bool is_normal_absolute(std::string_view path);

// "/a/b" -> "/a"; "/a" -> "/".
std::string parent_path(std::string_view path);

// join_path("/a", "b") -> "/a/b"; join_path("/", "b") -> "/b"; join_path("/r", "/x") -> "/r/x".
std::string join_path(std::string_view base, std::string_view relative);

}  // namespace hutch
