#include "net/dns_message.h"

#include <gtest/gtest.h>

#include <initializer_list>

namespace hutch::net {
namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& out, uint16_t value) {
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

void put_name(Bytes& out, std::string_view name) {
  while (!name.empty()) {
    const size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    name = dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
  }
  out.push_back(0);
}

Bytes header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns = 0,
             uint16_t ar = 0) {
  Bytes out;
  for (uint16_t value : {id, flags, qd, an, ns, ar}) put16(out, value);
  return out;
}

Bytes query(std::string_view name, uint16_t type = kDnsTypeA, uint16_t id = 0x1234) {
  Bytes out = header(id, 0x0100, 1, 0);
  put_name(out, name);
  put16(out, type);
  put16(out, kDnsClassIn);
  return out;
}

// An answer record whose owner is a pointer to `owner_at`.
void put_record(Bytes& out, uint16_t owner_at, uint16_t type, uint32_t ttl, const Bytes& rdata) {
  put16(out, 0xc000 | owner_at);
  put16(out, type);
  put16(out, kDnsClassIn);
  put16(out, static_cast<uint16_t>(ttl >> 16));
  put16(out, static_cast<uint16_t>(ttl));
  put16(out, static_cast<uint16_t>(rdata.size()));
  out.insert(out.end(), rdata.begin(), rdata.end());
}

Address addr(std::string_view text) { return *Address::parse(text); }

TEST(DnsQueryTest, ParsesAQuestion) {
  auto parsed = parse_dns_query(query("Api.Example.COM", kDnsTypeAaaa));
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->id, 0x1234);
  EXPECT_EQ(parsed->name, "api.example.com");
  EXPECT_EQ(parsed->type, kDnsTypeAaaa);
  EXPECT_EQ(parsed->klass, kDnsClassIn);
  Bytes question;
  put_name(question, "Api.Example.COM");
  put16(question, kDnsTypeAaaa);
  put16(question, kDnsClassIn);
  EXPECT_EQ(parsed->question, question) << "the question is echoed as sent, case and all";
}

TEST(DnsQueryTest, AcceptsOneEdnsRecordAndTheRoot) {
  Bytes with_opt = query("example.com");
  with_opt[11] = 1;
  with_opt.insert(with_opt.end(), {0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(parse_dns_query(with_opt));
  auto root = parse_dns_query(query(""));
  ASSERT_TRUE(root);
  EXPECT_EQ(root->name, "");
}

TEST(DnsQueryTest, RefusesMalformedQueries) {
  const Bytes good = query("example.com");
  std::vector<std::pair<std::string, Bytes>> cases;
  cases.push_back({"short", Bytes(good.begin(), good.begin() + 11)});
  Bytes response = good;
  response[2] |= 0x80;
  cases.push_back({"response", response});
  Bytes two = good;
  two[5] = 2;
  cases.push_back({"two questions", two});
  Bytes none = good;
  none[5] = 0;
  cases.push_back({"no question", none});
  Bytes answers = good;
  answers[7] = 1;
  cases.push_back({"answer records", answers});
  Bytes pointer = header(1, 0, 1, 0);
  pointer.insert(pointer.end(), {3, 'w', 'w', 'w', 0xc0, 12, 0, 1, 0, 1});
  cases.push_back({"compression pointer", pointer});
  Bytes self = header(1, 0, 1, 0);
  self.insert(self.end(), {0xc0, 12, 0, 1, 0, 1});
  cases.push_back({"pointer to itself", self});
  Bytes long_label = header(1, 0, 1, 0);
  long_label.insert(long_label.end(), {40, 'a', 'b'});
  cases.push_back({"label past the end", long_label});
  Bytes no_type = header(1, 0, 1, 0);
  put_name(no_type, "example.com");
  no_type.push_back(0);
  cases.push_back({"question cut short", no_type});
  Bytes extended = header(1, 0, 1, 0);
  extended.insert(extended.end(), {0x41, 0, 0, 1, 0, 1});
  cases.push_back({"label type 01", extended});
  Bytes dotted = header(1, 0, 1, 0);
  dotted.insert(dotted.end(), {3, 'a', '.', 'b', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1});
  cases.push_back({"dot inside a label", dotted});
  Bytes nul = header(1, 0, 1, 0);
  nul.insert(nul.end(), {3, 'a', 0, 'b', 0, 0, 1, 0, 1});
  cases.push_back({"NUL inside a label", nul});
  Bytes huge = header(1, 0, 1, 0);
  for (int i = 0; i < 5; ++i) {
    huge.push_back(63);
    huge.insert(huge.end(), 63, 'a');
  }
  huge.insert(huge.end(), {0, 0, 1, 0, 1});
  cases.push_back({"name over 255 bytes", huge});
  for (const auto& [what, packet] : cases) {
    auto parsed = parse_dns_query(packet);
    EXPECT_FALSE(parsed) << what;
    const Bytes formerr = build_dns_format_error(packet);
    if (packet.size() >= 12 && !(packet[2] & 0x80)) {
      ASSERT_EQ(formerr.size(), 12u) << what;
      EXPECT_EQ(formerr[3] & 0x0f, kRcodeFormErr) << what;
      EXPECT_EQ(formerr[0], packet[0]);
      EXPECT_EQ(formerr[1], packet[1]);
    } else {
      EXPECT_TRUE(formerr.empty()) << what;
    }
  }
  Bytes notify = good;
  notify[2] = 0x20;  // opcode 4, NOTIFY
  auto unsupported = parse_dns_query(notify);
  ASSERT_FALSE(unsupported);
  EXPECT_EQ(unsupported.error().kind, ErrorKind::kUnsupported);
}

TEST(DnsReplyTest, NxdomainEchoesTheQuestion) {
  auto parsed = parse_dns_query(query("c2VjcmV0.attacker.example"));
  ASSERT_TRUE(parsed);
  const Bytes reply = build_dns_error(*parsed, kRcodeNxDomain);
  EXPECT_EQ(reply[0], 0x12);
  EXPECT_EQ(reply[1], 0x34);
  EXPECT_TRUE(reply[2] & 0x80) << "QR";
  EXPECT_TRUE(reply[2] & 0x01) << "RD copied";
  EXPECT_EQ(reply[3] & 0x0f, kRcodeNxDomain);
  EXPECT_EQ(Bytes(reply.begin() + 12, reply.end()), parsed->question);
  auto seen = parse_dns_answer(reply, 0x1234, "c2vjcmv0.attacker.example");
  ASSERT_TRUE(seen) << seen.error().message();
  EXPECT_EQ(seen->rcode, kRcodeNxDomain);
  EXPECT_TRUE(seen->addresses.empty());
}

TEST(DnsReplyTest, AnswersWithAddressesOfTheQueriedType) {
  const Address both[] = {addr("198.18.0.7"), addr("2001:db8::7"), addr("198.18.0.8")};
  auto a = parse_dns_query(query("pypi.org", kDnsTypeA));
  ASSERT_TRUE(a);
  auto answer = parse_dns_answer(build_dns_answer(*a, both, 30), 0x1234, "pypi.org");
  ASSERT_TRUE(answer) << answer.error().message();
  EXPECT_EQ(answer->rcode, kRcodeNoError);
  EXPECT_EQ(answer->addresses, (std::vector{addr("198.18.0.7"), addr("198.18.0.8")}));
  EXPECT_EQ(answer->ttl, 30u);

  auto aaaa = parse_dns_query(query("pypi.org", kDnsTypeAaaa));
  ASSERT_TRUE(aaaa);
  answer = parse_dns_answer(build_dns_answer(*aaaa, both, 30), 0x1234, "pypi.org");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->addresses, std::vector{addr("2001:db8::7")});

  auto https = parse_dns_query(query("pypi.org", 65));
  ASSERT_TRUE(https);
  const Bytes nodata = build_dns_answer(*https, both, 30);
  EXPECT_EQ(nodata[7], 0) << "no records of another type: NODATA";
}

TEST(DnsAnswerTest, FollowsCnamesAndIgnoresOtherNames) {
  Bytes packet = header(7, 0x8180, 1, 4);
  put_name(packet, "www.example.com");
  put16(packet, kDnsTypeA);
  put16(packet, kDnsClassIn);
  Bytes cname;
  put_name(cname, "edge.cdn.example");
  const uint16_t cname_at = static_cast<uint16_t>(packet.size() + 12);  // its rdata's offset
  put_record(packet, 12, kDnsTypeCname, 300, cname);
  put_record(packet, cname_at, kDnsTypeA, 60, {93, 184, 215, 14});
  put_record(packet, 12 + 4, kDnsTypeA, 60, {10, 0, 0, 1});  // "example.com": not asked for
  Bytes other;
  put_name(other, "unrelated.example");
  packet.insert(packet.end(), other.begin(), other.end());
  put16(packet, kDnsTypeA);
  put16(packet, kDnsClassIn);
  put16(packet, 0);
  put16(packet, 5);
  put16(packet, 4);
  packet.insert(packet.end(), {127, 0, 0, 1});
  auto answer = parse_dns_answer(packet, 7, "www.example.com");
  ASSERT_TRUE(answer) << answer.error().message();
  EXPECT_EQ(answer->cnames, std::vector<std::string>{"edge.cdn.example"});
  EXPECT_EQ(answer->addresses, std::vector{addr("93.184.215.14")});
  EXPECT_EQ(answer->ttl, 60u);
}

TEST(DnsAnswerTest, CompressionLoopsEnd) {
  // An answer whose owner points at itself, and two names pointing at each other.
  Bytes self = header(1, 0x8180, 0, 1);
  self.insert(self.end(), {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4});
  EXPECT_FALSE(parse_dns_answer(self, 1, "x"));
  Bytes pair = header(1, 0x8180, 1, 0);
  pair.insert(pair.end(), {1, 'a', 0xc0, 16, 1, 'b', 0xc0, 12, 0, 1, 0, 1});
  EXPECT_FALSE(parse_dns_answer(pair, 1, "x"));
  Bytes forward = header(1, 0x8180, 1, 0);
  forward.insert(forward.end(), {0xc0, 14, 0, 1, 0, 1});
  EXPECT_FALSE(parse_dns_answer(forward, 1, "x"));
  // A label followed by a pointer back to that label: looks backwards, is a loop.
  Bytes back = header(1, 0x8180, 1, 0);
  back.insert(back.end(), {1, 'a', 0xc0, 12, 0, 1, 0, 1});
  auto parsed = parse_dns_answer(back, 1, "x");
  ASSERT_FALSE(parsed);
  EXPECT_NE(parsed.error().detail.find("backwards"), std::string::npos) << parsed.error().detail;
}

TEST(DnsAnswerTest, CnameLoopsEnd) {
  Bytes packet = header(2, 0x8180, 1, 2);
  put_name(packet, "a.example");
  put16(packet, kDnsTypeA);
  put16(packet, kDnsClassIn);
  Bytes to_b;
  put_name(to_b, "b.example");
  const uint16_t b_at = static_cast<uint16_t>(packet.size() + 12);
  put_record(packet, 12, kDnsTypeCname, 5, to_b);
  Bytes to_a = {0xc0, 12};
  put_record(packet, b_at, kDnsTypeCname, 5, to_a);
  auto answer = parse_dns_answer(packet, 2, "a.example");
  ASSERT_FALSE(answer);
  EXPECT_NE(answer.error().detail.find("CNAME chain"), std::string::npos);
}

TEST(DnsAnswerTest, EveryTruncationIsRefused) {
  auto a = parse_dns_query(query("pypi.org"));
  ASSERT_TRUE(a);
  const Address one[] = {addr("151.101.0.223")};
  const Bytes full = build_dns_answer(*a, one, 30);
  ASSERT_TRUE(parse_dns_answer(full, 0x1234, "pypi.org"));
  for (size_t size = 0; size < full.size(); ++size) {
    EXPECT_FALSE(parse_dns_answer(std::span(full).first(size), 0x1234, "pypi.org")) << size;
  }
}

TEST(DnsAnswerTest, RefusesWhatCannotBeTrusted) {
  auto a = parse_dns_query(query("pypi.org"));
  ASSERT_TRUE(a);
  const Address one[] = {addr("151.101.0.223")};
  const Bytes full = build_dns_answer(*a, one, 30);
  EXPECT_FALSE(parse_dns_answer(full, 0x4321, "pypi.org")) << "another query's id";
  Bytes tc = full;
  tc[2] |= 0x02;
  auto truncated = parse_dns_answer(tc, 0x1234, "pypi.org");
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.error().detail.find("TC"), std::string::npos);
  EXPECT_FALSE(parse_dns_answer(query("pypi.org"), 0x1234, "pypi.org")) << "a query";
  Bytes wide = full;
  wide[wide.size() - 5] = 5;  // rdlength 5 for an A record
  wide.push_back(0);
  EXPECT_FALSE(parse_dns_answer(wide, 0x1234, "pypi.org"));
}

}  // namespace
}  // namespace hutch::net
