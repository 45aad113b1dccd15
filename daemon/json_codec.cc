#include "daemon/json_codec.h"

#include <signal.h>
#include <time.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#include "daemon/errors.h"

namespace hutch::daemon {
namespace {

constexpr uint64_t kMaxSeconds = 10'000'000;  // ~115 days: keeps every chrono conversion exact

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

bool valid_hostname(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') return false;
  }
  return true;
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

}  // namespace

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

bool valid_env_key(std::string_view key) {
  if (key.empty() || key.size() > 256) return false;
  if (!std::isalpha(static_cast<unsigned char>(key[0])) && key[0] != '_') return false;
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

void check_layer_name(const std::string& name, const std::string& field, size_t max_length) {
  auto allowed = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (!first && (c == '.' || c == '_' || c == '-'));
  };
  bool valid = !name.empty() && name.size() <= max_length;
  for (size_t i = 0; valid && i < name.size(); ++i) valid = allowed(name[i], i == 0);
  if (!valid) {
    throw bad_request(field + " \"" + name + "\" is not [a-z0-9][a-z0-9._-]{0," +
                      std::to_string(max_length - 1) + "}");
  }
}

SandboxConfig parse_sandbox_config(const json& body, ConfigSource source) {
  SandboxConfig config;
  if (body.is_null()) return config;
  require_object(body, "the request body");
  std::set<std::string_view> known = {"rootfs",
                                      "recipe",
                                      "limits",
                                      "env",
                                      "labels",
                                      "idle_ttl_seconds",
                                      "max_lifetime_seconds",
                                      "default_timeout_seconds",
                                      "network",
                                      "hostname",
                                      "workdir"};
  if (source == ConfigSource::kRecord) known.insert("layers");
  check_known_fields(body, known);
  if (auto rootfs = optional_string(body, "rootfs")) {
    if (rootfs->starts_with("recipe:")) {
      config.recipe = rootfs->substr(7);
      check_layer_name(config.recipe, "rootfs recipe:NAME");
    } else {
      if (*rootfs != "host") check_absolute_path(*rootfs, "rootfs");
      config.rootfs = *rootfs;
    }
  }
  if (auto recipe = optional_string(body, "recipe")) {
    check_layer_name(*recipe, "recipe");
    if (!config.recipe.empty() && config.recipe != *recipe)
      throw bad_request("recipe and rootfs recipe:NAME disagree");
    config.recipe = *recipe;
  }
  if (const json* layers = optional_field(body, "layers"))
    config.layer_digests = string_array(*layers, "layers");
  if (const json* limits = optional_field(body, "limits")) {
    require_object(*limits, "limits");
    check_known_fields(*limits, {"memory_bytes", "pids", "cpus", "cpu_weight", "disk_bytes"});
    config.limits.memory_bytes = optional_uint(*limits, "memory_bytes");
    if (config.limits.memory_bytes && *config.limits.memory_bytes < (4u << 20))
      throw bad_request("limits.memory_bytes must be at least 4 MiB");
    config.limits.pids = optional_uint(*limits, "pids");
    if (config.limits.pids && (*config.limits.pids < 1 || *config.limits.pids > 4194304))
      throw bad_request("limits.pids must be 1..4194304");
    config.limits.cpus = optional_number(*limits, "cpus");
    if (config.limits.cpus && (*config.limits.cpus < 0.001 || *config.limits.cpus > 4096))
      throw bad_request("limits.cpus must be 0.001..4096");
    if (auto weight = optional_uint(*limits, "cpu_weight")) {
      if (*weight < 1 || *weight > 10000) throw bad_request("limits.cpu_weight must be 1..10000");
      config.limits.cpu_weight = static_cast<uint32_t>(*weight);
    }
    config.limits.disk_bytes = optional_uint(*limits, "disk_bytes");
    if (config.limits.disk_bytes && *config.limits.disk_bytes < (1u << 20))
      throw bad_request("limits.disk_bytes must be at least 1 MiB");
  }
  config.env = string_map(body, "env");
  for (const auto& [key, value] : config.env) {
    if (!valid_env_key(key))
      throw bad_request("env key \"" + key + "\" is not [A-Za-z_][A-Za-z0-9_]*");
  }
  config.labels = string_map(body, "labels");
  for (const auto& [key, value] : config.labels) {
    if (key.empty() || key.size() > 128 || key.find('=') != std::string::npos ||
        value.size() > 1024)
      throw bad_request("label \"" + key +
                        "\": keys are 1-128 bytes without '=', values at most 1024");
  }
  if (auto ttl = optional_uint(body, "idle_ttl_seconds")) {
    if (*ttl > kMaxSeconds) throw bad_request("idle_ttl_seconds is too large");
    config.idle_ttl_seconds = *ttl;
  }
  if (auto lifetime = optional_uint(body, "max_lifetime_seconds")) {
    if (*lifetime == 0 || *lifetime > kMaxSeconds)
      throw bad_request("max_lifetime_seconds must be 1.." + std::to_string(kMaxSeconds));
    config.max_lifetime_seconds = *lifetime;
  }
  if (auto timeout = optional_uint(body, "default_timeout_seconds")) {
    if (*timeout > kMaxSeconds) throw bad_request("default_timeout_seconds is too large");
    config.default_timeout_seconds = *timeout;
  }
  if (auto network = optional_string(body, "network")) {
    if (*network != "none" && *network != "loopback")
      throw bad_request("network must be \"none\" or \"loopback\"");
    config.network = *network;
  }
  if (auto hostname = optional_string(body, "hostname")) {
    if (!valid_hostname(*hostname)) throw bad_request("hostname must be 1-64 of [A-Za-z0-9.-]");
    config.hostname = *hostname;
  }
  if (auto workdir = optional_string(body, "workdir")) {
    check_absolute_path(*workdir, "workdir");
    config.workdir = *workdir;
  }
  return config;
}

json config_to_json(const SandboxConfig& config) {
  json limits = json::object();
  if (config.limits.memory_bytes) limits["memory_bytes"] = *config.limits.memory_bytes;
  if (config.limits.pids) limits["pids"] = *config.limits.pids;
  if (config.limits.cpus) limits["cpus"] = *config.limits.cpus;
  if (config.limits.cpu_weight) limits["cpu_weight"] = *config.limits.cpu_weight;
  if (config.limits.disk_bytes) limits["disk_bytes"] = *config.limits.disk_bytes;
  json out = {
      {"rootfs", config.rootfs},
      {"limits", limits},
      {"env", config.env},
      {"labels", config.labels},
      {"idle_ttl_seconds", config.idle_ttl_seconds},
      {"max_lifetime_seconds",
       config.max_lifetime_seconds ? json(*config.max_lifetime_seconds) : json(nullptr)},
      {"default_timeout_seconds", config.default_timeout_seconds},
      {"network", config.network},
      {"hostname", config.hostname},
      {"workdir", config.workdir},
  };
  if (!config.recipe.empty()) out["recipe"] = config.recipe;
  if (!config.layer_digests.empty()) out["layers"] = config.layer_digests;
  return out;
}

SandboxSpec build_spec(const SandboxConfig& config, const std::string& state_dir) {
  SandboxSpec spec;
  if (config.rootfs != "host") spec.lower_dirs = {config.rootfs};
  spec.layers = config.layer_images;
  spec.env = exec_environment(config.env, {});
  spec.workdir = config.workdir;
  spec.hostname = config.hostname;
  spec.net = config.network == "none" ? NetMode::kNone : NetMode::kLoopback;
  if (config.limits.disk_bytes) spec.disk_bytes = *config.limits.disk_bytes;
  spec.limits.memory_bytes = config.limits.memory_bytes;
  spec.limits.pids = config.limits.pids;
  spec.limits.cpus = config.limits.cpus;
  spec.limits.cpu_weight = config.limits.cpu_weight;
  spec.state_dir = state_dir;
  // SandboxRegistry::sweep_stale_cgroups does it at start and then every minute.
  spec.sweep_stale_cgroups = false;
  return spec;
}

ExecOptions parse_exec_request(const json& body, ExecFlavor flavor) {
  require_object(body, "the request body");
  ExecOptions options;
  if (flavor == ExecFlavor::kPlain) {
    check_known_fields(body, {"argv", "command", "workdir", "env", "stdin", "timeout_seconds",
                              "timeout", "max_output_bytes", "stream", "background"});
    const json* argv = optional_field(body, "argv");
    auto command = optional_string(body, "command");
    if ((argv != nullptr) == command.has_value())
      throw bad_request("give exactly one of argv (an array) and command (a string)");
    if (argv != nullptr) {
      options.argv = string_array(*argv, "argv");
      if (options.argv.empty() || options.argv[0].empty())
        throw bad_request("argv must be a non-empty array with a non-empty argv[0]");
    } else {
      check_no_nul(*command, "command");
      if (command->empty()) throw bad_request("command must not be empty");
      options.argv = {"/bin/sh", "-c", *command};
    }
  } else {
    check_known_fields(
        body, {"command", "script", "args", "workdir", "env", "stdin", "timeout_seconds", "timeout",
               "max_output_bytes", "stream", "background"});
    auto script = optional_string(body, "script");
    auto command = optional_string(body, "command");
    if (script.has_value() == command.has_value())
      throw bad_request("give exactly one of command and script");
    std::string text = script ? *script : *command;
    check_no_nul(text, script ? "script" : "command");
    if (flavor == ExecFlavor::kBash) {
      options.argv = {"bash", "-c", text, "bash"};
    } else {
      options.argv = {"python3", "-c", text};
    }
    if (const json* args = optional_field(body, "args")) {
      for (std::string& arg : string_array(*args, "args")) options.argv.push_back(std::move(arg));
    }
  }
  if (auto workdir = optional_string(body, "workdir")) {
    check_absolute_path(*workdir, "workdir");
    options.workdir = *workdir;
  }
  options.env = string_map(body, "env");
  for (const auto& [key, value] : options.env) {
    if (!valid_env_key(key))
      throw bad_request("env key \"" + key + "\" is not [A-Za-z_][A-Za-z0-9_]*");
  }
  // stdin is data: NUL bytes are allowed there.
  options.stdin_data = optional_string(body, "stdin");
  auto timeout = optional_number(body, "timeout_seconds");
  if (!timeout) timeout = optional_number(body, "timeout");
  if (timeout) {
    if (*timeout < 0) throw bad_request("timeout_seconds must be >= 0");
    if (*timeout > kMaxSeconds) throw bad_request("timeout_seconds is too large");
    options.timeout_seconds = *timeout;
  }
  if (auto cap = optional_uint(body, "max_output_bytes")) {
    if (*cap == 0 || *cap > (1ull << 30)) throw bad_request("max_output_bytes must be 1..1 GiB");
    options.max_output_bytes = *cap;
  }
  options.stream = optional_bool(body, "stream").value_or(false);
  options.background = optional_bool(body, "background").value_or(false);
  if (options.stream && options.background)
    throw bad_request("stream and background exclude each other");
  return options;
}

std::vector<std::string> exec_environment(const std::map<std::string, std::string>& sandbox_env,
                                          const std::map<std::string, std::string>& request_env) {
  std::map<std::string, std::string> merged = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", "/root"},
      {"TERM", "xterm"},
      {"LANG", "C.UTF-8"},
  };
  for (const auto& [key, value] : sandbox_env) merged[key] = value;
  for (const auto& [key, value] : request_env) merged[key] = value;
  std::vector<std::string> env;
  env.reserve(merged.size());
  for (const auto& [key, value] : merged) env.push_back(key + "=" + value);
  return env;
}

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

std::string iso8601(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  return iso8601_ns(duration_cast<nanoseconds>(time.time_since_epoch()).count());
}

std::string iso8601_ns(int64_t ns_since_epoch) {
  time_t seconds = static_cast<time_t>(ns_since_epoch / 1'000'000'000);
  int64_t millis = (ns_since_epoch % 1'000'000'000) / 1'000'000;
  if (millis < 0) {
    millis += 1000;
    --seconds;
  }
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char text[96];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return text;
}

std::optional<std::chrono::system_clock::time_point> parse_iso8601(const std::string& text) {
  struct tm tm {};
  int millis = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &millis) != 7)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t seconds = timegm(&tm);
  // system_clock counts nanoseconds in an int64_t: only years 1678..2262 fit (fuzz/ found it).
  constexpr time_t kMaxSeconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::duration::max())
          .count() -
      1;
  if (seconds > kMaxSeconds || seconds < -kMaxSeconds) return std::nullopt;
  return std::chrono::system_clock::from_time_t(seconds) + std::chrono::milliseconds(millis);
}

std::string base64_encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    uint32_t n = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8) | uint8_t(data[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i + 1 == data.size()) {
    uint32_t n = uint8_t(data[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == data.size()) {
    uint32_t n = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t buffer = 0;
  int bits = 0;
  size_t padding = 0;
  for (char c : text) {
    if (c == '=') {
      ++padding;
      continue;
    }
    if (c == '\n' || c == '\r') continue;
    if (padding > 0) return std::nullopt;  // data after padding
    int v = value(c);
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  if (padding > 2 || bits >= 6) return std::nullopt;
  return out;
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace hutch::daemon
