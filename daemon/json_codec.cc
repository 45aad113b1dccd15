// The API codec: sandbox configs and exec requests decoded and checked.
#include "daemon/json_codec.h"

#include <set>

#include "daemon/errors.h"
#include "net/policy_json.h"
#include "runtime/defaults.h"
#include "runtime/fs/paths.h"
#include "runtime/volumes/volume_store.h"

namespace hutch::daemon {
namespace {

constexpr uint64_t kMaxSeconds = 10'000'000;  // ~115 days: keeps every chrono conversion exact

}  // namespace

net::Policy parse_network(const json& network) {
  if (network.is_string()) {
    auto mode = net::parse_mode(network.get<std::string>());
    if (!mode)
      throw bad_request(
          "network must be \"none\", \"loopback\", \"filtered\", \"open\" or "
          "{\"mode\":...,\"allow\":[...],\"deny\":[...]}");
    return net::Policy{*mode, {}, {}, {}};
  }
  if (!network.is_object())
    throw bad_request(
        "network must be a mode string or {\"mode\":...,\"allow\":[...],\"deny\":[...]}");
  auto policy = net::parse_policy_json(network.dump());
  if (!policy) throw bad_request("network: " + policy.error().detail);
  const bool engaged = policy->mode == net::Mode::kFiltered || policy->mode == net::Mode::kOpen;
  if (!engaged && (!policy->allow.empty() || !policy->deny.empty() || !policy->inject.empty()))
    throw bad_request(
        "network: allow, deny and inject rules need mode \"filtered\" or \"open\" (mode \"" +
        std::string(net::mode_name(policy->mode)) + "\" has no egress to filter)");
  return std::move(*policy);
}

json network_to_json(const net::Policy& policy) { return json::parse(net::policy_to_json(policy)); }

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
                                      "workdir",
                                      "mounts",
                                      "volumes"};
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
  if (const json* mounts = optional_field(body, "mounts")) {
    if (!mounts->is_array()) throw bad_request("mounts must be an array");
    for (const json& entry : *mounts) {
      require_object(entry, "a mounts entry");
      check_known_fields(entry, {"source", "target", "readonly"});
      HostMount mount{string_field(entry, "source"), string_field(entry, "target"),
                      optional_bool(entry, "readonly").value_or(true)};
      check_absolute_path(mount.source, "mounts source");
      if (!is_normal_absolute(mount.target) || mount.target == "/")
        throw bad_request("mounts target \"" + mount.target +
                          "\" is not a normalized absolute path below /");
      config.mounts.push_back(std::move(mount));
    }
  }
  if (const json* volumes = optional_field(body, "volumes")) {
    if (!volumes->is_array()) throw bad_request("volumes must be an array");
    if (volumes->size() > kMaxVolumesPerSandbox)
      throw ApiError(400, "bad_volume",
                     "at most " + std::to_string(kMaxVolumesPerSandbox) + " volumes per sandbox");
    std::set<std::string> names, targets;
    for (const json& entry : *volumes) {
      require_object(entry, "a volumes entry");
      check_known_fields(entry, {"name", "target", "readonly", "shared"});
      SandboxVolume volume{string_field(entry, "name"), string_field(entry, "target"),
                           optional_bool(entry, "readonly").value_or(false),
                           optional_bool(entry, "shared").value_or(false)};
      if (auto named = check_volume_name(volume.name); !named)
        throw ApiError(400, "bad_volume",
                       "volume \"" + volume.name + "\": " + named.error().message());
      if (!is_normal_absolute(volume.target) || volume.target == "/")
        throw ApiError(
            400, "bad_volume",
            "volumes target \"" + volume.target + "\" is not a normalized absolute path below /");
      if (!names.insert(volume.name).second || !targets.insert(volume.target).second)
        throw ApiError(400, "bad_volume", "a volume or a target appears twice in volumes");
      config.volumes.push_back(std::move(volume));
    }
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
  if (const json* network = optional_field(body, "network"))
    config.network = parse_network(*network);
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
      {"network", network_to_json(config.network)},
      {"hostname", config.hostname},
      {"workdir", config.workdir},
  };
  if (!config.recipe.empty()) out["recipe"] = config.recipe;
  if (!config.layer_digests.empty()) out["layers"] = config.layer_digests;
  if (!config.mounts.empty()) {
    json mounts = json::array();
    for (const HostMount& mount : config.mounts)
      mounts.push_back(
          {{"source", mount.source}, {"target", mount.target}, {"readonly", mount.read_only}});
    out["mounts"] = mounts;
  }
  if (!config.volumes.empty()) {
    json volumes = json::array();
    for (const SandboxVolume& volume : config.volumes)
      volumes.push_back({{"name", volume.name},
                         {"target", volume.target},
                         {"readonly", volume.read_only},
                         {"shared", volume.shared}});
    out["volumes"] = volumes;
  }
  return out;
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

}  // namespace hutch::daemon
