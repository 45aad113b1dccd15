// Request validation and encoding: JSON in, runtime types out, and back. Every check a request
// must pass lives here, so routes only call the runtime with values that are already valid.
// Parsing functions throw ApiError (400) for bad input.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/spec.h"

namespace hutch::daemon {

using nlohmann::json;

struct SandboxLimits {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
  std::optional<uint32_t> cpu_weight;
  std::optional<uint64_t> disk_bytes;
};

// What a client asked for in POST /v1/sandboxes, normalized (defaults filled in).
struct SandboxConfig {
  // "host" or an absolute host directory (a read-only lower layer); with a recipe, the recipe's
  // base (a request's "rootfs": "recipe:NAME" is moved to `recipe`).
  std::string rootfs = "host";
  // The recipe or snapshot tag the sandbox was created from ("" when none), and the layer ids
  // of its stack, topmost first, as resolved at creation (or at a rollback).
  std::string recipe;
  std::vector<std::string> layer_digests;
  // The erofs images of layer_digests (SandboxSpec::layers), filled in from the layer store by
  // whoever resolves `recipe`; not part of the JSON (a record keeps the digests only).
  std::vector<std::string> layer_images;
  SandboxLimits limits;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> labels;
  uint64_t idle_ttl_seconds = 600;
  std::optional<uint64_t> max_lifetime_seconds;
  uint64_t default_timeout_seconds = 600;
  std::string network = "loopback";  // "none" | "loopback"
  std::string hostname = "hutch";
  std::string workdir = "/";
};

// A request's body, or (kRecord) the "config" of a sandbox.json, which may also carry the
// resolved "layers" digests that a client may not set.
enum class ConfigSource { kRequest, kRecord };
SandboxConfig parse_sandbox_config(const json& body, ConfigSource source = ConfigSource::kRequest);
json config_to_json(const SandboxConfig& config);

// The runtime spec for a sandbox (seccomp excluded: the zygote loads the built-in program).
SandboxSpec build_spec(const SandboxConfig& config, const std::string& state_dir);

enum class ExecFlavor { kPlain, kBash, kPython };

struct ExecOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the request's, merged over the sandbox's later
  std::optional<std::string> workdir;
  std::optional<std::string> stdin_data;
  double timeout_seconds = 0;  // 0: the sandbox's default
  uint64_t max_output_bytes = 4ull << 20;
  bool stream = false;
  bool background = false;
};

ExecOptions parse_exec_request(const json& body, ExecFlavor flavor);

// The command's complete environment: defaults, then the sandbox's, then the request's.
std::vector<std::string> exec_environment(const std::map<std::string, std::string>& sandbox_env,
                                          const std::map<std::string, std::string>& request_env);

bool valid_env_key(std::string_view key);
// "TERM", "SIGTERM", "15" or 15; nullopt when unknown.
std::optional<int> parse_signal(const json& value);

// RFC 3339 / ISO-8601 UTC with milliseconds: 2026-11-30T16:29:05.123Z.
std::string iso8601(std::chrono::system_clock::time_point time);
std::string iso8601_ns(int64_t ns_since_epoch);
std::optional<std::chrono::system_clock::time_point> parse_iso8601(const std::string& text);

std::string base64_encode(std::string_view data);
std::optional<std::string> base64_decode(std::string_view text);

// Serializes a response body. Invalid UTF-8 (command output, file contents) is replaced with
// U+FFFD instead of throwing.
std::string dump_json(const json& value);

// Typed accessors that throw ApiError(400) naming the field.
const json* optional_field(const json& body, const char* name);
std::string string_field(const json& body, const char* name);
std::optional<std::string> optional_string(const json& body, const char* name);
std::optional<uint64_t> optional_uint(const json& body, const char* name);
std::optional<bool> optional_bool(const json& body, const char* name);
// Refuses NUL bytes (names the field).
void check_no_nul(std::string_view value, const std::string& field);

// Recipe, snapshot and checkpoint names: [a-z0-9][a-z0-9._-]{0,max_length-1} (so always one plain
// file name in the layer store); throws ApiError(400) naming the field.
void check_layer_name(const std::string& name, const std::string& field, size_t max_length = 64);

}  // namespace hutch::daemon
