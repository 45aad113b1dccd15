#include "net/http_head.h"

#include <charconv>
#include <cstdio>
#include <vector>

namespace hutch::net {

namespace {

constexpr std::string_view kEnd = "\r\n\r\n";

HttpHead malformed(std::string detail) {
  HttpHead head;
  head.status = HeadStatus::kMalformed;
  head.detail = std::move(detail);
  return head;
}

// RFC 9110 5.6.2 tchar.
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!is_tchar(c)) return false;
  }
  return true;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

struct Authority {
  std::string host;
  std::optional<uint16_t> port;
};

// "host", "host:port", "[v6]", "[v6]:port". The error text, or the parts.
std::optional<std::string> parse_authority(std::string_view text, Authority& out) {
  if (text.find('@') != std::string_view::npos) return "userinfo in an authority";
  std::string_view port;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return "unclosed '[' in an authority";
    out.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return "junk after ']' in an authority";
      port = rest.substr(1);
    }
  } else {
    const size_t colon = text.find(':');
    out.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) port = text.substr(colon + 1);
  }
  if (out.host.empty()) return "empty host in an authority";
  if (port.data() != nullptr) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || port.size() > 5 || ec != std::errc() || end != port.data() + port.size() ||
        value == 0 || value > 65535) {
      return "bad port in an authority";
    }
    out.port = static_cast<uint16_t>(value);
  }
  return std::nullopt;
}

std::string_view strip_dot(std::string_view host) {
  if (host.ends_with('.')) host.remove_suffix(1);
  return host;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (byte < 0x20 || byte > 0x7e) {
      // Bytes past ASCII too: a hostile Host may hold invalid UTF-8, and the body must stay JSON.
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

HttpHead parse_http_head(std::span<const uint8_t> bytes) {
  const std::string_view data(reinterpret_cast<const char*>(bytes.data()),
                              std::min(bytes.size(), kMaxHttpHead));
  const size_t end = data.find(kEnd);
  if (end == std::string_view::npos) {
    if (bytes.size() >= kMaxHttpHead) return malformed("head larger than 64 KiB");
    return HttpHead{};
  }
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= end;) {
    const size_t crlf = data.find("\r\n", start);
    lines.push_back(data.substr(start, crlf - start));
    start = crlf + 2;
  }
  for (std::string_view line : lines) {
    for (char c : line) {
      if (c == '\r' || c == '\n' || c == '\0') return malformed("bare CR, LF or NUL in the head");
    }
  }
  HttpHead head;
  head.head_size = end + kEnd.size();
  const std::string_view request = lines[0];
  const size_t sp1 = request.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : request.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || request.find(' ', sp2 + 1) != std::string_view::npos) {
    return malformed("request line is not METHOD SP target SP version");
  }
  head.method = std::string(request.substr(0, sp1));
  head.target = std::string(request.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = request.substr(sp2 + 1);
  if (!is_token(head.method)) return malformed("bad method");
  if (head.target.empty()) return malformed("empty target");
  for (char c : head.target) {
    if (c < 0x21 || c > 0x7e) return malformed("bad byte in the target");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return malformed("not HTTP/1.0 or HTTP/1.1");

  std::optional<Authority> host_header;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.empty()) return malformed("empty header line");
    if (line[0] == ' ' || line[0] == '\t') return malformed("obsolete line folding");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return malformed("header line without ':'");
    const std::string_view name = line.substr(0, colon);
    if (!is_token(name)) return malformed("bad header name (or whitespace before ':')");
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    for (char c : value) {
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
        return malformed("control byte in a header");
    }
    if (!iequals(name, "host")) continue;
    if (host_header) return malformed("duplicate Host header");
    Authority authority;
    if (!value.empty()) {
      if (auto error = parse_authority(value, authority)) return malformed("Host: " + *error);
    }
    host_header = std::move(authority);
  }

  std::optional<Authority> from_target;
  const std::string_view target = head.target;
  if (head.method == "CONNECT") {
    Authority authority;
    if (auto error = parse_authority(target, authority))
      return malformed("CONNECT target: " + *error);
    if (!authority.port) return malformed("CONNECT target without a port");
    from_target = std::move(authority);
  } else if (!target.starts_with('/') && target != "*") {
    const size_t scheme_end = target.find("://");
    if (scheme_end == std::string_view::npos || !iequals(target.substr(0, scheme_end), "http")) {
      return malformed("target is neither origin-form nor an http:// absolute-form");
    }
    const std::string_view rest = target.substr(scheme_end + 3);
    Authority authority;
    if (auto error = parse_authority(rest.substr(0, rest.find_first_of("/?#")), authority)) {
      return malformed("target: " + *error);
    }
    from_target = std::move(authority);
  }

  if (from_target && host_header && !host_header->host.empty()) {
    const bool same_port =
        !from_target->port || !host_header->port || from_target->port == host_header->port;
    if (!iequals(strip_dot(from_target->host), strip_dot(host_header->host)) || !same_port) {
      return malformed("Host header disagrees with the target's authority");
    }
  }
  const std::optional<Authority>& chosen = from_target ? from_target : host_header;
  if (!chosen || chosen->host.empty()) {
    if (version == "HTTP/1.1") return malformed("HTTP/1.1 request without a host");
  } else {
    head.host = chosen->host;
    head.port = chosen->port;
  }
  head.status = HeadStatus::kComplete;
  return head;
}

std::string build_forbidden_body(std::string_view host, uint16_t port, std::string_view rule,
                                 std::string_view reason) {
  std::string body = "{\"error\":\"network_denied\",\"host\":";
  append_json_string(body, host);
  body += ",\"port\":" + std::to_string(port) + ",\"rule\":";
  append_json_string(body, rule);
  body += ",\"reason\":";
  append_json_string(body, reason);
  body += "}\n";
  return body;
}

std::string build_forbidden_response(std::string_view host, uint16_t port, std::string_view rule,
                                     std::string_view reason) {
  const std::string body = build_forbidden_body(host, port, rule, reason);
  return "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace hutch::net
