// A sandbox's fake addresses: the DNS stub answers each allowed name with one address of
// 198.18.0.0/15 (RFC 2544's benchmarking range, never routed publicly), stable for the sandbox's
// lifetime, and the relay maps the address a connection was dialled at back to the name. Pure: no
// sockets, no locks (the engine guards it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "net/address.h"
#include "runtime/base/error.h"

namespace hutch::net {

class FakeNames {
 public:
  // 198.18.0.0/15 without 198.19.255.0/24, which the egress data path uses itself.
  static bool in_range(const Address& address);

  struct Assigned {
    Address address;
    bool is_new = false;  // allocated by this call: tell the NameSink
  };
  // The name's address, allocated on first use. Fails when the range is exhausted.
  Result<Assigned> assign(const std::string& name);
  // A pair persisted before a restart. Refused: an address outside the range, or one that
  // already maps to another name.
  Result<void> add_known(const Address& address, const std::string& name);
  std::optional<std::string> name_of(const Address& address) const;
  size_t size() const { return by_address_.size(); }

 private:
  std::map<uint32_t, std::string> by_address_;  // host byte order
  std::map<std::string, uint32_t> by_name_;
  uint32_t next_ = 0;  // offset in the range of the next candidate
};

}  // namespace hutch::net
