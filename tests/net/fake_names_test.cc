// The fake addresses of the DNS stub and the stub's answers (net/engine/fake_names.h,
// dns_stub.h): pure, no sockets.
#include "net/engine/fake_names.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "net/dns_message.h"
#include "net/engine/dns_stub.h"

namespace hutch::net {
namespace {

Address addr(const char* text) { return *Address::parse(text); }

TEST(FakeNamesTest, RangeIs198_18Slash15WithoutTheDataPathSlash24) {
  EXPECT_TRUE(FakeNames::in_range(addr("198.18.0.1")));
  EXPECT_TRUE(FakeNames::in_range(addr("198.19.254.255")));
  EXPECT_FALSE(FakeNames::in_range(addr("198.18.0.0")));
  EXPECT_FALSE(FakeNames::in_range(addr("198.19.255.1")));
  EXPECT_FALSE(FakeNames::in_range(addr("198.20.0.1")));
  EXPECT_FALSE(FakeNames::in_range(addr("198.17.255.255")));
  EXPECT_FALSE(FakeNames::in_range(addr("::ffff:198.18.0.1")));
}

TEST(FakeNamesTest, OneStableAddressPerNameAndBack) {
  FakeNames names;
  auto a = names.assign("api.test");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_new);
  EXPECT_TRUE(FakeNames::in_range(a->address));
  auto again = names.assign("api.test");
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->is_new);
  EXPECT_EQ(again->address, a->address);
  auto b = names.assign("other.test");
  ASSERT_TRUE(b);
  EXPECT_NE(b->address, a->address);
  EXPECT_EQ(names.name_of(a->address), "api.test");
  EXPECT_EQ(names.name_of(b->address), "other.test");
  EXPECT_EQ(names.name_of(addr("198.18.200.1")), std::nullopt);
  EXPECT_EQ(names.name_of(addr("10.0.0.1")), std::nullopt);
}

TEST(FakeNamesTest, KnownNamesAreKeptAndSkippedByNewOnes) {
  FakeNames names;
  ASSERT_TRUE(names.add_known(addr("198.18.0.1"), "old.test"));
  ASSERT_TRUE(names.add_known(addr("198.18.0.1"), "old.test"));  // the same pair again
  EXPECT_FALSE(names.add_known(addr("198.18.0.1"), "other.test"));
  EXPECT_FALSE(names.add_known(addr("198.18.0.2"), "old.test"));
  EXPECT_FALSE(names.add_known(addr("198.19.255.7"), "path.test"));
  EXPECT_FALSE(names.add_known(addr("203.0.113.1"), "public.test"));
  auto fresh = names.assign("new.test");
  ASSERT_TRUE(fresh);
  EXPECT_NE(fresh->address, addr("198.18.0.1"));
  EXPECT_EQ(names.assign("old.test")->address, addr("198.18.0.1"));
}

TEST(FakeNamesTest, ExhaustionIsAnErrorNotAReuse) {
  FakeNames names;
  std::set<Address> seen;
  // 2^17 addresses less the network address and the data path's 256.
  const size_t usable = (1u << 17) - 1 - 256;
  for (size_t i = 0; i < usable; ++i) {
    auto one = names.assign("n" + std::to_string(i) + ".test");
    ASSERT_TRUE(one) << i;
    ASSERT_TRUE(FakeNames::in_range(one->address));
    seen.insert(one->address);
  }
  EXPECT_EQ(seen.size(), usable);
  EXPECT_FALSE(names.assign("one-too-many.test"));
}

std::vector<uint8_t> query(const std::string& name, uint16_t type) {
  std::vector<uint8_t> out{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    out.push_back(static_cast<uint8_t>(dot - start));
    out.insert(out.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  out.push_back(0);
  out.insert(out.end(), {static_cast<uint8_t>(type >> 8), static_cast<uint8_t>(type), 0, 1});
  return out;
}

Policy policy() {
  Policy out;
  out.mode = Mode::kFiltered;
  out.allow = {*parse_rule("api.test"), *parse_rule("*.wild.test")};
  out.deny = {*parse_rule("bad.wild.test")};
  return out;
}

TEST(DnsStubTest, AllowedAGetsItsFakeAddress) {
  FakeNames names;
  DnsStubAnswer out = answer_dns_query(query("API.test", kDnsTypeA), policy(), names);
  EXPECT_TRUE(out.decision.allowed);
  ASSERT_TRUE(out.new_fake_address);
  auto answer = parse_dns_answer(out.reply, 0x1234, "api.test");
  ASSERT_TRUE(answer) << answer.error().message();
  EXPECT_EQ(answer->rcode, kRcodeNoError);
  ASSERT_EQ(answer->addresses.size(), 1u);
  EXPECT_EQ(answer->addresses[0], *out.new_fake_address);
  EXPECT_EQ(answer->ttl, kFakeTtl);
  DnsStubAnswer again = answer_dns_query(query("api.test", kDnsTypeA), policy(), names);
  EXPECT_FALSE(again.new_fake_address);
  EXPECT_EQ(parse_dns_answer(again.reply, 0x1234, "api.test")->addresses, answer->addresses);
}

TEST(DnsStubTest, OtherTypesOfAllowedNamesAreEmptyNoError) {
  FakeNames names;
  for (uint16_t type : {kDnsTypeAaaa, uint16_t{65}, uint16_t{64}, uint16_t{16}}) {
    DnsStubAnswer out = answer_dns_query(query("api.test", type), policy(), names);
    auto answer = parse_dns_answer(out.reply, 0x1234, "api.test");
    ASSERT_TRUE(answer) << type;
    EXPECT_EQ(answer->rcode, kRcodeNoError) << type;
    EXPECT_TRUE(answer->addresses.empty()) << type;
  }
  EXPECT_EQ(names.size(), 0u);
}

TEST(DnsStubTest, RefusedNamesAreNxDomainAndGetNoAddress) {
  FakeNames names;
  for (const char* name : {"evil.test", "bad.wild.test", "wild.test", "localhost"}) {
    DnsStubAnswer out = answer_dns_query(query(name, kDnsTypeA), policy(), names);
    EXPECT_FALSE(out.decision.allowed) << name;
    auto answer = parse_dns_answer(out.reply, 0x1234, name);
    ASSERT_TRUE(answer) << name;
    EXPECT_EQ(answer->rcode, kRcodeNxDomain) << name;
  }
  EXPECT_EQ(answer_dns_query(query("bad.wild.test", kDnsTypeA), policy(), names).decision.rule,
            "bad.wild.test");
  EXPECT_EQ(names.size(), 0u);
}

TEST(DnsStubTest, MalformedIsFormErrOrNothing) {
  FakeNames names;
  std::vector<uint8_t> bad = query("api.test", kDnsTypeA);
  bad[5] = 2;  // two questions announced, one sent
  DnsStubAnswer out = answer_dns_query(bad, policy(), names);
  EXPECT_FALSE(out.decision.allowed);
  ASSERT_GE(out.reply.size(), 12u);
  EXPECT_EQ(out.reply[3] & 0x0f, kRcodeFormErr);
  EXPECT_TRUE(answer_dns_query(std::vector<uint8_t>{1, 2, 3}, policy(), names).reply.empty());
}

}  // namespace
}  // namespace hutch::net
