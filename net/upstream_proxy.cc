#include "net/upstream_proxy.h"

#include <charconv>

#include "net/http_head.h"

namespace hutch::net {
namespace {

std::unexpected<Error> invalid(std::string_view step, std::string detail) {
  return kind_error(ErrorKind::kInvalid, step, std::move(detail));
}

// "host:port" with brackets around an IPv6 host.
std::string join_authority(std::string_view host, bool v6, uint16_t port) {
  std::string out = v6 ? "[" + std::string(host) + "]" : std::string(host);
  return out + ":" + std::to_string(port);
}

}  // namespace

Result<ProxyUrl> parse_proxy_url(std::string_view url) {
  const std::string quoted = "\"" + std::string(url) + "\"";
  constexpr std::string_view kScheme = "http://";
  if (url.starts_with("https://")) {
    return invalid("upstream proxy",
                   "https:// proxies are not supported yet (give http://HOST:PORT): " + quoted);
  }
  if (!url.starts_with(kScheme))
    return invalid("upstream proxy", "expected http://HOST:PORT, got " + quoted);
  std::string_view authority = url.substr(kScheme.size());
  if (authority.ends_with('/')) authority.remove_suffix(1);
  if (authority.find('@') != std::string_view::npos) {
    return invalid(
        "upstream proxy",
        "credentials in the URL are refused (command lines are readable by every user): give "
        "them as a secret (--net-upstream-proxy-secret)");
  }
  if (authority.find('/') != std::string_view::npos ||
      authority.find('?') != std::string_view::npos)
    return invalid("upstream proxy", "a proxy URL has no path: " + quoted);
  // A policy rule's parser reads HOST:PORT the same way (names normalised, IPv6 in brackets).
  auto rule = parse_rule(authority);
  if (!rule) return invalid("upstream proxy", rule.error().detail);
  if (!rule->port) return invalid("upstream proxy", "no port in " + quoted);
  ProxyUrl out;
  out.port = *rule->port;
  switch (rule->kind) {
    case RuleKind::kName:
      out.host = rule->name;
      break;
    case RuleKind::kCidr:
      if (rule->cidr.prefix() != rule->cidr.base().bit_length())
        return invalid("upstream proxy", "a prefix is not a host: " + quoted);
      out.address = rule->cidr.base();
      out.host = out.address->to_string();
      break;
    case RuleKind::kSuffix:
      return invalid("upstream proxy", "a wildcard is not a host: " + quoted);
  }
  return out;
}

Result<NoProxy> NoProxy::parse(std::string_view list) {
  NoProxy out;
  size_t at = 0;
  while (at < list.size()) {
    const size_t end = list.find_first_of(", \t\n", at);
    std::string entry(list.substr(at, end == std::string_view::npos ? end : end - at));
    at = end == std::string_view::npos ? list.size() : end + 1;
    if (entry.empty()) continue;
    // ".example.com" is how no_proxy variables usually spell a suffix.
    if (entry.starts_with('.')) entry.insert(0, "*");
    auto rule = parse_rule(entry);
    if (!rule) return invalid("no_proxy", rule.error().detail);
    if (rule->port) {
      return invalid("no_proxy",
                     "\"" + entry + "\": no_proxy entries take no port (the whole host bypasses)");
    }
    out.rules_.push_back(std::move(*rule));
  }
  return out;
}

bool NoProxy::covers(const std::optional<std::string>& name,
                     const std::optional<Address>& address) const {
  for (const Rule& rule : rules_) {
    if (rule.kind == RuleKind::kCidr) {
      if (address && (rule.cidr.contains(*address) || rule.cidr.contains(address->effective())))
        return true;
    } else if (name && name_matches(rule, *name)) {
      return true;
    }
  }
  return false;
}

std::string NoProxy::to_string() const {
  std::string out;
  for (const Rule& rule : rules_) {
    if (!out.empty()) out += ",";
    out += rule.to_string();
  }
  return out;
}

std::string UpstreamProxy::authority() const {
  return join_authority(host, host.find(':') != std::string::npos, port);
}

std::optional<std::string> UpstreamProxy::tunnel_target(const std::optional<std::string>& name,
                                                        const std::optional<Address>& address,
                                                        uint16_t target_port) const {
  if (no_proxy.covers(name, address)) return std::nullopt;
  // By name: a corporate proxy filters by name, and resolves it where it sits.
  if (name) return join_authority(*name, false, target_port);
  if (!address) return std::nullopt;
  return join_authority(address->to_string(), !address->is_v4(), target_port);
}

std::string connect_request(std::string_view target,
                            std::optional<std::string_view> authorization) {
  std::string out;
  // One allocation: a reallocation would leave a copy of the credentials in freed memory, out of
  // reach of the caller's wipe.
  out.reserve(64 + 2 * target.size() + (authorization ? authorization->size() : 0));
  out += "CONNECT ";
  out += target;
  out += " HTTP/1.1\r\nHost: ";
  out += target;
  out += "\r\n";
  if (authorization) {
    out += "Proxy-Authorization: ";
    out += *authorization;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

ProxyAnswer parse_proxy_answer(std::span<const uint8_t> bytes) {
  ProxyAnswer answer;
  const std::string_view data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (data.size() >= kMaxProxyAnswer) {
      answer.status = ProxyAnswer::Status::kMalformed;
      answer.detail = "answer head larger than " + std::to_string(kMaxProxyAnswer) + " bytes";
    }
    return answer;
  }
  // "HTTP/1.x SSS reason": the status line is all the engine needs (RFC 9112 4).
  const std::string_view line = data.substr(0, data.find("\r\n"));
  answer.status = ProxyAnswer::Status::kMalformed;
  if (!(line.starts_with("HTTP/1.1 ") || line.starts_with("HTTP/1.0 ")) || line.size() < 12 ||
      (line.size() > 12 && line[12] != ' ')) {
    answer.detail = "not an HTTP/1.x status line";
    return answer;
  }
  int code = 0;
  const auto [ptr, ec] = std::from_chars(line.data() + 9, line.data() + 12, code);
  if (ec != std::errc() || ptr != line.data() + 12 || code < 100 || code > 599) {
    answer.detail = "bad status code";
    return answer;
  }
  answer.status = ProxyAnswer::Status::kComplete;
  answer.code = code;
  answer.head_size = end + 4;
  return answer;
}

std::string build_proxy_failure_response(std::string_view host, uint16_t port, int proxy_status,
                                         std::string_view reason) {
  std::string body = "{\"error\":\"upstream_proxy_failed\",\"host\":";
  append_json_string(body, host);
  body += ",\"port\":" + std::to_string(port) +
          ",\"proxy_status\":" + std::to_string(proxy_status) + ",\"reason\":";
  append_json_string(body, reason);
  body += "}\n";
  return "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace hutch::net
