// Searching a directory tree for a string: where a secret must never be (hutchd's state dir:
// records, names files, background processes' output, layers).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "tests/common/command.h"

namespace hutch::testing {

// Whether `text` is in any regular file under `dir` (symlinks not followed).
inline bool tree_holds(const std::string& dir, std::string_view text) {
  std::error_code error;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, error)) {
    if (!entry.is_regular_file(error) || entry.is_symlink(error)) continue;
    if (read_file_or_empty(entry.path()).find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace hutch::testing
