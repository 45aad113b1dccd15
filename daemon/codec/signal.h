// Signal names in the API (POST .../processes/{pid}/signal).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace hutch::daemon {

// "TERM", "SIGTERM", "15" or 15; nullopt when unknown.
std::optional<int> parse_signal(const nlohmann::json& value);

}  // namespace hutch::daemon
