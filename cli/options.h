// Parsing of `hutch run` option values (pure, unit-tested). CLI11 parses argv; these turn
// its strings into the runtime's types.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/spec.h"

namespace hutch::cli {

// "30" (seconds), "1.5s", "500ms", "2m", "1h". Positive only.
Result<std::chrono::milliseconds> parse_duration(std::string_view text);

// "1048576", "64k", "512M", "1G" (powers of 1024). Positive only.
Result<uint64_t> parse_size(std::string_view text);

// "SRC:DST" or "SRC:DST:ro" / "SRC:DST:rw"; read-only unless "rw".
Result<BindMount> parse_bind(std::string_view text);

// "K=V" by the spec policy's rule (runtime/defaults.h check_env_entry: a POSIX-ish name
// [A-Za-z_][A-Za-z0-9_]*, no NUL), which prepare() applies again to every spec.
Result<std::string> parse_env(std::string_view text);

}  // namespace hutch::cli
