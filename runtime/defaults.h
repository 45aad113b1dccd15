// Spec policy that both faces (the CLI and hutchd) apply, so that they cannot drift apart: the
// default environment of a sandbox's processes and the rules for hostnames and environment keys.
// prepare() checks the same rules, so a spec built by any other caller is held to them too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch {

inline constexpr std::string_view kDefaultHostname = "hutch";
inline constexpr size_t kMaxHostnameLength = 64;
inline constexpr size_t kMaxEnvKeyLength = 256;

// PATH (kDefaultSearchPath), HOME (/root for uid 0, else /home/user), TERM and LANG as "K=V".
std::vector<std::string> default_environment(uint32_t uid);

// default_environment(uid) with each "K=V" of overrides replacing its key or added, in order:
// later overrides win. Entries that are not K=V are the callers' to refuse first.
std::vector<std::string> sandbox_environment(uint32_t uid,
                                             const std::vector<std::string>& overrides);

// 1-64 of [A-Za-z0-9.-].
bool valid_hostname(std::string_view name);
// [A-Za-z_][A-Za-z0-9_]*, at most kMaxEnvKeyLength.
bool valid_env_key(std::string_view key);

// ErrorKind::kInvalid errors naming the offending value (steps "hostname" and "env").
Result<void> check_hostname(std::string_view name);
// "K=V" with a valid key and no NUL byte.
Result<void> check_env_entry(std::string_view entry);

}  // namespace hutch
