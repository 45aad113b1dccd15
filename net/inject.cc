#include "net/inject.h"

#include <string.h>

#include <algorithm>
#include <cstring>

#include "net/http_head.h"

namespace hutch::net {

namespace {

constexpr size_t kMaxSecretName = 128;
constexpr size_t kMaxHeaderName = 256;
constexpr size_t kMaxPrefix = 256;

std::unexpected<Error> invalid(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "inject rule", std::move(detail));
}

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// RFC 9110 5.6.2 tchar.
bool is_token(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!is_alpha(c) && !is_digit(c) && std::strchr("!#$%&'*+-.^_`|~", c) == nullptr) {
      return false;
    }
  }
  return true;
}

// RFC 9110 5.5 field-value characters: visible ASCII, obs-text, space and tab.
bool is_field_value(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == '\t' || (u >= 0x20 && u != 0x7f);
  });
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; };
           return lower(x) == lower(y);
         });
}

bool host_matches(const InjectRule& rule, std::string_view host) {
  return std::any_of(rule.match_hosts.begin(), rule.match_hosts.end(),
                     [&](const Rule& match) { return name_matches(match, host); });
}

// A target whose path some server could read as another path than its bytes say.
bool is_ambiguous_path(std::string_view target) {
  if (!target.starts_with('/') || target.find('\\') != std::string_view::npos) return true;
  std::string_view path = target.substr(0, target.find_first_of("?#"));
  for (std::string_view encoded : {"%2e", "%2f", "%5c"}) {
    for (size_t at = path.find('%'); at != std::string_view::npos; at = path.find('%', at + 1)) {
      if (equals_ignoring_case(path.substr(at, 3), encoded)) return true;
    }
  }
  for (size_t start = 1; start <= path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view segment = path.substr(start, end - start);
    if (segment == "." || segment == "..") return true;
    start = end + 1;
  }
  return false;
}

bool request_matches(const InjectRule& rule, std::string_view method, std::string_view target) {
  if (rule.method && *rule.method != method) return false;
  if (rule.path_prefix && (is_ambiguous_path(target) || !target.starts_with(*rule.path_prefix))) {
    return false;
  }
  return true;
}

}  // namespace

bool is_valid_secret_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxSecretName || is_digit(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return is_alpha(c) || is_digit(c) || c == '_'; });
}

Result<void> validate_rule(const InjectRule& rule) {
  if (rule.match_hosts.empty()) return invalid("\"match_hosts\" is empty");
  for (const Rule& host : rule.match_hosts) {
    if (host.kind == RuleKind::kCidr || host.port) {
      return invalid("match_hosts \"" + host.to_string() +
                     "\": a name or *.suffix without a port (TLS is terminated by name)");
    }
  }
  if (rule.method && !is_token(*rule.method)) {
    return invalid("method \"" + *rule.method + "\" is not a token");
  }
  if (rule.method && std::any_of(rule.method->begin(), rule.method->end(),
                                 [](char c) { return c >= 'a' && c <= 'z'; })) {
    return invalid("method \"" + *rule.method + "\" is not uppercase (methods are case-sensitive)");
  }
  if (rule.path_prefix &&
      (!rule.path_prefix->starts_with('/') || !is_field_value(*rule.path_prefix) ||
       rule.path_prefix->find_first_of(" \t") != std::string::npos)) {
    return invalid("path_prefix \"" + *rule.path_prefix + "\" is not a path starting with /");
  }
  if (rule.headers.empty()) return invalid("\"headers\" is empty");
  for (size_t i = 0; i < rule.headers.size(); ++i) {
    const InjectHeader& header = rule.headers[i];
    if (header.name.size() > kMaxHeaderName || !is_token(header.name)) {
      return invalid("header \"" + header.name + "\" is not a field name (RFC 9110 token)");
    }
    if (equals_ignoring_case(header.name, "host") ||
        equals_ignoring_case(header.name, "content-length") ||
        equals_ignoring_case(header.name, "transfer-encoding")) {
      return invalid("header \"" + header.name + "\" frames or routes the request: not settable");
    }
    if (!is_valid_secret_name(header.secret)) {
      return invalid("header \"" + header.name + "\": secret \"" + header.secret +
                     "\" is not a secret name ([A-Za-z_][A-Za-z0-9_]*, at most 128)");
    }
    if (header.prefix.size() > kMaxPrefix || !is_field_value(header.prefix)) {
      return invalid("header \"" + header.name + "\": the prefix has control characters");
    }
    for (size_t j = 0; j < i; ++j) {
      if (equals_ignoring_case(rule.headers[j].name, header.name)) {
        return invalid("header \"" + header.name + "\" is set twice");
      }
    }
  }
  return {};
}

bool terminates(std::span<const InjectRule> rules, std::string_view host) {
  return std::any_of(rules.begin(), rules.end(),
                     [&](const InjectRule& rule) { return host_matches(rule, host); });
}

std::vector<const InjectRule*> rules_for(std::span<const InjectRule> rules, std::string_view host,
                                         std::string_view method, std::string_view target) {
  std::vector<const InjectRule*> applying;
  for (const InjectRule& rule : rules) {
    if (host_matches(rule, host) && request_matches(rule, method, target)) {
      applying.push_back(&rule);
    }
  }
  return applying;
}

Result<std::vector<HeaderValue>> headers_to_set(std::span<const InjectRule* const> rules,
                                                const SecretLookup& lookup) {
  std::vector<HeaderValue> set;
  for (const InjectRule* rule : rules) {
    for (const InjectHeader& header : rule->headers) {
      auto value = lookup(header.secret);
      if (!value) {
        return kind_error(
            ErrorKind::kNotFound, "inject",
            "secret \"" + header.secret + "\" for header \"" + header.name + "\" is not set");
      }
      auto same = std::find_if(set.begin(), set.end(), [&](const HeaderValue& v) {
        return equals_ignoring_case(v.name, header.name);
      });
      if (same == set.end()) same = set.insert(set.end(), HeaderValue{header.name, ""});
      same->value = header.prefix + *value;
    }
  }
  return set;
}

void PlaceholderScanner::add(std::string secret, std::string placeholder) {
  entries_.push_back({std::move(secret), std::move(placeholder)});
}

std::vector<PlaceholderHit> PlaceholderScanner::scan(std::span<const uint8_t> bytes) const {
  return scan(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// Every placeholder starts with kPlaceholderPrefix: one search for it, then a comparison with
// each known placeholder at each place it occurs.
std::vector<PlaceholderHit> PlaceholderScanner::scan(std::string_view text) const {
  std::vector<PlaceholderHit> hits;
  for (size_t at = text.find(kPlaceholderPrefix); at != std::string_view::npos;
       at = text.find(kPlaceholderPrefix, at + 1)) {
    for (const Entry& entry : entries_) {
      if (text.substr(at).starts_with(entry.placeholder)) hits.push_back({entry.secret, at});
    }
  }
  return hits;
}

Result<std::string> rewrite_head(std::string_view head, std::span<const HeaderValue> set) {
  const auto refuse = [](std::string detail) {
    return kind_error(ErrorKind::kInvalid, "rewrite head", std::move(detail));
  };
  if (head.size() > kMaxHttpHead || !head.ends_with("\r\n\r\n")) {
    return refuse("not a complete head of at most " + std::to_string(kMaxHttpHead) + " bytes");
  }
  for (const HeaderValue& header : set) {
    if (header.name.size() > kMaxHeaderName || !is_token(header.name)) {
      return refuse("header \"" + header.name + "\" is not a field name");
    }
    // The value is a secret: the error names the header only.
    if (!is_field_value(header.value)) {
      return refuse("the value for header \"" + header.name + "\" has control characters");
    }
  }
  std::string out;
  out.reserve(head.size());
  const std::string_view lines = head.substr(0, head.size() - 2);  // each line ends in CRLF
  size_t start = 0;
  for (bool first = true; start < lines.size(); first = false) {
    const size_t end = lines.find("\r\n", start);
    const std::string_view line = lines.substr(start, end - start);
    start = end + 2;
    if (line.find_first_of("\r\n") != std::string_view::npos) return refuse("bare CR or LF");
    if (!first) {
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) return refuse("a header line without a colon");
      const std::string_view name = line.substr(0, colon);
      // "Authorization :" would escape the comparison below and still reach a lenient server.
      if (!is_token(name)) return refuse("a header name that is not a token");
      if (std::any_of(set.begin(), set.end(),
                      [&](const HeaderValue& h) { return equals_ignoring_case(h.name, name); })) {
        continue;
      }
    }
    out.append(line);
    out.append("\r\n");
  }
  for (const HeaderValue& header : set) {
    out.append(header.name).append(": ").append(header.value).append("\r\n");
  }
  out.append("\r\n");
  if (out.size() > kMaxHttpHead) {
    explicit_bzero(out.data(), out.size());
    return refuse("the head would exceed " + std::to_string(kMaxHttpHead) + " bytes");
  }
  return out;
}

}  // namespace hutch::net
