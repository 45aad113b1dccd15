// The egress ruleset's text (pure): what is redirected, in which order, and the floor's IPv6
// forms of its IPv4 ranges. Applying it is tested for real, as root, in egress_path_test.cc.
#include "net/nft_ruleset.h"

#include <gtest/gtest.h>

#include <vector>

#include "net/floor.h"

namespace hutch::net {
namespace {

std::vector<Cidr> cidrs(std::initializer_list<const char*> texts) {
  std::vector<Cidr> out;
  for (const char* text : texts) out.push_back(*Cidr::parse(text));
  return out;
}

TEST(EgressRulesetTest, CreatesTheTableSoASecondInstallChangesNothing) {
  const std::string text = egress_ruleset(cidrs({"169.254.0.0/16"}));
  EXPECT_TRUE(text.starts_with("create table inet hutch\n")) << text;
}

TEST(EgressRulesetTest, DnsComesFirstThenLoopbackAndFloorThenTheCatchAll) {
  const std::string text = egress_ruleset(cidrs({"169.254.0.0/16", "fe80::/10"}));
  const size_t dns = text.find("meta l4proto { tcp, udp } th dport 53 redirect to :53");
  const size_t v4 = text.find("ip daddr { 169.254.0.0/16 } accept");
  const size_t v6 = text.find("ip6 daddr { ::ffff:0.0.0.0/96, ");
  const size_t all = text.find("meta l4proto tcp redirect to :900");
  ASSERT_NE(dns, std::string::npos) << text;
  ASSERT_NE(v4, std::string::npos) << text;
  ASSERT_NE(v6, std::string::npos) << text;
  ASSERT_NE(all, std::string::npos) << text;
  EXPECT_LT(dns, v4);
  EXPECT_LT(v4, v6);
  EXPECT_LT(v6, all);
  EXPECT_NE(text.find("fe80::/10"), std::string::npos) << text;
}

TEST(EgressRulesetTest, FilterAcceptsLoopbackAndRedirectedResetsTcpDropsTheRest) {
  const std::string text = egress_ruleset(cidrs({"0.0.0.0/8"}));
  const size_t chain = text.find("type filter hook output priority 0; policy drop;");
  const size_t lo = text.find("oif lo accept");
  const size_t dnat = text.find("ct status dnat accept");
  const size_t reset = text.find("meta l4proto tcp reject with tcp reset");
  ASSERT_NE(chain, std::string::npos) << text;
  EXPECT_LT(chain, lo);
  EXPECT_LT(lo, dnat);
  EXPECT_LT(dnat, reset);
  EXPECT_EQ(text.find("udp accept"), std::string::npos) << text;
  EXPECT_EQ(text.find("icmp"), std::string::npos) << text;
}

TEST(EgressRulesetTest, IPv4RangesAreAlsoRefusedInTheIPv6FormsThatEmbedThem) {
  const std::string text = egress_ruleset(cidrs({"169.254.169.254/32", "127.0.0.0/8"}));
  for (const char* form : {"::a9fe:a9fe/128", "64:ff9b::a9fe:a9fe/128", "2002:a9fe:a9fe::/48",
                           "::7f00:0/104", "64:ff9b::7f00:0/104", "2002:7f00::/24"}) {
    EXPECT_NE(text.find(form), std::string::npos) << form << " in\n" << text;
  }
}

TEST(EgressRulesetTest, TheRealFloorIsInIt) {
  const std::string text = egress_ruleset(Floor::static_ranges());
  for (const char* range :
       {"169.254.169.254/32", "100.100.100.200/32", "168.63.129.16/32", "224.0.0.0/4",
        "240.0.0.0/4", "fd00:ec2::/32", "::1/128", "ff00::/8", "2001::/32"}) {
    EXPECT_NE(text.find(range), std::string::npos) << range << " in\n" << text;
  }
}

}  // namespace
}  // namespace hutch::net
