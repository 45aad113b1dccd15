// Signal names and numbers of the API.
#include "daemon/codec/signal.h"

#include <signal.h>

#include <cctype>
#include <exception>
#include <map>
#include <string>

namespace hutch::daemon {

using nlohmann::json;

std::optional<int> parse_signal(const json& value) {
  if (value.is_number_integer()) {
    int64_t n = value.get<int64_t>();
    if (n >= 1 && n <= 64) return static_cast<int>(n);
    return std::nullopt;
  }
  if (!value.is_string()) return std::nullopt;
  std::string name = value.get<std::string>();
  if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
    try {
      size_t used = 0;
      int n = std::stoi(name, &used);
      if (used == name.size() && n >= 1 && n <= 64) return n;
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }
  if (name.starts_with("SIG")) name = name.substr(3);
  static const std::map<std::string, int> kNames = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
      {"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"CONT", SIGCONT},
      {"STOP", SIGSTOP}, {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH},
  };
  auto it = kNames.find(name);
  if (it == kNames.end()) return std::nullopt;
  return it->second;
}

}  // namespace hutch::daemon
