#include "net/address.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace hutch::net {

namespace {

// inet_pton needs a NUL-terminated string; anything longer than the longest IPv6 text
// ("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", 45 characters) is not an address.
constexpr size_t kMaxAddressText = INET6_ADDRSTRLEN;

bool prefix_equal(const std::array<uint8_t, 16>& a, const std::array<uint8_t, 16>& b, int bits) {
  const int whole = bits / 8;
  if (std::memcmp(a.data(), b.data(), whole) != 0) return false;
  const int rest = bits % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

bool all_zero(const std::array<uint8_t, 16>& bytes, int from, int to) {
  for (int i = from; i < to; ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

Address v4_from(const uint8_t* p) {
  return Address::v4(uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]);
}

}  // namespace

Result<Address> Address::parse(std::string_view text) {
  // An embedded NUL would end inet_pton's string early: "1.2.3.4\0junk" is not an address.
  if (text.empty() || text.size() >= kMaxAddressText || text.find('\0') != std::string_view::npos) {
    return kind_error(ErrorKind::kInvalid, "address",
                      "not an IP address: \"" + std::string(text) + "\"");
  }
  char buffer[kMaxAddressText];
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  Address address;
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buffer, address.bytes_.data()) == 1) return address;
  } else if (inet_pton(AF_INET6, buffer, address.bytes_.data()) == 1) {
    address.family_ = Family::kV6;
    return address;
  }
  return kind_error(ErrorKind::kInvalid, "address",
                    "not an IP address: \"" + std::string(text) + "\"");
}

Address Address::v4(uint32_t value) {
  Address address;
  address.bytes_[0] = static_cast<uint8_t>(value >> 24);
  address.bytes_[1] = static_cast<uint8_t>(value >> 16);
  address.bytes_[2] = static_cast<uint8_t>(value >> 8);
  address.bytes_[3] = static_cast<uint8_t>(value);
  return address;
}

Address Address::v6(const std::array<uint8_t, 16>& bytes) {
  Address address;
  address.family_ = Family::kV6;
  address.bytes_ = bytes;
  return address;
}

uint32_t Address::v4_value() const {
  return uint32_t{bytes_[0]} << 24 | uint32_t{bytes_[1]} << 16 | uint32_t{bytes_[2]} << 8 |
         bytes_[3];
}

std::optional<Address> Address::embedded_v4() const {
  if (is_v4()) return std::nullopt;
  const uint8_t* b = bytes_.data();
  // ::ffff:a.b.c.d
  if (all_zero(bytes_, 0, 10) && b[10] == 0xff && b[11] == 0xff) return v4_from(b + 12);
  // ::a.b.c.d; :: and ::1 are IPv6's own unspecified and loopback addresses.
  if (all_zero(bytes_, 0, 12) && !(all_zero(bytes_, 12, 15) && b[15] <= 1)) return v4_from(b + 12);
  // 64:ff9b::a.b.c.d
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && all_zero(bytes_, 4, 12)) {
    return v4_from(b + 12);
  }
  // 2002:AABB:CCDD::/48
  if (b[0] == 0x20 && b[1] == 0x02) return v4_from(b + 2);
  return std::nullopt;
}

Address Address::effective() const { return embedded_v4().value_or(*this); }

std::string Address::to_string() const {
  char buffer[INET6_ADDRSTRLEN];
  inet_ntop(is_v4() ? AF_INET : AF_INET6, bytes_.data(), buffer, sizeof buffer);
  return buffer;
}

Result<Cidr> Cidr::make(const Address& base, int prefix) {
  if (prefix < 0 || prefix > base.bit_length()) {
    return kind_error(ErrorKind::kInvalid, "cidr",
                      "prefix length " + std::to_string(prefix) + " is out of 0.." +
                          std::to_string(base.bit_length()) + " for " + base.to_string());
  }
  for (int bit = prefix; bit < base.bit_length(); ++bit) {
    if (base.bytes()[bit / 8] & (0x80 >> (bit % 8))) {
      return kind_error(
          ErrorKind::kInvalid, "cidr",
          base.to_string() + "/" + std::to_string(prefix) + " has bits set past the prefix length");
    }
  }
  Cidr cidr;
  cidr.base_ = base;
  cidr.prefix_ = prefix;
  return cidr;
}

Result<Cidr> Cidr::parse(std::string_view text) {
  const size_t slash = text.find('/');
  const Address base = HUTCH_TRY(Address::parse(text.substr(0, slash)));
  if (slash == std::string_view::npos) return make(base, base.bit_length());
  const std::string_view digits = text.substr(slash + 1);
  int prefix = -1;
  // Decimal digits only, at most 3 of them: no sign, no "08" ambiguity worth accepting.
  const bool plain =
      !digits.empty() && digits.size() <= 3 && (digits.size() == 1 || digits[0] != '0');
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), prefix);
  if (!plain || ec != std::errc() || end != digits.data() + digits.size()) {
    return kind_error(ErrorKind::kInvalid, "cidr",
                      "bad prefix length in \"" + std::string(text) + "\"");
  }
  return make(base, prefix);
}

bool Cidr::contains(const Address& address) const {
  return address.family() == base_.family() &&
         prefix_equal(address.bytes(), base_.bytes(), prefix_);
}

std::string Cidr::to_string() const { return base_.to_string() + "/" + std::to_string(prefix_); }

}  // namespace hutch::net
