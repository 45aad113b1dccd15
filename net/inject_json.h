// The `inject` list as the API and recipe.json will take it, beside the policy's mode, allow
// and deny (net/policy_json.h):
//   [{"match_hosts": ["api.openai.com"], "method": "POST", "path_prefix": "/v1/",
//     "headers": {"Authorization": {"secret": "OPENAI_API_KEY", "prefix": "Bearer "},
//                 "OpenAI-Organization": "OPENAI_ORG"}}]
// A header's value is a secret's name, or {"secret", "prefix"}. "match_hosts" and "headers" are
// required; unknown keys are refused, so a misspelt "path_prefx" never silently widens a rule.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "net/inject.h"
#include "runtime/base/error.h"

namespace hutch::net {

// kInvalid errors name the entry: `inject[1].headers "Authorization": unknown key "prefx"`.
Result<std::vector<InjectRule>> parse_inject_json(std::string_view json);
// The canonical JSON; parse_inject_json reads it back to equal rules.
std::string inject_to_json(const std::vector<InjectRule>& rules);

}  // namespace hutch::net
