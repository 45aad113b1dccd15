// The floor: destinations no network policy can open (loopback, link-local, cloud metadata,
// multicast and reserved ranges, the host's own addresses and hutchd's ports), and the private
// ranges that only an explicit CIDR allow opens. The policy engine asks it before any rule.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/address.h"

namespace hutch::net {

// A port hutchd listens on. An unspecified address (0.0.0.0, ::) refuses the port on every
// destination: the host can be reachable at addresses it does not know of (a cloud VM's public
// address is NATed to it, never on an interface), so that port is closed everywhere.
struct DaemonEndpoint {
  Address address;
  uint16_t port = 0;
};

// The host's own addresses, shared by every copy of a floor made from one config and replaced
// whole when the host's interfaces change (hutchd watches them: host_address_watch.h), while
// the engine's threads read them.
class HostAddresses {
 public:
  HostAddresses() = default;
  explicit HostAddresses(std::vector<Address> list) { set(std::move(list)); }
  std::shared_ptr<const std::vector<Address>> get() const { return list_.load(); }
  void set(std::vector<Address> list) {
    list_.store(std::make_shared<const std::vector<Address>>(std::move(list)));
  }

 private:
  std::atomic<std::shared_ptr<const std::vector<Address>>> list_{
      std::make_shared<const std::vector<Address>>()};
};

// What the floor knows of the host it runs on, given as data (the engine reads the host's
// interfaces and hutchd's listeners; tests give their own).
struct FloorConfig {
  std::shared_ptr<HostAddresses> host_addresses = std::make_shared<HostAddresses>();
  std::vector<DaemonEndpoint> daemon_endpoints;
};

class Floor {
 public:
  Floor() = default;
  explicit Floor(FloorConfig config) : config_(std::move(config)) {}

  // Why the floor refuses this address ("floor: cloud metadata"), nullopt if it does not. An
  // IPv6 address embedding an IPv4 one is refused when either form is.
  std::optional<std::string> refuse_address(const Address& address) const;
  // refuse_address, and hutchd's own ports ("floor: hutchd port").
  std::optional<std::string> refuse(const Address& address, uint16_t port) const;
  // The private range holding the address (its effective IPv4 form for an embedded one), for
  // the rule that private destinations need an explicit CIDR allow: "10.0.0.0/8".
  std::optional<Cidr> private_range(const Address& address) const;
  // Names that lead to metadata services or the host itself whatever they resolve to:
  // metadata.google.internal, localhost and *.localhost (RFC 6761). `name` is normalised.
  static std::optional<std::string> refuse_name(std::string_view name);
  // The floor's fixed ranges (everything but the host's addresses and hutchd's ports), for the
  // kernel's copy of it in the sandbox's nftables rules.
  static std::vector<Cidr> static_ranges();

 private:
  FloorConfig config_;
};

}  // namespace hutch::net
