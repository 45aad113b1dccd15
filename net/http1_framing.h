// Where an HTTP/1.1 request from the sandbox ends (RFC 9112 6 and 7.1), read strictly so that the
// engine and the upstream cannot read one byte stream as different requests (request smuggling):
// the body's framing from a complete head, a chunked body's chunk lines and trailers, whether the
// request asks to switch protocols, and the status of the response to such a request. Pure logic:
// the relay's HTTP/1.1 exchange (net/engine/http1_exchange.cc) applies it to the bytes it reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch::net {

// The longest chunk-size line (hex digits and extensions) taken; longer is refused.
inline constexpr size_t kMaxChunkLine = 4096;
// A chunk size has at most 16 hex digits: it fits 64 bits, and 2^64 cannot be spelt.
inline constexpr size_t kMaxChunkDigits = 16;

struct BodyFraming {
  enum class Kind : uint8_t { kNone, kLength, kChunked };
  Kind kind = Kind::kNone;
  uint64_t length = 0;  // kLength
};

// The framing of the body after a complete request head (as parse_http_head accepted it):
// Content-Length, "Transfer-Encoding: chunked", or none (RFC 9112 6.3: a request without either
// has no body). Refused (kInvalid, the detail names the fault) rather than guessed, because a
// server could read it otherwise: Content-Length with Transfer-Encoding, two Content-Length
// fields (even equal ones), a Content-Length that is not digits or overflows 64 bits, a
// Transfer-Encoding other than exactly one "chunked" (gzip, "chunked, chunked", two fields).
Result<BodyFraming> request_framing(std::string_view head);

// Whether the head asks to switch protocols (RFC 9110 7.8): an Upgrade field and "upgrade" among
// the Connection field's options. The engine then looks at the response for a 101.
bool wants_upgrade(std::string_view head);

// The head with every Upgrade offer but WebSocket's taken out (a proxy may drop offers: RFC 9110
// 7.8), and HTTP2-Settings with them; nullopt if it offers nothing else. What follows a 101 is
// spliced unread: WebSocket's frames carry no host, but HTTP/2 after "Upgrade: h2c" names one
// (:authority) on every stream, which nothing would compare with the connection's name.
std::optional<std::string> only_websocket_upgrade(std::string_view head);

// A chunked body read as it arrives: each call is given the bytes not yet taken, from where the
// previous call stopped, and says how many of them are body (to forward as they are).
class ChunkedBody {
 public:
  struct Scan {
    size_t body = 0;    // bytes at the start of the input that belong to the body
    bool done = false;  // the body (through its trailers' empty line) ends within `body`
    // The trailer section (fields and the empty line) when it is within `body`: the caller
    // checks it before forwarding.
    size_t trailers_at = 0, trailers_size = 0;
    std::string error;  // not empty: broken or hostile framing; nothing more may be forwarded
  };
  // Strict: a chunk-size line is 1 to 16 hex digits, then optional extensions
  // (";" name ["=" token or quoted-string], whitespace around them), then CRLF, at most
  // kMaxChunkLine bytes; the chunk's data ends with CRLF; a trailer section is field lines
  // ("name: value", no folding, no control bytes) of at most 64 KiB in all, with no
  // Content-Length, Transfer-Encoding or Host among them. A bare CR or LF is refused anywhere.
  Scan scan(std::span<const uint8_t> bytes);

 private:
  enum class State : uint8_t { kSize, kData, kDataEnd, kTrailers, kDone };
  State state_ = State::kSize;
  uint64_t left_ = 0;  // kData: bytes of the chunk still to come
};

// The response to a request that asked to switch protocols, read up to its head's end.
struct ResponseHead {
  enum class Status : uint8_t { kComplete, kNeedMore, kMalformed };
  Status status = Status::kNeedMore;
  int code = 0;          // kComplete: the status code
  size_t head_size = 0;  // kComplete: bytes through the empty line
};
// Only the status line is parsed ("HTTP/1.x NNN ..."); the fields are passed on as they are.
ResponseHead parse_response_head(std::span<const uint8_t> bytes);

}  // namespace hutch::net
