// ANY /v1/sandboxes/{id}/ports/{port}/{path...}: the request goes to the sandbox's
// 127.0.0.1:port (or [::1]) over a connection made inside its network namespace, with hutchd's
// own credentials taken out, its body streamed in; the answer streams back (a large or endless
// body, server-sent events). One upstream connection per request (Connection: close), so the
// answer's end is the server's. And the per-port tokens' routes.
#include "daemon/port_routes.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/codec/fields.h"
#include "daemon/codec/time.h"
#include "daemon/errors.h"
#include "daemon/service/port_service.h"
#include "runtime/base/socket_relay.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

constexpr const char* kTokenHeader = "X-Hutch-Port-Token";
constexpr std::string_view kTokenParam = "hutch_port_token";  // query parameter and cookie
constexpr auto kConnectTimeout = std::chrono::milliseconds(5000);
// For the head of the answer; the body then waits as long as the client stays.
constexpr auto kHeadTimeout = std::chrono::seconds(120);
constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kReadSize = 64 * 1024;

std::string lower(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// 1..65535 in plain decimal: the path's port is also the cookie's path, so one spelling only.
std::optional<uint16_t> parse_port(std::string_view text) {
  if (text.empty() || text.size() > 5 || text.front() == '0' ||
      text.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  unsigned value = std::stoul(std::string(text));
  if (value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

uint16_t port_of(const httplib::Request& req) {
  std::string text = req.matches.size() > 2 ? req.matches[2].str() : "";
  auto port = parse_port(text);
  if (!port)
    throw ApiError(400, "invalid_port",
                   "port must be a number 1..65535, got \"" + text.substr(0, 20) + "\"");
  return *port;
}

std::string prefix_of(const std::string& id, uint16_t port) {
  return "/v1/sandboxes/" + id + "/ports/" + std::to_string(port);
}

// The paths a port token opens: the proxy's, /v1/sandboxes/{id}/ports/{port}[/...] (every path of
// the sandbox's server: the tokens' routes are under /port-tokens/), and the port's tunnel,
// /v1/sandboxes/{id}/tunnel/{port}.
struct PortPath {
  std::string sandbox;
  uint16_t port = 0;
};
std::optional<PortPath> parse_port_path(std::string_view path) {
  constexpr std::string_view kHead = "/v1/sandboxes/";
  if (!path.starts_with(kHead)) return std::nullopt;
  path.remove_prefix(kHead.size());
  size_t slash = path.find('/');
  std::string_view id = path.substr(0, slash);
  if (id.empty() || slash == std::string_view::npos ||
      id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") !=
          std::string_view::npos)
    return std::nullopt;
  path.remove_prefix(slash);
  if (path.starts_with("/tunnel/")) {
    auto port = parse_port(path.substr(8));
    if (!port) return std::nullopt;
    return PortPath{std::string(id), *port};
  }
  if (!path.starts_with("/ports/")) return std::nullopt;
  path.remove_prefix(7);
  slash = path.find('/');
  auto port = parse_port(path.substr(0, slash));
  if (!port) return std::nullopt;
  return PortPath{std::string(id), *port};
}

// The values of cookie `name` in the request's Cookie headers (a browser sends one per matching
// path).
std::vector<std::string> cookie_values(const httplib::Request& req, std::string_view name) {
  std::vector<std::string> values;
  size_t count = req.get_header_value_count("Cookie");
  for (size_t i = 0; i < count; ++i) {
    std::string header = req.get_header_value("Cookie", i);
    std::string_view rest = header;
    while (!rest.empty()) {
      size_t end = std::min(rest.find(';'), rest.size());
      std::string_view pair = trim(rest.substr(0, end));
      rest.remove_prefix(std::min(end + 1, rest.size()));
      size_t eq = pair.find('=');
      if (eq != std::string_view::npos && trim(pair.substr(0, eq)) == name)
        values.emplace_back(trim(pair.substr(eq + 1)));
    }
  }
  return values;
}

// A Cookie header without hutchd's cookie ("" when nothing is left).
std::string cookie_without_token(std::string_view header) {
  std::string out;
  while (!header.empty()) {
    size_t end = std::min(header.find(';'), header.size());
    std::string_view pair = trim(header.substr(0, end));
    header.remove_prefix(std::min(end + 1, header.size()));
    size_t eq = pair.find('=');
    if (pair.empty() || trim(pair.substr(0, eq)) == kTokenParam) continue;
    out += (out.empty() ? "" : "; ") + std::string(pair);
  }
  return out;
}

// The raw query without hutchd's token parameter.
std::string query_without_token(std::string_view query) {
  std::string out;
  while (!query.empty()) {
    size_t end = std::min(query.find('&'), query.size());
    std::string_view part = query.substr(0, end);
    query.remove_prefix(std::min(end + 1, query.size()));
    std::string_view name = part.substr(0, part.find('='));
    if (part.empty() || httplib::detail::decode_url(std::string(name), true) == kTokenParam)
      continue;
    out += (out.empty() ? "" : "&") + std::string(part);
  }
  return out;
}

// Waits for room on a full socket (the client's are non-blocking; the sandbox's time out) for
// up to a minute at a time.
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd writable{fd, POLLOUT, 0};
      if (::poll(&writable, 1, 60000) <= 0) return false;
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Headers never forwarded either way: hop-by-hop ones (RFC 9110 7.6.1) and the framing, which
// each side sets for its own connection.
bool hop_by_hop(const std::string& name) {
  static const char* const kNames[] = {"connection",
                                       "keep-alive",
                                       "proxy-authenticate",
                                       "proxy-authorization",
                                       "proxy-connection",
                                       "te",
                                       "trailer",
                                       "transfer-encoding",
                                       "upgrade",
                                       "content-length"};
  return std::ranges::any_of(kNames, [&](const char* hop) { return name == hop; });
}

// The header names a Connection header lists (hop-by-hop too), lowercase.
std::vector<std::string> connection_tokens(const httplib::Headers& headers) {
  std::vector<std::string> names;
  for (auto [it, end] = headers.equal_range("Connection"); it != end; ++it) {
    std::string_view rest = it->second;
    while (!rest.empty()) {
      size_t comma = std::min(rest.find(','), rest.size());
      names.push_back(lower(trim(rest.substr(0, comma))));
      rest.remove_prefix(std::min(comma + 1, rest.size()));
    }
  }
  return names;
}

// The sandbox's answer as it arrives: the connection and what was read of it but not yet used.
struct Upstream {
  enum class Fill { kData, kEof, kError };
  UniqueFd fd;
  std::string buffer;
  // Reads what is there into `buffer`, waiting up to `timeout`, or, with `keep_waiting`, as
  // long as it says (asked every second).
  Fill fill(std::chrono::milliseconds timeout, const std::function<bool()>& keep_waiting) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      pollfd p{fd.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, 1000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return Fill::kError;
      if (ready == 0) {
        bool go_on = keep_waiting ? keep_waiting() : std::chrono::steady_clock::now() < deadline;
        if (!go_on) return Fill::kError;
        continue;
      }
      char chunk[kReadSize];
      ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Fill::kError;
      if (n == 0) return Fill::kEof;
      buffer.append(chunk, static_cast<size_t>(n));
      return Fill::kData;
    }
  }
};

struct UpstreamHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
};

// "HTTP/1.x NNN reason" CRLF, then "name: value" lines (no folding), through the empty line.
std::optional<UpstreamHead> parse_response_head(std::string_view head) {
  UpstreamHead parsed;
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  if (line.size() < 12 || !(line.starts_with("HTTP/1.1 ") || line.starts_with("HTTP/1.0 ")) ||
      line.substr(9, 3).find_first_not_of("0123456789") != std::string_view::npos ||
      (line.size() > 12 && line[12] != ' '))
    return std::nullopt;
  parsed.status = std::stoi(std::string(line.substr(9, 3)));
  if (parsed.status < 100) return std::nullopt;
  head.remove_prefix(eol + 2);
  while (!head.empty()) {
    eol = head.find("\r\n");
    if (eol == std::string_view::npos) return std::nullopt;
    line = head.substr(0, eol);
    head.remove_prefix(eol + 2);
    if (line.empty()) break;
    size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos ||
        line.substr(0, colon).find_first_of(" \t") != std::string_view::npos ||
        line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos)
      return std::nullopt;
    parsed.headers.emplace_back(std::string(line.substr(0, colon)),
                                std::string(trim(line.substr(colon + 1))));
  }
  return parsed;
}

// The client's connection closes after this answer: the request's body may be left unread, and
// would be read as the next request.
void close_after_answer(httplib::Response& res) {
  res.set_header("Connection", "close");
  if (Connection* connection = current_connection()) connection->close_after_response();
}

// A connection to the sandbox's port, or the ApiError that says why there is none.
UniqueFd connect_or_throw(const Sandbox& sandbox, uint16_t port) {
  if (sandbox.config().network.mode == net::Mode::kNone)
    throw ApiError(502, "port_unreachable",
                   "port " + std::to_string(port) +
                       " cannot be reached: the sandbox has network \"none\", so its loopback "
                       "is down and nothing in it can listen; create it with network "
                       "\"loopback\"");
  auto connected = service::connect_to_port(sandbox.live(), port, kConnectTimeout);
  if (!connected && connected.error().code == "port_unreachable")
    throw ApiError(502, "port_unreachable", connected.error().message);
  return or_throw(std::move(connected));
}

ApiError bad_gateway(uint16_t port, const std::string& why) {
  return ApiError(502, "bad_gateway",
                  "the server on port " + std::to_string(port) + " inside the sandbox " + why);
}

// How the answer's body ends (RFC 9112 6.3).
enum class BodyEnd { kNone, kChunked, kLength, kClose };

// What the port routes share: the tokens, and whether the daemon is stopping (tunnels and
// streams then end).
struct PortState {
  explicit PortState(SandboxRegistry& registry)
      : tokens([&registry](const std::string& id) { return registry.find(id) != nullptr; }) {}
  service::PortTokens tokens;
  std::atomic<bool> stopping{false};
};

// Relays the answer's body to the client; one call for the whole body, like a streamed exec.
struct Relay {
  Upstream upstream;
  BodyEnd end = BodyEnd::kClose;
  uint64_t length = 0;
  std::shared_ptr<Sandbox> sandbox;
  std::unique_ptr<Sandbox::ExecGuard> busy;  // holds the idle reaper off while it streams
  std::shared_ptr<void> slot;
  std::shared_ptr<PortState> state;

  bool run(httplib::DataSink& sink) {
    auto client_there = [&] {
      return !state->stopping.load() && (!sink.is_writable || sink.is_writable());
    };
    auto fill = [&] { return upstream.fill(kHeadTimeout, client_there); };
    std::string& buffer = upstream.buffer;
    auto pass = [&](size_t n) {
      bool ok = sink.write(buffer.data(), n);
      buffer.erase(0, n);
      return ok;
    };
    switch (end) {
      case BodyEnd::kNone:
        break;
      case BodyEnd::kClose:
        while (true) {
          if (!buffer.empty() && !pass(buffer.size())) return false;
          Upstream::Fill got = fill();
          if (got == Upstream::Fill::kEof) break;
          if (got == Upstream::Fill::kError) return false;
        }
        break;
      case BodyEnd::kLength:
        while (length > 0) {
          if (buffer.empty() && fill() != Upstream::Fill::kData) return false;
          size_t n = static_cast<size_t>(std::min<uint64_t>(length, buffer.size()));
          if (!pass(n)) return false;
          length -= n;
        }
        break;
      case BodyEnd::kChunked:
        if (!relay_chunks(fill, pass)) return false;
        break;
    }
    sink.done();
    return true;
  }

  template <class FillFn, class PassFn>
  bool relay_chunks(FillFn& fill, PassFn& pass) {
    std::string& buffer = upstream.buffer;
    auto line = [&]() -> std::optional<std::string> {
      size_t eol;
      while ((eol = buffer.find("\r\n")) == std::string::npos) {
        if (buffer.size() > kMaxHead || fill() != Upstream::Fill::kData) return std::nullopt;
      }
      std::string text = buffer.substr(0, eol);
      buffer.erase(0, eol + 2);
      return text;
    };
    while (true) {
      auto size_line = line();
      if (!size_line) return false;
      std::string hex(trim(std::string_view(*size_line).substr(0, size_line->find(';'))));
      if (hex.empty() || hex.size() > 15 ||
          hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        return false;
      uint64_t size = std::stoull(hex, nullptr, 16);
      if (size == 0) break;
      while (size > 0) {
        if (buffer.empty() && fill() != Upstream::Fill::kData) return false;
        size_t n = static_cast<size_t>(std::min<uint64_t>(size, buffer.size()));
        if (!pass(n)) return false;
        size -= n;
      }
      auto crlf = line();
      if (!crlf || !crlf->empty()) return false;
    }
    // Trailers are not forwarded: read through the empty line.
    while (true) {
      auto trailer = line();
      if (!trailer) return false;
      if (trailer->empty()) return true;
    }
  }
};

// The request head for the sandbox's server.
std::string upstream_head(const DaemonContext& context, const httplib::Request& req, uint16_t port,
                          const std::string& target, const std::string& prefix, bool chunked,
                          uint64_t length, bool upgrade) {
  std::vector<std::string> listed = connection_tokens(req.headers);
  const std::string bearer = "Bearer " + context.options.token;
  std::string head = req.method + " " + target + " HTTP/1.1\r\n";
  head += "Host: 127.0.0.1:" + std::to_string(port) + "\r\n";
  for (const auto& [name, value] : req.headers) {
    std::string key = lower(name);
    if (hop_by_hop(key) || std::ranges::find(listed, key) != listed.end()) continue;
    // httplib's own entries (not headers the client sent), then what hutchd replaces, then
    // hutchd's credentials: the sandbox never sees them.
    if (key == "remote_addr" || key == "remote_port" || key == "local_addr" ||
        key == "local_port" || key == "host" || key == "expect" || key.starts_with("x-forwarded-"))
      continue;
    if (key == lower(kTokenHeader)) continue;
    if (key == "authorization" && !context.options.token.empty() &&
        service::constant_time_equal(value, bearer))
      continue;
    if (key == "cookie") {
      std::string kept = cookie_without_token(value);
      if (!kept.empty()) head += "Cookie: " + kept + "\r\n";
      continue;
    }
    head += name + ": " + value + "\r\n";
  }
  // (On the unix socket remote_addr is the guard's "uid N", no address.)
  if (!req.remote_addr.empty() && req.remote_addr.find(' ') == std::string::npos)
    head += "X-Forwarded-For: " + req.remote_addr + "\r\n";
  if (req.has_header("Host")) head += "X-Forwarded-Host: " + req.get_header_value("Host") + "\r\n";
  head += "X-Forwarded-Proto: http\r\nX-Forwarded-Prefix: " + prefix + "\r\n";
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (length > 0 || req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    head += "Content-Length: " + std::to_string(length) + "\r\n";
  }
  // An upgrade (WebSocket) keeps its two hop-by-hop headers for this one hop.
  if (upgrade) {
    head += "Upgrade: " + req.get_header_value("Upgrade") + "\r\nConnection: Upgrade\r\n\r\n";
  } else {
    head += "Connection: close\r\n\r\n";
  }
  return head;
}

// A GET asking to switch protocols (WebSocket: RFC 6455 4.1).
bool wants_upgrade(const httplib::Request& req) {
  if (req.method != "GET" || !req.has_header("Upgrade")) return false;
  std::vector<std::string> listed = connection_tokens(req.headers);
  return std::ranges::find(listed, "upgrade") != listed.end();
}

// Gives the client's connection over to the sandbox's: `first` (an answer head hutchd writes
// itself, then bytes already read from the sandbox) is written on the client's socket, and from
// then on bytes are relayed both ways. cpp-httplib cannot hand a connection over, so the request
// keeps the connection (and its worker thread) until the relay ends; the connection then closes,
// and httplib's own answer, written after, goes nowhere (the socket is shut down). The client
// must wait for the head before it sends: bytes sent earlier may be taken by httplib.
void hand_over(PortState& state, Sandbox& sandbox, int upstream, const std::string& first,
               httplib::Response& res, int status) {
  Connection* connection = current_connection();
  if (connection == nullptr) throw ApiError(500, "runtime_error", "no connection to hand over");
  connection->close_after_response();
  res.status = status;  // what the log records
  if (!send_all(connection->fd(), first)) return;
  Sandbox::ExecGuard busy(sandbox);
  relay_bytes(connection->fd(), upstream, state.stopping);
  ::shutdown(connection->fd(), SHUT_RDWR);
}

void proxy(DaemonContext& context, const std::shared_ptr<PortState>& state, Call& call,
           const httplib::Request& req, httplib::Response& res,
           const httplib::ContentReader& reader) {
  service::PortTokens& tokens = state->tokens;
  const std::string id = sandbox_id(req);
  const uint16_t port = port_of(req);
  auto sandbox = or_throw(context.registry.get(id));
  const std::string prefix = prefix_of(id, port);

  // The target as sent (not httplib's decoded path): "%2e%2e" stays what the client wrote, and
  // is the sandbox server's to read.
  size_t question = req.target.find('?');
  std::string raw_path = req.target.substr(0, question);
  std::string query = question == std::string::npos ? "" : req.target.substr(question + 1);
  if (!raw_path.starts_with(prefix) ||
      (raw_path.size() > prefix.size() && raw_path[prefix.size()] != '/'))
    throw bad_request("the sandbox id and port in a port path must not be percent-encoded");
  std::string rest = raw_path.size() > prefix.size() ? raw_path.substr(prefix.size()) : "/";
  std::string kept_query = query_without_token(query);

  // A token in the query (a link opened in a browser): checked, then traded for a cookie on
  // this port's paths; the URL the browser keeps has no token.
  if (req.has_param(std::string(kTokenParam).c_str())) {
    std::string token = req.get_param_value(std::string(kTokenParam).c_str());
    if (!tokens.accepts(id, port, token))
      throw ApiError(401, "invalid_port_token",
                     "the port token is unknown, expired, revoked, or for another port");
    res.status = 303;
    res.set_header("Location", prefix + rest + (kept_query.empty() ? "" : "?" + kept_query));
    res.set_header("Set-Cookie", std::string(kTokenParam) + "=" + token + "; Path=" + prefix +
                                     "/; HttpOnly; SameSite=Strict");
    res.set_header("Cache-Control", "no-store");
    res.set_header("Referrer-Policy", "no-referrer");
    close_after_answer(res);  // a body, if any, is left unread
    return;
  }

  Upstream upstream{connect_or_throw(*sandbox, port), {}};

  bool chunked = req.get_header_value("Transfer-Encoding") == "chunked";
  uint64_t length = req.has_header("Content-Length")
                        ? std::stoull(req.get_header_value("Content-Length"))
                        : req.body.size();
  std::string target = rest + (kept_query.empty() ? "" : "?" + kept_query);
  const bool upgrade = wants_upgrade(req);
  if (!send_all(upstream.fd.get(),
                upstream_head(context, req, port, target, prefix, chunked, length, upgrade)))
    throw bad_gateway(port, "closed the connection before the request was sent");

  // The body, as it arrives. When the server stops reading (it answered early), the rest is
  // not read: the connection then closes after the answer.
  bool upstream_closed = false;
  bool read = reader([&](const char* data, size_t size) {
    std::string framed;
    if (chunked) {
      char size_line[20];
      std::snprintf(size_line, sizeof size_line, "%zx\r\n", size);
      framed = size_line + std::string(data, size) + "\r\n";
    }
    bool sent = chunked ? send_all(upstream.fd.get(), framed)
                        : send_all(upstream.fd.get(), std::string_view(data, size));
    upstream_closed = !sent;
    return sent;
  });
  if (!read && !upstream_closed) throw bad_request("the request body could not be read");
  if (upstream_closed) close_after_answer(res);
  if (chunked && !upstream_closed) send_all(upstream.fd.get(), "0\r\n\r\n");

  // The answer's head; interim 1xx answers are dropped (hutchd sent no Expect).
  std::optional<UpstreamHead> head;
  while (!head) {
    size_t end;
    while ((end = upstream.buffer.find("\r\n\r\n")) == std::string::npos) {
      if (upstream.buffer.size() > kMaxHead)
        throw bad_gateway(port, "sent a response head over 64 KiB");
      Upstream::Fill got = upstream.fill(kHeadTimeout, nullptr);
      if (got != Upstream::Fill::kData)
        throw bad_gateway(port, got == Upstream::Fill::kEof
                                    ? "closed the connection without an answer"
                                    : "sent no answer within 120 s");
    }
    head = parse_response_head(std::string_view(upstream.buffer).substr(0, end + 4));
    if (!head) throw bad_gateway(port, "sent a malformed response head");
    if (head->status == 101) {
      if (!upgrade) throw bad_gateway(port, "switched protocols unasked");
      // The server's own head, as it sent it (Sec-WebSocket-Accept and all), then its bytes.
      return hand_over(*state, *sandbox, upstream.fd.get(), upstream.buffer, res, 101);
    }
    upstream.buffer.erase(0, end + 4);
    if (head->status < 200) head.reset();
  }

  auto relay = std::make_shared<Relay>();
  res.status = head->status;
  std::string content_type;
  std::vector<std::string> listed;
  for (const auto& [name, value] : head->headers) {
    if (lower(name) == "connection") {
      httplib::Headers one{{name, value}};
      for (auto& token : connection_tokens(one)) listed.push_back(token);
    }
  }
  for (const auto& [name, value] : head->headers) {
    std::string key = lower(name);
    if (key == "transfer-encoding") {
      relay->end = lower(value).ends_with("chunked") ? BodyEnd::kChunked : BodyEnd::kClose;
    } else if (key == "content-length" && relay->end != BodyEnd::kChunked) {
      if (value.empty() || value.size() > 19 ||
          value.find_first_not_of("0123456789") != std::string::npos ||
          (relay->end == BodyEnd::kLength && std::stoull(value) != relay->length))
        throw bad_gateway(port, "sent an invalid Content-Length");
      relay->end = BodyEnd::kLength;
      relay->length = std::stoull(value);
    }
    // A HEAD's answer keeps the length of the body it does not carry.
    if (key == "content-length" && req.method == "HEAD") res.headers.emplace(name, value);
    if (hop_by_hop(key) || std::ranges::find(listed, key) != listed.end()) continue;
    if (key == "content-type") {
      content_type = value;
      continue;
    }
    res.headers.emplace(name, value);
  }
  bool no_body = req.method == "HEAD" || head->status == 204 || head->status == 304;
  if (no_body) relay->end = BodyEnd::kNone;
  // An answer with no body under 400 goes as it is; any other goes through a provider, which
  // also keeps the server's error answers from being taken for hutchd's own (server.cc's error
  // handler leaves a response with a provider alone).
  if (no_body && head->status < 400) {
    if (!content_type.empty()) res.set_header("Content-Type", content_type);
    return;
  }
  relay->upstream = std::move(upstream);
  relay->sandbox = sandbox;
  relay->busy = std::make_unique<Sandbox::ExecGuard>(*sandbox);
  relay->slot = call.slot;
  relay->state = state;
  // Chunked towards the client whatever the server's framing: httplib would apply a Range
  // header itself to a body of known length, and the server has applied it already.
  res.set_chunked_content_provider(
      content_type, [relay](size_t, httplib::DataSink& sink) { return relay->run(sink); });
  if (content_type.empty()) res.headers.erase("Content-Type");
}

uint64_t ttl_of(const json& body) {
  check_known_fields(body, {"ttl_seconds"});
  return optional_uint(body, "ttl_seconds")
      .value_or(static_cast<uint64_t>(service::PortTokens::kDefaultTtl.count()));
}

json token_json(const service::PortTokenInfo& info) {
  return {{"id", info.id}, {"port", info.port}, {"expires_at", iso8601(info.expires_at)}};
}

// POST /v1/sandboxes/{id}/tunnel/{port}: once connected to the port, hutchd answers a bare
// "200" head itself and the connection carries the port's raw bytes (databases, ssh).
void tunnel(DaemonContext& context, const std::shared_ptr<PortState>& state,
            const httplib::Request& req, httplib::Response& res) {
  const uint16_t port = port_of(req);
  auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
  UniqueFd upstream = connect_or_throw(*sandbox, port);
  hand_over(*state, *sandbox, upstream.get(), "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", res,
            200);
}

}  // namespace

void add_port_routes(Routes& routes, DaemonContext& context) {
  SandboxRegistry& registry = context.registry;
  auto state = std::make_shared<PortState>(registry);
  routes.on_stop([state] { state->stopping.store(true); });
  std::shared_ptr<service::PortTokens> tokens(state, &state->tokens);
  // The port's group takes what a port is not ("abc", "0", "65536"), for a 400 that says so; no
  // '/' in a group: server.cc's path_matches splits patterns at every '/'.
  const std::string ports = "/v1/sandboxes/([A-Za-z0-9_-]+)/ports/([A-Za-z0-9_.%+-]+)";
  // Beside the proxy's paths, not under them: a sandbox server's own /tokens stays reachable.
  const std::string port_tokens = "/v1/sandboxes/([A-Za-z0-9_-]+)/port-tokens/([A-Za-z0-9_.%+-]+)";

  routes.post(port_tokens, [&registry, tokens](Call&, const httplib::Request& req,
                                               httplib::Response& res) {
    uint16_t port = port_of(req);
    auto sandbox = or_throw(registry.get(sandbox_id(req)));
    uint64_t ttl = ttl_of(parse_body(req));
    auto issued = or_throw(tokens->issue(
        sandbox->id(), port,
        std::chrono::seconds(std::min<uint64_t>(ttl, service::PortTokens::kMaxTtl.count() + 1))));
    json body = token_json(issued.info);
    body["token"] = issued.token;
    body["url"] =
        prefix_of(sandbox->id(), port) + "/?" + std::string(kTokenParam) + "=" + issued.token;
    send_json(res, 201, body);
  });
  routes.get(port_tokens,
             [&registry, tokens](Call&, const httplib::Request& req, httplib::Response& res) {
               uint16_t port = port_of(req);
               auto sandbox = or_throw(registry.get(sandbox_id(req)));
               json list = json::array();
               for (const auto& info : tokens->list(sandbox->id(), port))
                 list.push_back(token_json(info));
               send_json(res, 200, {{"tokens", list}});
             });
  routes.del(port_tokens + "/([A-Za-z0-9_-]+)",
             [&registry, tokens](Call&, const httplib::Request& req, httplib::Response& res) {
               uint16_t port = port_of(req);
               auto sandbox = or_throw(registry.get(sandbox_id(req)));
               if (!tokens->revoke(sandbox->id(), port, req.matches[3].str()))
                 throw ApiError(
                     404, "token_not_found",
                     "no token " + req.matches[3].str() + " on port " + std::to_string(port));
               res.status = 204;
             });
  routes.post("/v1/sandboxes/([A-Za-z0-9_-]+)/tunnel/([A-Za-z0-9_.%+-]+)",
              [&context, state](Call&, const httplib::Request& req, httplib::Response& res) {
                tunnel(context, state, req, res);
              });
  routes.any_reader(
      ports, [&context, state](Call& call, const httplib::Request& req, httplib::Response& res,
                               const httplib::ContentReader& reader) {
        try {
          proxy(context, state, call, req, res, reader);
        } catch (...) {
          // The request's body may be unread: the connection cannot carry another request.
          close_after_answer(res);
          throw;
        }
      });
  // A port token stands for the bearer token on the proxy's paths of its sandbox and port only.
  routes.set_tcp_credential([tokens](const httplib::Request& req) {
    auto path = parse_port_path(req.path);
    if (!path) return false;
    std::vector<std::string> offered = cookie_values(req, kTokenParam);
    if (req.has_header(kTokenHeader)) offered.push_back(req.get_header_value(kTokenHeader));
    if (req.has_param(std::string(kTokenParam).c_str()))
      offered.push_back(req.get_param_value(std::string(kTokenParam).c_str()));
    return std::ranges::any_of(offered, [&](const std::string& token) {
      return tokens->accepts(path->sandbox, path->port, token);
    });
  });
}

}  // namespace hutch::daemon
