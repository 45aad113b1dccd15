// Typed field accessors of request bodies (throwing ApiError 400) and the response encoder.
#include "daemon/codec/fields.h"

#include <cmath>

#include "daemon/errors.h"

namespace hutch::daemon {

using nlohmann::json;

void check_known_fields(const json& body, const std::set<std::string_view>& known) {
  for (const auto& [key, value] : body.items()) {
    if (!known.contains(key)) throw bad_request("unknown field \"" + key + "\"");
  }
}

void require_object(const json& body, const std::string& what) {
  if (!body.is_object()) throw bad_request(what + " must be a JSON object");
}

std::map<std::string, std::string> string_map(const json& body, const char* name) {
  std::map<std::string, std::string> out;
  const json* value = optional_field(body, name);
  if (value == nullptr) return out;
  if (!value->is_object()) throw bad_request(std::string(name) + " must be an object of strings");
  for (const auto& [key, item] : value->items()) {
    if (!item.is_string()) throw bad_request(std::string(name) + "." + key + " must be a string");
    check_no_nul(key, std::string(name) + " key");
    check_no_nul(item.get_ref<const std::string&>(), std::string(name) + "." + key);
    out[key] = item.get<std::string>();
  }
  return out;
}

std::optional<double> optional_number(const json& body, const char* name) {
  const json* value = optional_field(body, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) throw bad_request(std::string(name) + " must be a number");
  double number = value->get<double>();
  if (!std::isfinite(number)) throw bad_request(std::string(name) + " must be finite");
  return number;
}

void check_absolute_path(const std::string& path, const std::string& field) {
  check_no_nul(path, field);
  if (path.empty() || path[0] != '/' || path.size() > 4096)
    throw bad_request(field + " must be an absolute path");
}

std::vector<std::string> string_array(const json& value, const std::string& field) {
  if (!value.is_array()) throw bad_request(field + " must be an array of strings");
  std::vector<std::string> out;
  for (const json& item : value) {
    if (!item.is_string()) throw bad_request(field + " must be an array of strings");
    check_no_nul(item.get_ref<const std::string&>(), field);
    out.push_back(item.get<std::string>());
  }
  return out;
}

const json* optional_field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string string_field(const json& body, const char* name) {
  auto value = optional_string(body, name);
  if (!value) throw bad_request(std::string(name) + " is required");
  return *value;
}

std::optional<std::string> optional_string(const json& body, const char* name) {
  const json* value = optional_field(body, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) throw bad_request(std::string(name) + " must be a string");
  return value->get<std::string>();
}

std::optional<uint64_t> optional_uint(const json& body, const char* name) {
  const json* value = optional_field(body, name);
  if (value == nullptr) return std::nullopt;
  // Parsed text gives non-negative integers as unsigned; a json built in code may hold them
  // signed.
  if (value->is_number_integer() && value->get<int64_t>() >= 0) return value->get<uint64_t>();
  if (!value->is_number_unsigned()) {
    if (value->is_number_float()) {
      double d = value->get<double>();
      if (std::isfinite(d) && d >= 0 && d == std::floor(d) && d < 9e15)
        return static_cast<uint64_t>(d);
    }
    throw bad_request(std::string(name) + " must be a non-negative integer");
  }
  return value->get<uint64_t>();
}

std::optional<bool> optional_bool(const json& body, const char* name) {
  const json* value = optional_field(body, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) throw bad_request(std::string(name) + " must be true or false");
  return value->get<bool>();
}

void check_no_nul(std::string_view value, const std::string& field) {
  if (value.find('\0') != std::string_view::npos) throw bad_request(field + " contains a NUL byte");
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace hutch::daemon
