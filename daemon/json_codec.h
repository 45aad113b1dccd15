// The API codec: request bodies decoded into daemon types, and back. Parsing functions throw
// ApiError (400) for bad input. A decoded value has passed every check of its shape, ranges and
// names (env keys and hostnames by runtime/defaults.h's rules); what needs the host or the
// registry (a rootfs directory that exists, the recipe a name resolves to, the size of env and
// labels together) is checked by the route that uses it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

// The codec's helpers and the spec policy, which the routes decoding with it use too.
#include "daemon/codec/base64.h"
#include "daemon/codec/fields.h"
#include "daemon/codec/signal.h"
#include "daemon/codec/time.h"
#include "daemon/sandbox_spec.h"
#include "runtime/defaults.h"
#include "runtime/spec.h"

namespace hutch::daemon {

using nlohmann::json;

// A create's volumes, at most (each is one fd more in the zygote's message,
// runtime/base/passed_fds.h).
inline constexpr size_t kMaxVolumesPerSandbox = 4;

// A request's body, or (kRecord) the "config" of a sandbox.json, which may also carry the
// resolved "layers" digests that a client may not set.
enum class ConfigSource { kRequest, kRecord };
SandboxConfig parse_sandbox_config(const json& body, ConfigSource source = ConfigSource::kRequest);
json config_to_json(const SandboxConfig& config);

// A create's (or PUT .../network's) "network": a mode string ("none", "loopback", "filtered",
// "open") or {"mode":...,"allow":[...],"deny":[...]} (net/policy_json.h). Errors name the entry;
// rules are refused with a mode that has no egress.
net::Policy parse_network(const json& network);
// {"mode":...,"allow":[...],"deny":[...]}, the canonical form.
json network_to_json(const net::Policy& policy);

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

// Recipe, snapshot and checkpoint names: [a-z0-9][a-z0-9._-]{0,max_length-1} (so always one plain
// file name in the layer store); throws ApiError(400) naming the field.
void check_layer_name(const std::string& name, const std::string& field, size_t max_length = 64);

}  // namespace hutch::daemon
