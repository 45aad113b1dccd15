// IPv4 and IPv6 addresses and CIDR prefixes: strict parsing (inet_pton), printing, prefix
// matching, and the IPv4 address an IPv6 one embeds, so every check can see the IPv4 inside.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch::net {

enum class Family : uint8_t { kV4, kV6 };

class Address {
 public:
  // Only the canonical spellings inet_pton takes: four decimal parts for IPv4 ("127.0.0.1", not
  // "0x7f.1", "2130706433" or "127.1", which inet_aton would accept), RFC 4291 text for IPv6
  // (no brackets, no zone "%eth0"). Anything else is kInvalid.
  static Result<Address> parse(std::string_view text);
  static Address v4(uint32_t value);  // host byte order: 0x7f000001 is 127.0.0.1
  static Address v6(const std::array<uint8_t, 16>& bytes);

  Family family() const { return family_; }
  bool is_v4() const { return family_ == Family::kV4; }
  // Network byte order; an IPv4 address uses the first 4 bytes, the rest are zero.
  const std::array<uint8_t, 16>& bytes() const { return bytes_; }
  int bit_length() const { return is_v4() ? 32 : 128; }
  uint32_t v4_value() const;  // host byte order; only for IPv4

  // The IPv4 address inside an IPv6 one, where the kernel or a translator would reach it:
  // IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96 (not :: and ::1), NAT64 64:ff9b::/96
  // (RFC 6052), 6to4 2002::/16 (RFC 3056, the relay's address in bits 16..47). nullopt otherwise.
  std::optional<Address> embedded_v4() const;
  // embedded_v4() if there is one, else this address: what policy and floor checks look at.
  Address effective() const;

  std::string to_string() const;  // inet_ntop: "10.0.0.1", "::ffff:10.0.0.1", "fe80::1"

  friend bool operator==(const Address&, const Address&) = default;
  friend auto operator<=>(const Address&, const Address&) = default;  // map keys

 private:
  Family family_ = Family::kV4;
  std::array<uint8_t, 16> bytes_{};
};

class Cidr {
 public:
  // "10.0.0.0/8", "fc00::/7"; a bare address is a full-length prefix. Bits set past the prefix
  // are refused ("10.0.0.1/8" is a typo for either 10.0.0.0/8 or 10.0.0.1/32).
  static Result<Cidr> parse(std::string_view text);
  // Refuses a prefix longer than the family's length and bits set past it.
  static Result<Cidr> make(const Address& base, int prefix);

  const Address& base() const { return base_; }
  int prefix() const { return prefix_; }
  // Same family and the first prefix() bits equal. No embedded-IPv4 translation here: callers
  // decide which of an address's forms to test (Address::effective()).
  bool contains(const Address& address) const;
  std::string to_string() const;  // "10.0.0.0/8"

  friend bool operator==(const Cidr&, const Cidr&) = default;

 private:
  Address base_;
  int prefix_ = 0;
};

}  // namespace hutch::net
