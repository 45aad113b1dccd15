#include "net/policy_json.h"

#include <nlohmann/json.hpp>

namespace hutch::net {

namespace {

constexpr size_t kMaxRules = 4096;

std::unexpected<Error> invalid(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "network policy", std::move(detail));
}

Result<std::vector<Rule>> parse_rules(const nlohmann::json& list, std::string_view key) {
  if (!list.is_array()) return invalid("\"" + std::string(key) + "\" is not an array of strings");
  if (list.size() > kMaxRules) {
    return invalid("\"" + std::string(key) + "\" has more than " + std::to_string(kMaxRules) +
                   " rules");
  }
  std::vector<Rule> rules;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!list[i].is_string()) return invalid(where + " is not a string");
    const auto& text = list[i].get_ref<const std::string&>();
    auto rule = parse_rule(text);
    if (!rule) return invalid(where + " \"" + text + "\": " + rule.error().detail);
    rules.push_back(std::move(*rule));
  }
  return rules;
}

}  // namespace

Result<Policy> parse_policy_json(std::string_view json) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    return invalid(std::string("not JSON: ") + e.what());
  }
  if (!document.is_object()) return invalid("not a JSON object");
  for (const auto& [key, value] : document.items()) {
    if (key != "mode" && key != "allow" && key != "deny") {
      return invalid("unknown key \"" + key + "\" (mode, allow, deny)");
    }
  }
  Policy policy;
  const auto mode = document.find("mode");
  if (mode == document.end())
    return invalid("\"mode\" is missing (none, loopback, filtered, open)");
  if (!mode->is_string()) return invalid("\"mode\" is not a string");
  const auto parsed = parse_mode(mode->get_ref<const std::string&>());
  if (!parsed) {
    return invalid("unknown mode \"" + mode->get<std::string>() +
                   "\" (none, loopback, filtered, open)");
  }
  policy.mode = *parsed;
  if (auto allow = document.find("allow"); allow != document.end()) {
    policy.allow = HUTCH_TRY(parse_rules(*allow, "allow"));
  }
  if (auto deny = document.find("deny"); deny != document.end()) {
    policy.deny = HUTCH_TRY(parse_rules(*deny, "deny"));
  }
  return policy;
}

std::string policy_to_json(const Policy& policy) {
  nlohmann::json document = {{"mode", mode_name(policy.mode)},
                             {"allow", nlohmann::json::array()},
                             {"deny", nlohmann::json::array()}};
  for (const Rule& rule : policy.allow) document["allow"].push_back(rule.to_string());
  for (const Rule& rule : policy.deny) document["deny"].push_back(rule.to_string());
  return document.dump();
}

}  // namespace hutch::net
