// Times in the API: RFC 3339 / ISO-8601 UTC with milliseconds, 2026-11-30T16:29:05.123Z.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace hutch::daemon {

std::string iso8601(std::chrono::system_clock::time_point time);
std::string iso8601_ns(int64_t ns_since_epoch);
// nullopt unless exactly that form, within the years system_clock holds (1678..2262).
std::optional<std::chrono::system_clock::time_point> parse_iso8601(const std::string& text);

}  // namespace hutch::daemon
