#include "net/address.h"

#include <gtest/gtest.h>

namespace hutch::net {
namespace {

Address addr(std::string_view text) {
  auto address = Address::parse(text);
  EXPECT_TRUE(address) << text;
  return address.value_or(Address{});
}

TEST(AddressTest, ParsesAndPrintsCanonicalForms) {
  EXPECT_EQ(addr("10.0.0.1").to_string(), "10.0.0.1");
  EXPECT_TRUE(addr("10.0.0.1").is_v4());
  EXPECT_EQ(addr("10.0.0.1").v4_value(), 0x0a000001u);
  EXPECT_EQ(addr("2001:DB8:0:0::1").to_string(), "2001:db8::1");
  EXPECT_FALSE(addr("::1").is_v4());
  EXPECT_EQ(addr("::ffff:127.0.0.1").to_string(), "::ffff:127.0.0.1");
  EXPECT_EQ(Address::v4(0x7f000001), addr("127.0.0.1"));
}

// inet_aton's shorthands are what SSRF payloads use; only the four-part decimal form is an
// address here (the policy then refuses the rest as names that end in a number).
TEST(AddressTest, RefusesShorthandAndDecoratedSpellings) {
  for (const char* text : {"0x7f.1", "2130706433", "127.1", "0177.0.0.1", "0x7f000001",
                           "127.0.0.1.", " 127.0.0.1", "127.0.0.1 ", "[::1]", "fe80::1%eth0", "",
                           "1.2.3.4/32", "::ffff:127.0.0.1:80", "256.0.0.1"}) {
    auto address = Address::parse(text);
    EXPECT_FALSE(address) << text;
    if (!address) {
      EXPECT_EQ(address.error().kind, ErrorKind::kInvalid);
    }
  }
  EXPECT_FALSE(Address::parse(std::string(200, '1')));
  EXPECT_FALSE(Address::parse(std::string_view("1.2.3.4\0", 8)));
}

TEST(AddressTest, ExtractsEmbeddedIpv4) {
  EXPECT_EQ(addr("::ffff:127.0.0.1").embedded_v4(), addr("127.0.0.1"));
  EXPECT_EQ(addr("::ffff:7f00:1").embedded_v4(), addr("127.0.0.1"));
  EXPECT_EQ(addr("::169.254.169.254").embedded_v4(), addr("169.254.169.254"));
  EXPECT_EQ(addr("64:ff9b::10.0.0.1").embedded_v4(), addr("10.0.0.1"));
  EXPECT_EQ(addr("64:ff9b::a9fe:a9fe").embedded_v4(), addr("169.254.169.254"));
  EXPECT_EQ(addr("2002:7f00:1::1").embedded_v4(), addr("127.0.0.1"));
  EXPECT_EQ(addr("2002:a9fe:a9fe:1234:5678::").embedded_v4(), addr("169.254.169.254"));
  EXPECT_EQ(addr("::ffff:127.0.0.1").effective(), addr("127.0.0.1"));
}

TEST(AddressTest, NoEmbeddedIpv4WhereThereIsNone) {
  EXPECT_FALSE(addr("::").embedded_v4());
  EXPECT_FALSE(addr("::1").embedded_v4());
  EXPECT_FALSE(addr("2001:db8::1").embedded_v4());
  EXPECT_FALSE(addr("64:ff9b:1::a00:1").embedded_v4());
  EXPECT_FALSE(addr("::fffe:7f00:1").embedded_v4());
  EXPECT_FALSE(addr("10.0.0.1").embedded_v4());
  EXPECT_EQ(addr("2001:db8::1").effective(), addr("2001:db8::1"));
}

TEST(CidrTest, ParsesAndMatchesPrefixes) {
  auto ten = Cidr::parse("10.0.0.0/8");
  ASSERT_TRUE(ten);
  EXPECT_TRUE(ten->contains(addr("10.255.1.2")));
  EXPECT_FALSE(ten->contains(addr("11.0.0.0")));
  EXPECT_FALSE(ten->contains(addr("::ffff:10.0.0.1"))) << "no translation inside contains()";
  EXPECT_EQ(ten->to_string(), "10.0.0.0/8");

  auto odd = Cidr::parse("172.16.0.0/12");
  ASSERT_TRUE(odd);
  EXPECT_TRUE(odd->contains(addr("172.31.255.255")));
  EXPECT_FALSE(odd->contains(addr("172.32.0.0")));

  auto ula = Cidr::parse("fc00::/7");
  ASSERT_TRUE(ula);
  EXPECT_TRUE(ula->contains(addr("fd12::1")));
  EXPECT_FALSE(ula->contains(addr("fe00::1")));
  EXPECT_FALSE(ula->contains(addr("10.0.0.1")));

  auto everything = Cidr::parse("0.0.0.0/0");
  ASSERT_TRUE(everything);
  EXPECT_TRUE(everything->contains(addr("255.255.255.255")));
  EXPECT_FALSE(everything->contains(addr("::1"))) << "families never match each other";

  auto single = Cidr::parse("192.0.2.7");
  ASSERT_TRUE(single);
  EXPECT_EQ(single->prefix(), 32);
  EXPECT_TRUE(single->contains(addr("192.0.2.7")));
  EXPECT_FALSE(single->contains(addr("192.0.2.8")));
}

TEST(CidrTest, RefusesBadPrefixes) {
  for (const char* text :
       {"10.0.0.0/33", "::/129", "10.0.0.1/8", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/08",
        "10.0.0.0/8/8", "10.0.0.0/ 8", "fc00::1/7", "/8", "10.0.0.0/1000", "10.0.0.0/+8"}) {
    EXPECT_FALSE(Cidr::parse(text)) << text;
  }
  auto error = Cidr::parse("10.0.0.0/33");
  ASSERT_FALSE(error);
  EXPECT_NE(error.error().detail.find("33"), std::string::npos);
}

}  // namespace
}  // namespace hutch::net
