// Typed access to the fields of a JSON request body, and the UTF-8-safe encoding of responses.
// The accessors throw ApiError(400) naming the field; a null field counts as absent.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace hutch::daemon {

const nlohmann::json* optional_field(const nlohmann::json& body, const char* name);
std::string string_field(const nlohmann::json& body, const char* name);
std::optional<std::string> optional_string(const nlohmann::json& body, const char* name);
std::optional<uint64_t> optional_uint(const nlohmann::json& body, const char* name);
std::optional<bool> optional_bool(const nlohmann::json& body, const char* name);
// A finite number.
std::optional<double> optional_number(const nlohmann::json& body, const char* name);
// An object of strings without NUL bytes (absent: empty).
std::map<std::string, std::string> string_map(const nlohmann::json& body, const char* name);
// An array of strings without NUL bytes.
std::vector<std::string> string_array(const nlohmann::json& value, const std::string& field);

// Refuses NUL bytes (names the field).
void check_no_nul(std::string_view value, const std::string& field);
// Refuses a field not in `known`.
void check_known_fields(const nlohmann::json& body, const std::set<std::string_view>& known);
void require_object(const nlohmann::json& body, const std::string& what);
// Absolute, at most 4096 bytes, no NUL byte.
void check_absolute_path(const std::string& path, const std::string& field);

// Serializes a response body. Invalid UTF-8 (command output, file contents) is replaced with
// U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& value);

}  // namespace hutch::daemon
