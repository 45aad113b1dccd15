// The head of a plain-HTTP/1.x request from the sandbox (RFC 9112), read far enough to decide on
// it: method, target and the host it is for; and the 403 the engine answers a denied one with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hutch::net {

inline constexpr size_t kMaxHttpHead = 64 * 1024;

enum class HeadStatus : uint8_t {
  kComplete,   // a whole head (through the empty line)
  kNeedMore,   // no empty line yet, and under kMaxHttpHead
  kMalformed,  // broken or ambiguous: answer 400 and close
};

struct HttpHead {
  HeadStatus status = HeadStatus::kNeedMore;
  std::string method;
  std::string target;  // as sent: origin-form "/x", absolute-form "http://h/x", authority "h:443"
  // The host the request is for, without port or brackets: from an absolute-form or CONNECT
  // target, else the Host header. When both are there they must agree (RFC 9112 3.2.2 lets the
  // target win; a proxy that checks one and forwards the other would be fooled).
  std::string host;
  std::optional<uint16_t> port;  // if the target or Host named one
  size_t head_size = 0;          // bytes through the empty line (kComplete)
  std::string detail;            // for kMalformed
};

// Refused: a request line that is not "METHOD SP target SP HTTP/1.0|1.1", bare CR or LF,
// obsolete line folding, whitespace before a header's colon, a duplicate Host, an HTTP/1.1
// request with no host at all, userinfo ("user@host") in an authority.
HttpHead parse_http_head(std::span<const uint8_t> bytes);

// `text` as a JSON string, quoted, with quotes, backslashes, control and non-ASCII bytes escaped
// (a hostile Host may hold invalid UTF-8, and a body must stay JSON).
void append_json_string(std::string& out, std::string_view text);

// The JSON body of a denial, {"error":"network_denied","host":...,"port":...,"rule":...,
// "reason":...} (strings escaped): the HTTP/1.1 403 below carries it, and so does a refused
// HTTP/2 stream's 403.
std::string build_forbidden_body(std::string_view host, uint16_t port, std::string_view rule,
                                 std::string_view reason);

// The answer to a head or framing that cannot be read safely; the connection then closes.
inline constexpr std::string_view kBadRequestResponse =
    "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

// "HTTP/1.1 403 Forbidden" with Connection: close and the body above.
std::string build_forbidden_response(std::string_view host, uint16_t port, std::string_view rule,
                                     std::string_view reason);

}  // namespace hutch::net
