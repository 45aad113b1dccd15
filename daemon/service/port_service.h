// A sandbox's TCP ports as hutchd reaches them: connections made inside the sandbox's network
// namespace to its loopback (no route into the sandbox is needed, and none exists for
// `network: none`), and the per-port tokens that let a client (a browser) reach one port
// without hutchd's bearer token. No HTTP here: the proxy is daemon/port_routes.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/service/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/live_sandbox.h"

namespace hutch::daemon::service {

// A connected, blocking TCP socket to 127.0.0.1:port inside `sandbox` (then [::1]:port when
// nothing listens on 127.0.0.1). Errors: port_unreachable (kFailure: nothing listens, the
// loopback is down, or the connect timed out), the runtime's when the namespace cannot be
// entered.
ServiceResult<UniqueFd> connect_to_port(const LiveSandbox& sandbox, uint16_t port,
                                        std::chrono::milliseconds timeout);

// Compares every byte of the longer string whatever the content: the time depends on the lengths
// only (tokens, hutchd's bearer token when the proxy strips it).
bool constant_time_equal(std::string_view a, std::string_view b);

struct PortTokenInfo {
  std::string id;  // public: names the token in list and revoke
  std::string sandbox;
  uint16_t port = 0;
  std::chrono::system_clock::time_point expires_at;
};

// The per-port tokens: "hpt_<id>_<secret>", 128 random bits of secret from getrandom(2), each
// valid for one sandbox and one port until it expires, is revoked, or its sandbox is gone. Only
// the issuer sees a token's value; lists show ids. Thread-safe.
class PortTokens {
 public:
  static constexpr std::chrono::seconds kDefaultTtl{3600};
  static constexpr std::chrono::seconds kMaxTtl{7 * 24 * 3600};
  static constexpr size_t kMaxTokensPerPort = 64;

  // `alive(sandbox_id)`: whether the sandbox is still registered; tokens of one that is not are
  // refused and dropped.
  explicit PortTokens(std::function<bool(const std::string&)> alive) : alive_(std::move(alive)) {}

  struct Issued {
    PortTokenInfo info;
    std::string token;
  };
  // Errors: bad_request (ttl out of 1..kMaxTtl), too_many_tokens (kConflict), the runtime's
  // (getrandom).
  ServiceResult<Issued> issue(const std::string& sandbox, uint16_t port, std::chrono::seconds ttl);
  std::vector<PortTokenInfo> list(const std::string& sandbox, uint16_t port);
  // false: no such token for this sandbox and port.
  bool revoke(const std::string& sandbox, uint16_t port, const std::string& id);
  // Whether `token` is a live token of this sandbox and port; the secret is compared in
  // constant time.
  bool accepts(const std::string& sandbox, uint16_t port, std::string_view token);

 private:
  struct Entry {
    PortTokenInfo info;
    std::string secret;
  };
  void sweep_locked();  // drops expired tokens and those of sandboxes gone
  std::function<bool(const std::string&)> alive_;
  std::mutex mutex_;
  std::map<std::string, Entry> tokens_;  // by id
};

}  // namespace hutch::daemon::service
