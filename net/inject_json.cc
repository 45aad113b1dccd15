#include "net/inject_json.h"

#include <nlohmann/json.hpp>

namespace hutch::net {

namespace {

constexpr size_t kMaxRules = 256;
constexpr size_t kMaxEntries = 256;  // hosts or headers of one rule

std::unexpected<Error> invalid(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "inject", std::move(detail));
}

Result<std::string> string_field(const nlohmann::json& value, const std::string& where) {
  if (!value.is_string()) return invalid(where + " is not a string");
  return value.get<std::string>();
}

Result<InjectHeader> parse_header(const std::string& name, const nlohmann::json& value,
                                  const std::string& where) {
  InjectHeader header{.name = name, .secret = "", .prefix = ""};
  if (value.is_string()) {
    header.secret = value.get<std::string>();
    return header;
  }
  if (!value.is_object()) return invalid(where + " is neither a secret name nor an object");
  for (const auto& [key, field] : value.items()) {
    if (key == "secret") {
      header.secret = HUTCH_TRY(string_field(field, where + ".secret"));
    } else if (key == "prefix") {
      header.prefix = HUTCH_TRY(string_field(field, where + ".prefix"));
    } else {
      return invalid(where + ": unknown key \"" + key + "\" (secret, prefix)");
    }
  }
  if (!value.contains("secret")) return invalid(where + ": \"secret\" is missing");
  return header;
}

Result<InjectRule> parse_rule_object(const nlohmann::json& entry, const std::string& where) {
  if (!entry.is_object()) return invalid(where + " is not an object");
  InjectRule rule;
  for (const auto& [key, value] : entry.items()) {
    const std::string field = where + "." + key;
    if (key == "match_hosts") {
      if (!value.is_array()) return invalid(field + " is not an array of strings");
      if (value.size() > kMaxEntries) return invalid(field + " has too many hosts");
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string host_where = field + "[" + std::to_string(i) + "]";
        const std::string text = HUTCH_TRY(string_field(value[i], host_where));
        auto host = parse_rule(text);
        if (!host) return invalid(host_where + " \"" + text + "\": " + host.error().detail);
        rule.match_hosts.push_back(std::move(*host));
      }
    } else if (key == "method") {
      rule.method = HUTCH_TRY(string_field(value, field));
    } else if (key == "path_prefix") {
      rule.path_prefix = HUTCH_TRY(string_field(value, field));
    } else if (key == "headers") {
      if (!value.is_object()) return invalid(field + " is not an object");
      if (value.size() > kMaxEntries) return invalid(field + " has too many headers");
      for (const auto& [name, header] : value.items()) {
        rule.headers.push_back(HUTCH_TRY(parse_header(name, header, field + " \"" + name + "\"")));
      }
    } else {
      return invalid(where + ": unknown key \"" + key +
                     "\" (match_hosts, method, path_prefix, headers)");
    }
  }
  if (auto valid = validate_rule(rule); !valid) {
    return invalid(where + ": " + valid.error().detail);
  }
  return rule;
}

}  // namespace

Result<std::vector<InjectRule>> parse_inject_json(std::string_view json) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    return invalid(std::string("not JSON: ") + e.what());
  }
  if (!document.is_array()) return invalid("not a JSON array of rules");
  if (document.size() > kMaxRules) {
    return invalid("more than " + std::to_string(kMaxRules) + " rules");
  }
  std::vector<InjectRule> rules;
  for (size_t i = 0; i < document.size(); ++i) {
    rules.push_back(HUTCH_TRY(parse_rule_object(document[i], "inject[" + std::to_string(i) + "]")));
  }
  return rules;
}

std::string inject_to_json(const std::vector<InjectRule>& rules) {
  nlohmann::json document = nlohmann::json::array();
  for (const InjectRule& rule : rules) {
    nlohmann::json entry = {{"match_hosts", nlohmann::json::array()},
                            {"headers", nlohmann::json::object()}};
    for (const Rule& host : rule.match_hosts) entry["match_hosts"].push_back(host.to_string());
    if (rule.method) entry["method"] = *rule.method;
    if (rule.path_prefix) entry["path_prefix"] = *rule.path_prefix;
    for (const InjectHeader& header : rule.headers) {
      entry["headers"][header.name] = {{"secret", header.secret}, {"prefix", header.prefix}};
    }
    document.push_back(std::move(entry));
  }
  return document.dump();
}

}  // namespace hutch::net
