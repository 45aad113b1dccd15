#include "net/floor.h"

#include <gtest/gtest.h>

namespace hutch::net {
namespace {

Address addr(std::string_view text) {
  auto address = Address::parse(text);
  EXPECT_TRUE(address) << text;
  return address.value_or(Address{});
}

std::string refused(const Floor& floor, std::string_view text, uint16_t port = 443) {
  return floor.refuse(addr(text), port).value_or("");
}

TEST(FloorTest, RefusesEachFloorRangeWithItsReason) {
  const Floor floor;
  const std::pair<const char*, const char*> cases[] = {
      {"127.0.0.1", "floor: loopback"},
      {"127.255.255.254", "floor: loopback"},
      {"::1", "floor: loopback"},
      {"0.0.0.0", "floor: unspecified address"},
      {"0.1.2.3", "floor: unspecified address"},
      {"::", "floor: unspecified address"},
      {"169.254.169.254", "floor: cloud metadata"},
      {"169.254.170.2", "floor: cloud metadata"},
      {"168.63.129.16", "floor: cloud metadata"},
      {"100.100.100.200", "floor: cloud metadata"},
      {"fd00:ec2::254", "floor: cloud metadata"},
      {"fd00:ec2::23", "floor: cloud metadata"},
      {"169.254.1.1", "floor: link-local"},
      {"fe80::1", "floor: link-local"},
      {"febf:ffff::1", "floor: link-local"},
      {"224.0.0.251", "floor: multicast"},
      {"239.255.255.250", "floor: multicast"},
      {"ff02::fb", "floor: multicast"},
      {"255.255.255.255", "floor: broadcast"},
      {"240.0.0.1", "floor: reserved (240/4)"},
      {"192.0.0.8", "floor: reserved (IETF protocol assignments)"},
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", "floor: reserved (Teredo)"},
      {"64:ff9b:1::a00:1", "floor: reserved (local-use NAT64)"},
  };
  for (const auto& [text, reason] : cases) EXPECT_EQ(refused(floor, text), reason) << text;
}

TEST(FloorTest, SeesIpv4InsideIpv6) {
  const Floor floor;
  EXPECT_EQ(refused(floor, "::ffff:127.0.0.1"), "floor: loopback");
  EXPECT_EQ(refused(floor, "::ffff:169.254.169.254"), "floor: cloud metadata");
  EXPECT_EQ(refused(floor, "::127.0.0.1"), "floor: loopback");
  EXPECT_EQ(refused(floor, "64:ff9b::169.254.169.254"), "floor: cloud metadata");
  EXPECT_EQ(refused(floor, "64:ff9b::7f00:1"), "floor: loopback");
  EXPECT_EQ(refused(floor, "2002:a9fe:a9fe::1"), "floor: cloud metadata");
  EXPECT_EQ(refused(floor, "2002:7f00:0001::"), "floor: loopback");
  EXPECT_EQ(refused(floor, "::ffff:100.100.100.200"), "floor: cloud metadata");
  EXPECT_EQ(refused(floor, "::ffff:224.0.0.1"), "floor: multicast");
}

TEST(FloorTest, PassesPublicAddresses) {
  const Floor floor;
  for (const char* text : {"1.1.1.1", "151.101.0.223", "2606:4700::1111", "::ffff:1.1.1.1",
                           "64:ff9b::1.1.1.1", "2002:0101:0101::1", "198.51.100.7",
                           "169.253.255.255", "169.255.0.0", "100.63.255.255", "100.128.0.0"}) {
    EXPECT_EQ(floor.refuse(addr(text), 443), std::nullopt) << text;
    EXPECT_EQ(floor.private_range(addr(text)), std::nullopt) << text;
  }
}

TEST(FloorTest, NamesPrivateRanges) {
  const Floor floor;
  const std::pair<const char*, const char*> cases[] = {
      {"10.1.2.3", "10.0.0.0/8"},
      {"172.16.0.1", "172.16.0.0/12"},
      {"172.31.255.255", "172.16.0.0/12"},
      {"192.168.1.1", "192.168.0.0/16"},
      {"100.64.0.1", "100.64.0.0/10"},
      {"100.127.255.255", "100.64.0.0/10"},
      {"fd12:3456::1", "fc00::/7"},
      {"fc00::1", "fc00::/7"},
      {"::ffff:10.0.0.1", "10.0.0.0/8"},
      {"64:ff9b::192.168.0.1", "192.168.0.0/16"},
      {"2002:c0a8:0101::", "192.168.0.0/16"},
  };
  for (const auto& [text, range] : cases) {
    auto found = floor.private_range(addr(text));
    ASSERT_TRUE(found) << text;
    EXPECT_EQ(found->to_string(), range) << text;
    EXPECT_EQ(floor.refuse(addr(text), 443), std::nullopt) << text << ": private is not floor";
  }
  EXPECT_EQ(floor.private_range(addr("172.32.0.1")), std::nullopt);
}

TEST(FloorTest, RefusesTheHostsOwnAddresses) {
  const Floor floor(FloorConfig{
      std::make_shared<HostAddresses>(std::vector{addr("203.0.113.5"), addr("2001:db8::5")}), {}});
  EXPECT_EQ(refused(floor, "203.0.113.5"), "floor: host address");
  EXPECT_EQ(refused(floor, "::ffff:203.0.113.5"), "floor: host address");
  EXPECT_EQ(refused(floor, "64:ff9b::203.0.113.5"), "floor: host address");
  EXPECT_EQ(refused(floor, "2001:db8::5"), "floor: host address");
  EXPECT_EQ(refused(floor, "203.0.113.6"), "");
  // Every copy of a floor shares its config's addresses, replaced whole when the host's change.
  auto host = std::make_shared<HostAddresses>(std::vector{addr("203.0.113.5")});
  const Floor first{FloorConfig{host, {}}};
  const Floor copy = first;
  host->set({addr("203.0.113.6")});
  EXPECT_EQ(refused(copy, "203.0.113.6"), "floor: host address");
  EXPECT_EQ(refused(copy, "203.0.113.5"), "");
}

TEST(FloorTest, RefusesHutchdPorts) {
  const Floor floor(
      FloorConfig{.daemon_endpoints = {{addr("0.0.0.0"), 7420}, {addr("198.51.100.1"), 8443}}});
  EXPECT_EQ(refused(floor, "1.1.1.1", 7420), "floor: hutchd port") << "wildcard: every address";
  EXPECT_EQ(refused(floor, "2606:4700::1", 7420), "floor: hutchd port");
  EXPECT_EQ(refused(floor, "1.1.1.1", 7421), "");
  EXPECT_EQ(refused(floor, "198.51.100.1", 8443), "floor: hutchd port");
  EXPECT_EQ(refused(floor, "::ffff:198.51.100.1", 8443), "floor: hutchd port");
  EXPECT_EQ(refused(floor, "198.51.100.2", 8443), "");
}

TEST(FloorTest, RefusesMetadataAndLoopbackNames) {
  EXPECT_EQ(Floor::refuse_name("metadata.google.internal"), "floor: cloud metadata name");
  EXPECT_EQ(Floor::refuse_name("metadata"), "floor: cloud metadata name");
  EXPECT_EQ(Floor::refuse_name("instance-data.ec2.internal"), "floor: cloud metadata name");
  EXPECT_EQ(Floor::refuse_name("localhost"), "floor: loopback name");
  EXPECT_EQ(Floor::refuse_name("evil.localhost"), "floor: loopback name");
  EXPECT_EQ(Floor::refuse_name("localhost.example.com"), std::nullopt);
  EXPECT_EQ(Floor::refuse_name("notmetadata.google.internal"), std::nullopt);
}

}  // namespace
}  // namespace hutch::net
