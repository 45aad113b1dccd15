// DNS messages (RFC 1035) as the engine's stub resolver meets them: queries from the sandbox
// (hostile input), the replies it builds, and answers from the upstream resolver on the host.
// Every read is bounds-checked; nothing here trusts a length or an offset it was given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/address.h"
#include "runtime/base/error.h"

namespace hutch::net {

inline constexpr uint16_t kDnsTypeA = 1;
inline constexpr uint16_t kDnsTypeCname = 5;
inline constexpr uint16_t kDnsTypeAaaa = 28;
inline constexpr uint16_t kDnsClassIn = 1;

inline constexpr uint8_t kRcodeNoError = 0;
inline constexpr uint8_t kRcodeFormErr = 1;
inline constexpr uint8_t kRcodeServFail = 2;
inline constexpr uint8_t kRcodeNxDomain = 3;
inline constexpr uint8_t kRcodeRefused = 5;

struct DnsQuery {
  uint16_t id = 0;
  uint16_t flags = 0;  // as sent: opcode and RD are echoed in the reply
  std::string name;    // dotted, lowercase, no trailing dot; "" for the root
  uint16_t type = 0;
  uint16_t klass = 0;
  std::vector<uint8_t> question;  // the question's wire bytes, echoed verbatim (0x20 case bits)
};

// One standard query (opcode QUERY, QR clear) with exactly one question and nothing in the
// answer and authority sections; an additional section of at most one record (EDNS OPT) is
// ignored. Compression pointers in the question are refused: a query has nothing to point at.
// A label holding a byte outside printable ASCII or a '.' is refused, so `name` is unambiguous.
Result<DnsQuery> parse_dns_query(std::span<const uint8_t> packet);

// A reply with this rcode and no records (NXDOMAIN for a denied name, REFUSED, SERVFAIL).
std::vector<uint8_t> build_dns_error(const DnsQuery& query, uint8_t rcode);
// A header-only FORMERR for a packet parse_dns_query refused, when it has a query's header to
// answer (12 bytes, QR clear); empty otherwise (drop it).
std::vector<uint8_t> build_dns_format_error(std::span<const uint8_t> packet);
// A NOERROR reply holding the given addresses of the query's type (A: IPv4, AAAA: IPv6; the
// others are left out, so an empty answer is NODATA), each with this TTL.
std::vector<uint8_t> build_dns_answer(const DnsQuery& query, std::span<const Address> addresses,
                                      uint32_t ttl);

struct DnsAnswer {
  uint8_t rcode = 0;
  std::vector<Address> addresses;   // A and AAAA records of the name or of its CNAME chain
  std::vector<std::string> cnames;  // the chain's targets, in the order followed
  uint32_t ttl = 0;                 // the smallest TTL among the records used
};

// An upstream resolver's answer to the query `id` for `name` (normalised): compression allowed
// (pointers must point backwards, so loops end), truncated messages and TC refused (the caller
// retries over TCP), CNAME chains followed within the answer up to 8 links, records of other
// names ignored.
Result<DnsAnswer> parse_dns_answer(std::span<const uint8_t> packet, uint16_t id,
                                   std::string_view name);

}  // namespace hutch::net
