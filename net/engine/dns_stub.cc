#include "net/engine/dns_stub.h"

#include <array>

#include "net/dns_message.h"

namespace hutch::net {

DnsStubAnswer answer_dns_query(std::span<const uint8_t> packet, const Policy& policy,
                               FakeNames& names) {
  DnsStubAnswer out;
  auto query = parse_dns_query(packet);
  if (!query) {
    out.reply = build_dns_format_error(packet);
    out.decision = {false, "name", "malformed DNS query: " + query.error().detail};
    return out;
  }
  out.name = query->name;
  out.type = query->type;
  out.decision = decide_name(policy, query->name);
  if (!out.decision.allowed) {
    out.reply = build_dns_error(*query, kRcodeNxDomain);
    return out;
  }
  if (query->klass != kDnsClassIn || query->type != kDnsTypeA) {
    out.reply = build_dns_answer(*query, {}, kFakeTtl);
    return out;
  }
  auto assigned = names.assign(query->name);
  if (!assigned) {
    out.reply = build_dns_error(*query, kRcodeServFail);
    out.decision = {false, "name", assigned.error().message()};
    return out;
  }
  if (assigned->is_new) out.new_fake_address = assigned->address;
  const std::array addresses{assigned->address};
  out.reply = build_dns_answer(*query, addresses, kFakeTtl);
  return out;
}

}  // namespace hutch::net
