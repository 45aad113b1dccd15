// The network policy as the API and recipe.json will take it:
//   {"mode":"filtered","allow":["pypi.org","*.github.com","10.0.0.0/8","github.com:22"],
//    "deny":["evil.github.com"]}
// "mode" is required; "allow" and "deny" are optional arrays of rule strings (net/policy.h).
// Unknown keys are refused, so a misspelt "alow" never silently allows nothing.
#pragma once

#include <string>
#include <string_view>

#include "net/policy.h"
#include "runtime/base/error.h"

namespace hutch::net {

// kInvalid errors name the bad entry: `allow[2] "10.0.0.0/33": prefix length 33 is out of 0..32`.
Result<Policy> parse_policy_json(std::string_view json);
// The canonical JSON of a policy; parse_policy_json reads it back to an equal policy.
std::string policy_to_json(const Policy& policy);

}  // namespace hutch::net
