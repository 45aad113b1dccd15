// A sandbox's network policy and the decisions made with it: which (name, address, port) a
// connection may reach, which names DNS answers, whether a resolved address may be used, and
// whether the names seen at different layers (DNS, TLS SNI, HTTP Host) agree. Pure logic: the
// engine that sees the traffic calls it.
//
// Rules, deny wins over allow:
//   "pypi.org"         that exact name (not its subdomains)
//   "*.github.com"     any subdomain at any depth (api.github.com, a.b.github.com), NOT the apex
//                      github.com itself: list both to allow both
//   "203.0.113.7", "2001:db8::1", "10.0.0.0/8", "fc00::/7"   addresses and prefixes
//   any of those with a port: "github.com:22", "10.1.2.3:5432", "10.0.0.0/8:5432",
//   "[2001:db8::1]:443", "[fc00::/7]:5432"
// An allow without a port covers ports 80 and 443 only, and there only what the engine saw to be
// HTTP/1.x or TLS: other TCP (h2c by prior knowledge, a protocol tunnelled on port 443) needs its
// port named. A deny without a port covers every port.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/address.h"
#include "net/floor.h"
#include "runtime/base/error.h"

namespace hutch::net {

enum class Mode : uint8_t {
  kNone,      // no interface but a down lo: nothing at all
  kLoopback,  // the sandbox's own lo only (no traffic reaches the engine)
  kFiltered,  // egress through the engine, by the rules
  kOpen,      // every public destination; the floor, private ranges and DNS protection stay
};

std::string_view mode_name(Mode mode);  // "none", "loopback", "filtered", "open"
std::optional<Mode> parse_mode(std::string_view text);

// A host name as the engine compares it: lowercase ASCII, no trailing dot, at most 253
// characters, labels of 1..63 characters [a-z0-9_-] not starting or ending with '-'. Refused:
// non-ASCII (IDNA is not decoded here: give the xn-- form), empty labels, and names ending in a
// numeric label ("2130706433", "0x7f.1", "127.1"): resolvers read those as IPv4 addresses.
Result<std::string> normalize_name(std::string_view text);

// A destination as written in a rule, a Host header or a CONNECT target: an IP literal
// (IPv6 with or without brackets) or a normalised name.
struct Host {
  std::optional<std::string> name;
  std::optional<Address> address;
};
Result<Host> parse_host(std::string_view text);

enum class RuleKind : uint8_t { kName, kSuffix, kCidr };

struct Rule {
  RuleKind kind = RuleKind::kName;
  std::string name;  // kName: the name; kSuffix: the suffix without "*." ("github.com")
  Cidr cidr;         // kCidr (a single address is a full-length prefix)
  std::optional<uint16_t> port;

  std::string to_string() const;  // the canonical spelling: "*.github.com", "[fc00::/7]:5432"

  friend bool operator==(const Rule&, const Rule&) = default;
};

// Parses one rule; the error names the rule text and what is wrong with it.
Result<Rule> parse_rule(std::string_view text);

// Whether a name rule covers a normalised name (kName: exactly; kSuffix: any subdomain). Ports
// are not looked at; a kCidr rule covers no name.
bool name_matches(const Rule& rule, std::string_view name);

// Credential injection's rules (net/inject.h says how they apply), here so that a Policy carries
// them: the API, sandbox.json and the engine take them with the rest of the policy.
// Header `name` is set to `prefix` + the secret's value ("Authorization": "Bearer " + key).
struct InjectHeader {
  std::string name;  // an RFC 9110 token, compared case-insensitively
  std::string secret;
  std::string prefix;  // visible ASCII, spaces and tabs
  friend bool operator==(const InjectHeader&, const InjectHeader&) = default;
};

struct InjectRule {
  std::vector<Rule> match_hosts;           // kName or kSuffix rules, no port
  std::optional<std::string> method;       // exact, uppercase ("POST"); none: every method
  std::optional<std::string> path_prefix;  // starts with '/'; none: every path
  std::vector<InjectHeader> headers;
  friend bool operator==(const InjectRule&, const InjectRule&) = default;
};

struct Policy {
  Mode mode = Mode::kLoopback;
  std::vector<Rule> allow;
  std::vector<Rule> deny;
  std::vector<InjectRule> inject;  // names secrets, never holds their values

  friend bool operator==(const Policy&, const Policy&) = default;
};

struct Decision {
  bool allowed = false;
  // What decided: a rule's canonical text, "floor", "mode none", "mode loopback", "mode open",
  // "name", "rebinding" or "default" (nothing allowed it).
  std::string rule;
  std::string reason;  // for the log and the 403 body: "floor: cloud metadata"
};

// A connection the sandbox opened: the name it is known by (from the engine's DNS answer, the
// TLS SNI or the HTTP Host, already checked to agree) if any, the address the engine will dial,
// and the port.
struct Connection {
  std::optional<std::string> name;
  Address address;
  uint16_t port = 0;
  // The first bytes were a TLS ClientHello or an HTTP/1.x request head: what a portless allow
  // covers on ports 80 and 443.
  bool http_or_tls = true;
};

// Mode, then the floor, then deny rules, then the private-range rule (a private address needs
// an allow by address or CIDR, whatever the name), then allow rules; nothing matched: denied.
Decision decide(const Policy& policy, const Floor& floor, const Connection& connection);

// Whether the DNS stub answers a query for `name` (else NXDOMAIN, never forwarded): some
// name rule allows it on some port and no portless deny names it, or the mode is open.
Decision decide_name(const Policy& policy, std::string_view name);

// A connection known only by its name, for a name the host cannot resolve that the upstream
// proxy (net/upstream_proxy.h) is asked to reach by name: only rules naming it decide (deny, then
// allow, each by name and port); mode open allows no such name, since no address can be checked
// against the floor and the private ranges. http_or_tls as in Connection.
Decision decide_unresolved(const Policy& policy, std::string_view name, uint16_t port,
                           bool http_or_tls);

// The DNS rebinding rule, for each address an upstream resolver gave for an allowed name: the
// floor refuses it, a portless deny of its address refuses it, and a private address needs an
// allow by address or CIDR. Refused addresses are dropped from the answer.
Decision check_resolved(const Policy& policy, const Floor& floor, std::string_view name,
                        const Address& address);

// A name as one layer saw it: {"dns", "example.com"}, {"sni", ...}, {"host", ...}.
struct NameSeen {
  std::string_view layer;
  std::string_view name;
};
// The one normalised name every layer saw (case and a trailing dot do not count), or an error
// naming the layers that disagree. IP literals are not names: leave such a Host out.
Result<std::string> agree_names(std::span<const NameSeen> seen);

}  // namespace hutch::net
