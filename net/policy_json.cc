#include "net/policy_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "net/inject_json.h"

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

// An inject rule's host must be one the policy lets the sandbox reach: a rule never widens what
// the sandbox may reach, and a credential goes only where the policy already sends traffic.
bool reachable(const Policy& policy, const Rule& host) {
  if (host.kind == RuleKind::kName) return decide_name(policy, host.name).allowed;
  if (policy.mode == Mode::kOpen) return true;
  return std::ranges::any_of(policy.allow, [&](const Rule& allow) {
    return allow.kind == RuleKind::kSuffix &&
           (host.name == allow.name || host.name.ends_with("." + allow.name));
  });
}

Result<void> check_inject_hosts(const Policy& policy) {
  for (size_t i = 0; i < policy.inject.size(); ++i) {
    const auto& hosts = policy.inject[i].match_hosts;
    for (size_t j = 0; j < hosts.size(); ++j) {
      if (!reachable(policy, hosts[j])) {
        return invalid("inject[" + std::to_string(i) + "].match_hosts[" + std::to_string(j) +
                       "] \"" + hosts[j].to_string() +
                       "\" is not allowed by the policy: add it to \"allow\"");
      }
    }
  }
  return {};
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
    if (key != "mode" && key != "allow" && key != "deny" && key != "inject") {
      return invalid("unknown key \"" + key + "\" (mode, allow, deny, inject)");
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
  if (auto inject = document.find("inject"); inject != document.end()) {
    auto rules = parse_inject_json(inject->dump());
    if (!rules) return invalid(rules.error().detail);
    policy.inject = std::move(*rules);
    HUTCH_TRY(check_inject_hosts(policy));
  }
  return policy;
}

std::string policy_to_json(const Policy& policy) {
  nlohmann::json document = {{"mode", mode_name(policy.mode)},
                             {"allow", nlohmann::json::array()},
                             {"deny", nlohmann::json::array()}};
  for (const Rule& rule : policy.allow) document["allow"].push_back(rule.to_string());
  for (const Rule& rule : policy.deny) document["deny"].push_back(rule.to_string());
  // Only when there are rules, so a policy without injection reads as it always did.
  if (!policy.inject.empty())
    document["inject"] = nlohmann::json::parse(inject_to_json(policy.inject));
  return document.dump();
}

}  // namespace hutch::net
