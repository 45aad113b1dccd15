// The DNS stub's parsers (net/dns_message.h) on any bytes, as a query from the sandbox and as
// an upstream answer: an Error or a result, never a crash or undefined behaviour. A query that
// parses must give replies that parse back to the same id and rcode.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "net/dns_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hutch::net;
  const std::span<const uint8_t> packet(data, size);
  if (auto query = parse_dns_query(packet)) {
    const Address addresses[] = {Address::v4(0xc6120001), *Address::parse("2001:db8::1")};
    for (const auto& reply :
         {build_dns_error(*query, kRcodeNxDomain), build_dns_answer(*query, addresses, 60)}) {
      auto answer = parse_dns_answer(reply, query->id, query->name);
      if (!answer) std::abort();
      const bool typed = query->type == kDnsTypeA || query->type == kDnsTypeAaaa;
      if (answer->rcode == kRcodeNoError && typed && query->klass == kDnsClassIn &&
          answer->addresses.size() != 1) {
        std::abort();
      }
    }
  } else if (query.error().message().empty()) {
    std::abort();
  }
  const uint16_t id = size >= 2 ? static_cast<uint16_t>(data[0] << 8 | data[1]) : 0;
  auto answer = parse_dns_answer(packet, id, "example.com");
  if (!answer && answer.error().message().empty()) std::abort();
  if (answer && answer->cnames.size() > 8) std::abort();
  const auto formerr = build_dns_format_error(packet);
  if (!formerr.empty() && formerr.size() != 12) std::abort();
  return 0;
}
