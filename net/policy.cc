#include "net/policy.h"

#include <charconv>

namespace hutch::net {

namespace {

constexpr size_t kMaxName = 253;
constexpr size_t kMaxLabel = 63;

std::unexpected<Error> invalid(std::string_view step, std::string detail) {
  return kind_error(ErrorKind::kInvalid, step, std::move(detail));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

// WHATWG URL's "ends in a number": all decimal digits, or 0x followed by hex digits. getaddrinfo
// and inet_aton read such names as IPv4 addresses in the shorthand spellings.
bool is_numeric_label(std::string_view label) {
  if (label.starts_with("0x")) {
    for (char c : label.substr(2)) {
      if (!is_hex(c)) return false;
    }
    return true;
  }
  for (char c : label) {
    if (!is_digit(c)) return false;
  }
  return true;
}

Result<uint16_t> parse_port(std::string_view text, std::string_view whole) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || text.size() > 5 || text[0] == '0' || ec != std::errc() ||
      end != text.data() + text.size() || value > 65535) {
    return invalid("port", "bad port \"" + std::string(text) + "\" in \"" + std::string(whole) +
                               "\" (1..65535)");
  }
  return static_cast<uint16_t>(value);
}

bool address_matches(const Rule& rule, const Address& address) {
  return rule.kind == RuleKind::kCidr &&
         (rule.cidr.contains(address) || rule.cidr.contains(address.effective()));
}

enum class Role : uint8_t { kAllow, kDeny };

bool web_port(uint16_t port) { return port == 80 || port == 443; }

bool port_matches(const Rule& rule, Role role, uint16_t port, bool http_or_tls) {
  if (rule.port) return *rule.port == port;
  return role == Role::kDeny || (http_or_tls && web_port(port));
}

bool connection_matches(const Rule& rule, Role role, const std::optional<std::string>& name,
                        const Address& address, uint16_t port, bool http_or_tls) {
  if (!port_matches(rule, role, port, http_or_tls)) return false;
  return address_matches(rule, address) || (name && name_matches(rule, *name));
}

const Rule* first_match(const std::vector<Rule>& rules, Role role,
                        const std::optional<std::string>& name, const Address& address,
                        uint16_t port, bool http_or_tls) {
  for (const Rule& rule : rules) {
    if (connection_matches(rule, role, name, address, port, http_or_tls)) return &rule;
  }
  return nullptr;
}

// A portless allow that would have covered this connection had it been HTTP or TLS: the denial
// says which rule to write instead.
std::optional<std::string> port_to_name(const Rule* portless, std::string_view what,
                                        uint16_t port) {
  if (!portless) return std::nullopt;
  return "no allow rule matches " + std::string(what) + ":" + std::to_string(port) +
         " for TCP that is neither TLS nor HTTP/1.x: \"" + portless->to_string() +
         "\" covers only those on ports 80 and 443; allow \"" + std::string(what) + ":" +
         std::to_string(port) + "\" to open it";
}

std::optional<std::string> needs_its_port(const Policy& policy,
                                          const std::optional<std::string>& name,
                                          const Address& address, uint16_t port, bool http_or_tls) {
  if (http_or_tls || !web_port(port)) return std::nullopt;
  return port_to_name(first_match(policy.allow, Role::kAllow, name, address, port, true),
                      name ? *name : address.to_string(), port);
}

Decision denied(std::string rule, std::string reason) {
  return Decision{false, std::move(rule), std::move(reason)};
}

Decision allowed(std::string rule, std::string reason) {
  return Decision{true, std::move(rule), std::move(reason)};
}

std::optional<Decision> decide_mode(Mode mode) {
  if (mode == Mode::kNone) return denied("mode none", "network mode none: no egress");
  if (mode == Mode::kLoopback) return denied("mode loopback", "network mode loopback: no egress");
  return std::nullopt;
}

}  // namespace

bool name_matches(const Rule& rule, std::string_view name) {
  if (rule.kind == RuleKind::kName) return name == rule.name;
  if (rule.kind == RuleKind::kSuffix) {
    return name.size() > rule.name.size() + 1 && name.ends_with(rule.name) &&
           name[name.size() - rule.name.size() - 1] == '.';
  }
  return false;
}

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kNone:
      return "none";
    case Mode::kLoopback:
      return "loopback";
    case Mode::kFiltered:
      return "filtered";
    case Mode::kOpen:
      return "open";
  }
  return "unknown";
}

std::optional<Mode> parse_mode(std::string_view text) {
  for (Mode mode : {Mode::kNone, Mode::kLoopback, Mode::kFiltered, Mode::kOpen}) {
    if (text == mode_name(mode)) return mode;
  }
  return std::nullopt;
}

Result<std::string> normalize_name(std::string_view text) {
  const std::string quoted = "\"" + std::string(text.substr(0, kMaxName + 2)) + "\"";
  if (text.ends_with('.')) text.remove_suffix(1);
  if (text.empty()) return invalid("name", "empty name");
  if (text.size() > kMaxName) {
    return invalid("name", "name longer than 253 characters: " + quoted.substr(0, 40) + "...\"");
  }
  std::string name;
  name.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) {
      return invalid("name",
                     "non-ASCII name " + quoted + " (IDNA is not decoded: give the xn-- form)");
    }
    name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  size_t start = 0;
  std::string_view last;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    const std::string_view label = std::string_view(name).substr(start, dot - start);
    if (label.empty()) return invalid("name", "empty label in " + quoted);
    if (label.size() > kMaxLabel) return invalid("name", "label longer than 63 in " + quoted);
    if (label.front() == '-' || label.back() == '-') {
      return invalid("name", "label starting or ending with '-' in " + quoted);
    }
    for (char c : label) {
      if (!(is_digit(c) || (c >= 'a' && c <= 'z') || c == '-' || c == '_')) {
        return invalid("name", "character outside [A-Za-z0-9_-] in " + quoted);
      }
    }
    last = label;
    start = dot + 1;
  }
  if (is_numeric_label(last)) {
    return invalid("name", quoted + " ends in a number: resolvers read it as an IPv4 address");
  }
  return name;
}

Result<Host> parse_host(std::string_view text) {
  if (text.starts_with('[')) {
    if (!text.ends_with(']'))
      return invalid("host", "unclosed '[' in \"" + std::string(text) + "\"");
    const Address address = HUTCH_TRY(Address::parse(text.substr(1, text.size() - 2)));
    if (address.is_v4())
      return invalid("host", "IPv4 address in brackets: \"" + std::string(text) + "\"");
    return Host{std::nullopt, address};
  }
  if (auto address = Address::parse(text)) return Host{std::nullopt, *address};
  return Host{HUTCH_TRY(normalize_name(text)), std::nullopt};
}

std::string Rule::to_string() const {
  std::string text;
  if (kind == RuleKind::kName) text = name;
  if (kind == RuleKind::kSuffix) text = "*." + name;
  if (kind == RuleKind::kCidr) {
    text = cidr.prefix() == cidr.base().bit_length() ? cidr.base().to_string() : cidr.to_string();
    if (port && !cidr.base().is_v4()) text = "[" + text + "]";
  }
  if (port) text += ":" + std::to_string(*port);
  return text;
}

Result<Rule> parse_rule(std::string_view text) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  Rule rule;
  std::string_view host = text;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return invalid("rule", "unclosed '[' in " + quoted);
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return invalid("rule", "expected ':port' after ']' in " + quoted);
      rule.port = HUTCH_TRY(parse_port(rest.substr(1), text));
    }
    if (host.find(':') == std::string_view::npos) {
      return invalid("rule", "brackets hold an IPv6 address or prefix only: " + quoted);
    }
  } else if (text.find(':') == text.rfind(':') && text.find(':') != std::string_view::npos) {
    // One colon: host:port. More than one without brackets is a bare IPv6 address or prefix.
    const size_t colon = text.find(':');
    host = text.substr(0, colon);
    rule.port = HUTCH_TRY(parse_port(text.substr(colon + 1), text));
  }
  if (host.empty()) return invalid("rule", "empty rule " + quoted);
  const bool looks_ip =
      host.find(':') != std::string_view::npos || host.find('/') != std::string_view::npos;
  if (auto address = Address::parse(host); looks_ip || address) {
    auto cidr = Cidr::parse(host);
    if (!cidr) return invalid("rule", "rule " + quoted + ": " + cidr.error().detail);
    rule.kind = RuleKind::kCidr;
    rule.cidr = *cidr;
    return rule;
  }
  if (host.starts_with("*.")) {
    rule.kind = RuleKind::kSuffix;
    host.remove_prefix(2);
  }
  if (host.find('*') != std::string_view::npos) {
    return invalid("rule", "rule " + quoted +
                               ": '*' only as a whole first label (\"*.example.com\"); use mode "
                               "open to allow everything");
  }
  auto name = normalize_name(host);
  if (!name) return invalid("rule", "rule " + quoted + ": " + name.error().detail);
  rule.name = std::move(*name);
  return rule;
}

Decision decide(const Policy& policy, const Floor& floor, const Connection& connection) {
  if (auto decision = decide_mode(policy.mode)) return *decision;
  std::optional<std::string> name;
  if (connection.name) {
    auto normal = normalize_name(*connection.name);
    if (!normal) return denied("name", normal.error().detail);
    if (auto reason = Floor::refuse_name(*normal)) return denied("floor", *reason);
    name = std::move(*normal);
  }
  const Address& address = connection.address;
  const uint16_t port = connection.port;
  if (auto reason = floor.refuse(address, port)) return denied("floor", *reason);
  const bool web = connection.http_or_tls;
  if (const Rule* rule = first_match(policy.deny, Role::kDeny, name, address, port, web)) {
    return denied(rule->to_string(), "denied by rule \"" + rule->to_string() + "\"");
  }
  if (auto range = floor.private_range(address)) {
    const Rule* by_address = nullptr;
    for (const Rule& rule : policy.allow) {
      if (address_matches(rule, address) && port_matches(rule, Role::kAllow, port, web)) {
        by_address = &rule;
        break;
      }
    }
    if (!by_address) {
      if (auto reason = needs_its_port(policy, std::nullopt, address, port, web))
        return denied("default", *reason);
      return denied("floor", "floor: private range " + range->to_string() +
                                 " (only an allow by address or CIDR opens it)");
    }
    return allowed(by_address->to_string(), "allowed by rule \"" + by_address->to_string() + "\"");
  }
  if (policy.mode == Mode::kOpen)
    return allowed("mode open", "network mode open: public destination");
  if (const Rule* rule = first_match(policy.allow, Role::kAllow, name, address, port, web)) {
    return allowed(rule->to_string(), "allowed by rule \"" + rule->to_string() + "\"");
  }
  if (auto reason = needs_its_port(policy, name, address, port, web))
    return denied("default", *reason);
  return denied("default", "no allow rule matches " + (name ? *name : address.to_string()) + ":" +
                               std::to_string(port));
}

Decision decide_name(const Policy& policy, std::string_view name) {
  if (auto decision = decide_mode(policy.mode)) return *decision;
  auto normal = normalize_name(name);
  if (!normal) return denied("name", normal.error().detail);
  if (auto reason = Floor::refuse_name(*normal)) return denied("floor", *reason);
  for (const Rule& rule : policy.deny) {
    if (!rule.port && name_matches(rule, *normal)) {
      return denied(rule.to_string(), "denied by rule \"" + rule.to_string() + "\"");
    }
  }
  if (policy.mode == Mode::kOpen) return allowed("mode open", "network mode open");
  for (const Rule& rule : policy.allow) {
    if (name_matches(rule, *normal)) {
      return allowed(rule.to_string(), "allowed by rule \"" + rule.to_string() + "\"");
    }
  }
  return denied("default", "no allow rule names " + *normal);
}

Decision decide_unresolved(const Policy& policy, std::string_view name, uint16_t port,
                           bool http_or_tls) {
  if (auto decision = decide_mode(policy.mode)) return *decision;
  auto normal = normalize_name(name);
  if (!normal) return denied("name", normal.error().detail);
  if (auto reason = Floor::refuse_name(*normal)) return denied("floor", *reason);
  for (const Rule& rule : policy.deny) {
    if (name_matches(rule, *normal) && port_matches(rule, Role::kDeny, port, http_or_tls)) {
      return denied(rule.to_string(), "denied by rule \"" + rule.to_string() + "\"");
    }
  }
  for (const Rule& rule : policy.allow) {
    if (name_matches(rule, *normal) && port_matches(rule, Role::kAllow, port, http_or_tls)) {
      return allowed(rule.to_string(), "allowed by rule \"" + rule.to_string() + "\"");
    }
  }
  if (!http_or_tls && web_port(port)) {
    for (const Rule& rule : policy.allow) {
      if (!rule.port && name_matches(rule, *normal))
        return denied("default", *port_to_name(&rule, *normal, port));
    }
  }
  return denied("default", "no allow rule names " + *normal + ":" + std::to_string(port) +
                               " (a name the host cannot resolve needs a rule naming it)");
}

Decision check_resolved(const Policy& policy, const Floor& floor, std::string_view name,
                        const Address& address) {
  const std::string what = std::string(name) + " resolves to " + address.to_string();
  if (auto reason = floor.refuse_address(address)) {
    return denied("rebinding", what + ", refused by the " + *reason);
  }
  for (const Rule& rule : policy.deny) {
    if (!rule.port && address_matches(rule, address)) {
      return denied(rule.to_string(), what + ", denied by rule \"" + rule.to_string() + "\"");
    }
  }
  if (auto range = floor.private_range(address)) {
    for (const Rule& rule : policy.allow) {
      if (address_matches(rule, address)) {
        return allowed(rule.to_string(), what + ", allowed by rule \"" + rule.to_string() + "\"");
      }
    }
    return denied("rebinding", what + ", in private range " + range->to_string() +
                                   " that no allow by address or CIDR opens");
  }
  return allowed("", what);
}

Result<std::string> agree_names(std::span<const NameSeen> seen) {
  if (seen.empty()) return invalid("names", "no name seen");
  std::string first;
  for (const NameSeen& one : seen) {
    auto normal = normalize_name(one.name);
    if (!normal) return invalid("names", std::string(one.layer) + ": " + normal.error().detail);
    if (&one == &seen.front()) {
      first = std::move(*normal);
    } else if (*normal != first) {
      return invalid("names", "names disagree: " + std::string(seen.front().layer) + " \"" + first +
                                  "\", " + std::string(one.layer) + " \"" + *normal + "\"");
    }
  }
  return first;
}

}  // namespace hutch::net
