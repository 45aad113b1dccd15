#include "net/floor.h"

#include <array>

namespace hutch::net {

namespace {

struct Range {
  const char* cidr;
  const char* reason;
};

// Order matters only for the reason given: the more specific entry comes first, so
// 169.254.169.254 is "cloud metadata" rather than "link-local".
constexpr std::array kFloorRanges{
    // Cloud metadata and platform services: AWS (IMDS v4 and v6, ECS task role, EKS pod
    // identity v4 and v6), GCP, Azure (IMDS, WireServer), Alibaba, Oracle, DigitalOcean, OpenStack
    // all sit on these addresses. 100.100.100.200 is in 100.64/10, which is only private: listed
    // here so no CIDR allow of 100.64/10 reaches it.
    Range{"169.254.169.254/32", "floor: cloud metadata"},
    Range{"169.254.170.2/32", "floor: cloud metadata"},
    Range{"169.254.170.23/32", "floor: cloud metadata"},
    Range{"168.63.129.16/32", "floor: cloud metadata"},
    Range{"100.100.100.200/32", "floor: cloud metadata"},
    Range{"192.0.0.192/32", "floor: cloud metadata"},
    Range{"fd00:ec2::/32", "floor: cloud metadata"},
    Range{"0.0.0.0/8", "floor: unspecified address"},
    Range{"127.0.0.0/8", "floor: loopback"},
    Range{"169.254.0.0/16", "floor: link-local"},
    Range{"192.0.0.0/24", "floor: reserved (IETF protocol assignments)"},
    Range{"255.255.255.255/32", "floor: broadcast"},
    Range{"224.0.0.0/4", "floor: multicast"},
    Range{"240.0.0.0/4", "floor: reserved (240/4)"},
    Range{"::/128", "floor: unspecified address"},
    Range{"::1/128", "floor: loopback"},
    Range{"fe80::/10", "floor: link-local"},
    Range{"fec0::/10", "floor: reserved (site-local, deprecated)"},
    Range{"ff00::/8", "floor: multicast"},
    Range{"100::/64", "floor: reserved (discard-only)"},
    // Teredo hides an obfuscated IPv4 address in its last 32 bits, and local-use NAT64
    // (RFC 8215) can embed one at any of RFC 6052's offsets: refused rather than decoded.
    Range{"2001::/32", "floor: reserved (Teredo)"},
    Range{"64:ff9b:1::/48", "floor: reserved (local-use NAT64)"},
};

constexpr std::array kPrivateRanges{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                    "100.64.0.0/10", "fc00::/7"};

constexpr std::array kMetadataNames{"metadata.google.internal", "metadata.goog", "metadata",
                                    "instance-data", "instance-data.ec2.internal"};

template <size_t N>
std::array<Cidr, N> parse_all(const std::array<const char*, N>& texts) {
  std::array<Cidr, N> out;
  for (size_t i = 0; i < N; ++i) out[i] = *Cidr::parse(texts[i]);
  return out;
}

const auto& floor_cidrs() {
  static const auto cidrs = [] {
    std::array<const char*, kFloorRanges.size()> texts;
    for (size_t i = 0; i < texts.size(); ++i) texts[i] = kFloorRanges[i].cidr;
    return parse_all(texts);
  }();
  return cidrs;
}

const auto& private_cidrs() {
  static const auto cidrs = parse_all(kPrivateRanges);
  return cidrs;
}

std::optional<std::string> refuse_range(const Address& address) {
  const auto& cidrs = floor_cidrs();
  for (size_t i = 0; i < cidrs.size(); ++i) {
    if (cidrs[i].contains(address)) return kFloorRanges[i].reason;
  }
  return std::nullopt;
}

bool is_unspecified(const Address& address) {
  for (int i = 0; i < address.bit_length() / 8; ++i) {
    if (address.bytes()[i] != 0) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> Floor::refuse_address(const Address& address) const {
  const std::optional<Address> inner = address.embedded_v4();
  const std::shared_ptr<const std::vector<Address>> host = config_.host_addresses->get();
  for (const Address& form : {address, inner.value_or(address)}) {
    if (auto reason = refuse_range(form)) return reason;
    for (const Address& own : *host) {
      if (own == form || own.embedded_v4() == form) return "floor: host address";
    }
  }
  return std::nullopt;
}

std::optional<std::string> Floor::refuse(const Address& address, uint16_t port) const {
  const Address form = address.effective();
  for (const DaemonEndpoint& endpoint : config_.daemon_endpoints) {
    if (endpoint.port == port &&
        (is_unspecified(endpoint.address) || endpoint.address.effective() == form)) {
      return "floor: hutchd port";
    }
  }
  return refuse_address(address);
}

std::optional<Cidr> Floor::private_range(const Address& address) const {
  const Address form = address.effective();
  for (const Cidr& range : private_cidrs()) {
    if (range.contains(form)) return range;
  }
  return std::nullopt;
}

std::optional<std::string> Floor::refuse_name(std::string_view name) {
  for (std::string_view metadata : kMetadataNames) {
    if (name == metadata) return "floor: cloud metadata name";
  }
  if (name == "localhost" || name.ends_with(".localhost")) return "floor: loopback name";
  return std::nullopt;
}

std::vector<Cidr> Floor::static_ranges() {
  const auto& cidrs = floor_cidrs();
  return {cidrs.begin(), cidrs.end()};
}

}  // namespace hutch::net
