// The server name (SNI, RFC 6066) and ALPN protocols (RFC 7301) of a TLS ClientHello, read from
// the first bytes the sandbox sends on a connection, before anything is forwarded.
//
// A ClientHello may be split over several handshake records (RFC 8446 5.1 allows any
// fragmentation; large post-quantum key shares make it more likely): consecutive handshake
// records are reassembled until the whole message is there, up to kMaxClientHello bytes. A
// record of another type before the hello is complete is malformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hutch::net {

enum class HelloStatus : uint8_t {
  kComplete,   // a whole ClientHello with a server name
  kNoSni,      // a whole ClientHello without a server_name extension (or one with no host_name)
  kNeedMore,   // a valid prefix: read more bytes and call again with all of them
  kNotTls,     // the first bytes are not a TLS handshake record holding a ClientHello
  kMalformed,  // looks like TLS, breaks its rules (lengths, duplicates, an oversized hello)
};

inline constexpr size_t kMaxClientHello = 64 * 1024;

struct ClientHello {
  HelloStatus status = HelloStatus::kNeedMore;
  std::string server_name;        // as sent (kComplete only): the policy normalises it
  std::vector<std::string> alpn;  // in the client's order, possibly empty
  std::string detail;             // for kNotTls and kMalformed: what was wrong
};

ClientHello parse_client_hello(std::span<const uint8_t> bytes);

std::string_view hello_status_name(HelloStatus status);

}  // namespace hutch::net
