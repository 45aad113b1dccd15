#include "runtime/defaults.h"

#include <algorithm>
#include <cctype>

#include "runtime/process/exec_search.h"

namespace hutch {

std::vector<std::string> default_environment(uint32_t uid) {
  return {
      "PATH=" + std::string(kDefaultSearchPath),
      uid == 0 ? "HOME=/root" : "HOME=/home/user",
      "TERM=xterm",
      "LANG=C.UTF-8",
  };
}

std::vector<std::string> sandbox_environment(uint32_t uid,
                                             const std::vector<std::string>& overrides) {
  std::vector<std::string> env = default_environment(uid);
  for (const std::string& entry : overrides) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string_view key = std::string_view(entry).substr(0, eq + 1);
    std::erase_if(env, [&](const std::string& existing) { return existing.starts_with(key); });
    env.push_back(entry);
  }
  return env;
}

bool valid_hostname(std::string_view name) {
  if (name.empty() || name.size() > kMaxHostnameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  });
}

bool valid_env_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxEnvKeyLength) return false;
  if (!std::isalpha(static_cast<unsigned char>(key[0])) && key[0] != '_') return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

Result<void> check_hostname(std::string_view name) {
  if (valid_hostname(name)) return {};
  return kind_error(ErrorKind::kInvalid, "hostname",
                    "\"" + std::string(name) + "\" is not 1-64 of [A-Za-z0-9.-]");
}

Result<void> check_env_entry(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq != std::string_view::npos && valid_env_key(entry.substr(0, eq)) &&
      entry.find('\0') == std::string_view::npos)
    return {};
  return kind_error(ErrorKind::kInvalid, "env",
                    "\"" + std::string(entry) +
                        "\" is not KEY=VALUE with KEY of [A-Za-z_][A-Za-z0-9_]* (at most 256)");
}

}  // namespace hutch
