// A corporate upstream proxy for the engine's egress (issue #12): where it is, which
// destinations bypass it (no_proxy), the CONNECT request the engine sends it and how its answer
// reads. Pure logic: net/engine/proxy_tunnel.h does the I/O.
//
// Every connection the policy allowed goes through the proxy as `CONNECT name:port` (plain HTTP
// on port 80 too: the engine's per-request checks still run on the bytes inside the tunnel)
// unless no_proxy covers it; there is no direct fallback when the proxy fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/address.h"
#include "net/policy.h"
#include "runtime/base/error.h"

namespace hutch::net {

// `http://HOST:PORT` with an optional trailing '/': HOST a name or an IP literal (IPv6 in
// brackets). Refused: other schemes (https:// proxies are not supported yet), userinfo
// (credentials come from a secret, never from a command line), a path, a missing port.
struct ProxyUrl {
  std::string host;  // normalised name, or the literal's text
  std::optional<Address> address;
  uint16_t port = 0;
};
Result<ProxyUrl> parse_proxy_url(std::string_view url);

// Destinations that bypass the proxy, as a list separated by commas or whitespace: names
// ("example.com", that exact name), suffixes (".example.com" or "*.example.com": every
// subdomain, not the apex, as in policy rules), IP addresses and CIDR prefixes. Names are
// normalised as policy names are (net/policy.h); ports are refused (the whole host bypasses).
class NoProxy {
 public:
  static Result<NoProxy> parse(std::string_view list);
  // A name rule covers the connection's name, or a CIDR rule its address (either form of an
  // address embedding IPv4).
  bool covers(const std::optional<std::string>& name, const std::optional<Address>& address) const;
  std::string to_string() const;  // canonical, comma-separated
  bool empty() const { return rules_.empty(); }

 private:
  std::vector<Rule> rules_;
};

struct UpstreamProxy {
  std::string host;  // as the URL named it, for logs
  Address address;   // what the engine dials (a name in the URL is resolved once, by hutchd)
  uint16_t port = 0;
  NoProxy no_proxy;
  // The secret holding "user:password" for Proxy-Authorization: Basic; none: no credentials.
  std::optional<std::string> credentials_secret;

  std::string authority() const;  // "proxy.corp:3128", "[2001:db8::1]:3128"
  // The CONNECT target for a connection the policy allowed: its name when it has one, else its
  // address; nullopt when no_proxy covers it (dialled directly).
  std::optional<std::string> tunnel_target(const std::optional<std::string>& name,
                                           const std::optional<Address>& address,
                                           uint16_t port) const;
  // The proxy's own address is closed to sandboxes on every port, whatever the policy: only the
  // engine talks to the proxy, with credentials the sandbox never sees.
  bool is_proxy_address(const Address& address) const {
    return address.effective() == this->address.effective();
  }
};

// "CONNECT target HTTP/1.1" with Host, and Proxy-Authorization when `authorization` is given
// (the whole field value, "Basic ..."). The caller wipes the result after sending it.
std::string connect_request(std::string_view target, std::optional<std::string_view> authorization);

// The proxy's answer to CONNECT, read up to its empty line.
inline constexpr size_t kMaxProxyAnswer = 16 * 1024;
struct ProxyAnswer {
  enum class Status : uint8_t { kComplete, kNeedMore, kMalformed };
  Status status = Status::kNeedMore;
  int code = 0;          // kComplete: 2xx opens the tunnel (RFC 9110 9.3.6), anything else not
  size_t head_size = 0;  // kComplete: bytes through the empty line
  std::string detail;    // kMalformed
};
ProxyAnswer parse_proxy_answer(std::span<const uint8_t> bytes);

// What a plain-HTTP request gets when the proxy failed it: "HTTP/1.1 502 Bad Gateway" with
// Connection: close and a JSON body {"error":"upstream_proxy_failed","host":...,"port":...,
// "proxy_status":407 (0: no answer),"reason":...}. Never anything the proxy sent.
std::string build_proxy_failure_response(std::string_view host, uint16_t port, int proxy_status,
                                         std::string_view reason);

}  // namespace hutch::net
