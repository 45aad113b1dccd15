// The pure half of the client verbs (unit-tested, no I/O): command-line values in, hutchd
// request bodies and query strings out, and hutchd's answers back into text for the terminal.
// The wire format is hutchd's (docs/api.md); this file only knows its field names.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/error.h"

namespace hutch::client {

using nlohmann::json;

// `hutch create` options as typed on the command line (strings not yet validated).
struct CreateOptions {
  std::string rootfs = "host";  // "host" or a host directory (made absolute by the caller)
  std::string recipe;           // a recipe or snapshot name; empty: none
  std::string memory;           // "512M"
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
  std::string disk;                  // "1G"
  std::vector<std::string> env;      // K=V
  std::vector<std::string> labels;   // k=v
  std::string idle_ttl;              // a duration: "600", "10m"
  std::string timeout;               // the default exec timeout, a duration
  std::string network;               // "none" | "loopback"; empty: the daemon's default
  std::vector<std::string> volumes;  // NAME:/target[:ro]
};

// The body of POST /v1/sandboxes; only what was given (the daemon fills in its defaults).
Result<json> create_body(const CreateOptions& options);

// `hutch exec` options.
struct ExecOptions {
  std::vector<std::string> argv;
  std::string workdir;
  std::vector<std::string> env;  // K=V
  std::string timeout;           // a duration; empty: the sandbox's default
  std::optional<std::string> stdin_data;
  bool stream = false;
  bool background = false;
};

// The body of POST /v1/sandboxes/{id}/exec. stdin must be UTF-8: JSON strings cannot carry
// arbitrary bytes (upload binary input with `hutch cp` instead).
Result<json> exec_body(const ExecOptions& options);

// "key=value" → {key, value}; `what` names the option in the error ("label", "env").
Result<std::pair<std::string, std::string>> parse_key_value(std::string_view text,
                                                            std::string_view what);

// A `hutch cp` operand: "ID:/path" names a file in a sandbox; anything else is a host path
// ("-" is stdin or stdout). A host path that looks like ID:/path can be written ./ID:/path.
struct CopyEndpoint {
  std::optional<std::string> sandbox;  // the id, when the operand is in a sandbox
  std::string path;
};
CopyEndpoint parse_copy_endpoint(std::string_view operand);

struct CopyPlan {
  bool upload = false;  // host → sandbox; otherwise sandbox → host
  std::string sandbox;
  std::string sandbox_path;
  std::string host_path;  // "-" for stdin/stdout
};
// Exactly one side must be in a sandbox; a sandbox destination ending in '/' gets the source's
// file name appended.
Result<CopyPlan> plan_copy(std::string_view source, std::string_view destination);

// RFC 3986 percent-encoding of a query value (unreserved characters and '/' stay as they are).
std::string url_encode(std::string_view text);

// "/v1/sandboxes/<id><suffix>"; refuses ids that are not [A-Za-z0-9_-]+ (they cannot name a
// sandbox, and must not turn into another route).
Result<std::string> sandbox_path(std::string_view id, std::string_view suffix = "");

// `hutch ls`: the table of GET /v1/sandboxes's "sandboxes" (ID STATE CREATED LABELS).
std::string format_sandbox_table(const json& sandboxes);

// `hutch create --volume NAME:/target[:ro]` → a create's "volumes" entry.
Result<json> parse_volume_option(std::string_view text);
// The body of POST /v1/volumes from `hutch volume create NAME SIZE` (SIZE as 1G, 512M).
Result<json> volume_body(const std::string& name, const std::string& size);
// "NAME  SIZE  USED  ATTACHED" rows of GET /v1/volumes's "volumes".
std::string format_volume_table(const json& volumes);

// The message of a failed request: "code: message" from hutchd's {"error":{…}} body, or
// "HTTP <status>: <body>" for any other answer.
Error daemon_error(int status, std::string_view body);

// Standard base64 (with padding) as hutchd's ?encoding=base64 sends it; nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view text);
// Standard base64 with padding (the data_base64 of a pty's input).
std::string base64_encode(std::string_view data);

// Splits a byte stream into lines as chunks arrive (the NDJSON of a streamed exec).
class LineSplitter {
 public:
  // Appends `data` and returns the lines it completed, without their '\n'.
  std::vector<std::string> feed(std::string_view data);
  // What is left after the last '\n' (a truncated stream).
  const std::string& rest() const { return pending_; }

 private:
  std::string pending_;
};

// Exec exit statuses: the command's own, 124 on timeout, 128+N when killed by signal N.
constexpr int kExitTimeout = 124;
// hutchd answered an error, could not be reached, or the arguments were wrong.
constexpr int kExitClientFailure = 125;

}  // namespace hutch::client
