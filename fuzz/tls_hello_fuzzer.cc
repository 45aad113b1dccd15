// The ClientHello reader (net/tls_hello.h) on any first bytes of a connection: a status, never
// a crash or undefined behaviour. A complete hello stays complete, with the same name, when more
// bytes follow it; a name the policy accepts is a host name of at most 253 characters.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "net/policy.h"
#include "net/tls_hello.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hutch::net;
  const std::span<const uint8_t> bytes(data, size);
  const ClientHello hello = parse_client_hello(bytes);
  if (hello.status == HelloStatus::kComplete) {
    if (hello.server_name.empty()) std::abort();
    if (auto name = normalize_name(hello.server_name);
        name && (name->empty() || name->size() > 253)) {
      std::abort();
    }
  }
  if (hello.status != HelloStatus::kComplete && !hello.server_name.empty()) std::abort();
  if ((hello.status == HelloStatus::kNotTls || hello.status == HelloStatus::kMalformed) &&
      hello.detail.empty()) {
    std::abort();
  }
  if (size > 0) {
    const ClientHello shorter = parse_client_hello(bytes.first(size - 1));
    if (shorter.status == HelloStatus::kComplete &&
        (hello.status != HelloStatus::kComplete || hello.server_name != shorter.server_name)) {
      std::abort();
    }
  }
  return 0;
}
