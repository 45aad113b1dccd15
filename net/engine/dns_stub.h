// The DNS stub's answers (the engine does the sockets): allowed names get their fake address for
// A and an empty NOERROR for every other type (AAAA, HTTPS/SVCB: clients fall back to IPv4 and
// TLS keeps its SNI readable); refused names get NXDOMAIN and are never forwarded anywhere;
// malformed queries get FORMERR (or nothing, when there is no header to answer).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/address.h"
#include "net/engine/fake_names.h"
#include "net/policy.h"

namespace hutch::net {

// Fake addresses never change for a sandbox, but a policy can: keep caches short so that a name
// denied later stops being asked for soon (the relay decides every connection anyway).
inline constexpr uint32_t kFakeTtl = 60;

struct DnsStubAnswer {
  std::vector<uint8_t> reply;       // empty: send nothing
  std::optional<std::string> name;  // the query's name, when it parsed
  uint16_t type = 0;
  Decision decision;                        // of the name (a malformed query is denied)
  std::optional<Address> new_fake_address;  // allocated by this query: tell the NameSink
};

DnsStubAnswer answer_dns_query(std::span<const uint8_t> packet, const Policy& policy,
                               FakeNames& names);

}  // namespace hutch::net
