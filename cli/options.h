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

// "K=V" with a POSIX-ish name ([A-Za-z_][A-Za-z0-9_]*) and no NUL.
Result<std::string> parse_env(std::string_view text);

// The default environment plus `overrides` (later wins; entries that are not K=V are ignored:
// validate them with parse_env first); never the host's environment.
std::vector<std::string> sandbox_environment(const std::vector<std::string>& overrides,
                                             uint32_t uid);

}  // namespace hutch::cli
