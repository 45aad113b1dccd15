// Base64 of file contents in the API (upload, download): RFC 4648.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace hutch::daemon {

std::string base64_encode(std::string_view data);
// Accepts the standard and the URL-safe alphabet, with or without padding, and line breaks;
// nullopt for anything else (data after padding, a stray character).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace hutch::daemon
