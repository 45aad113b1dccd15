#include "net/policy.h"

#include <gtest/gtest.h>

namespace hutch::net {
namespace {

Address addr(std::string_view text) {
  auto address = Address::parse(text);
  EXPECT_TRUE(address) << text;
  return address.value_or(Address{});
}

Rule rule(std::string_view text) {
  auto parsed = parse_rule(text);
  EXPECT_TRUE(parsed) << text << ": " << (parsed ? "" : parsed.error().message());
  return parsed.value_or(Rule{});
}

Policy filtered(std::initializer_list<const char*> allow,
                std::initializer_list<const char*> deny = {}) {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* text : allow) policy.allow.push_back(rule(text));
  for (const char* text : deny) policy.deny.push_back(rule(text));
  return policy;
}

Decision connect(const Policy& policy, std::optional<std::string> name, std::string_view address,
                 uint16_t port, const Floor& floor = Floor{}) {
  return decide(policy, floor, Connection{std::move(name), addr(address), port});
}

TEST(NameTest, NormalisesCaseAndTrailingDot) {
  EXPECT_EQ(normalize_name("PyPI.ORG."), "pypi.org");
  EXPECT_EQ(normalize_name("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_EQ(normalize_name("_dmarc.example.com"), "_dmarc.example.com");
  EXPECT_EQ(normalize_name("a-b.c0"), "a-b.c0");
  EXPECT_EQ(normalize_name(std::string(63, 'a') + ".com"), std::string(63, 'a') + ".com");
}

TEST(NameTest, RefusesHostileNames) {
  const std::string long_name = [] {
    std::string name;
    while (name.size() < 254) name += "abcdefghi.";
    return name + "com";
  }();
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty name"},
      {".", "empty name"},
      {"a..b", "empty label"},
      {".example.com", "empty label"},
      {"example.com..", "empty label"},
      {long_name, "longer than 253"},
      {std::string(64, 'a') + ".com", "label longer than 63"},
      {"bücher.example", "non-ASCII"},
      {"exa mple.com", "character outside"},
      {"exa*mple.com", "character outside"},
      {std::string("a\0b.com", 7), "character outside"},
      {"example.com:80", "character outside"},
      {"-bad.example", "starting or ending with '-'"},
      {"bad-.example", "starting or ending with '-'"},
      {"127.0.0.1", "ends in a number"},
      {"2130706433", "ends in a number"},
      {"0x7f.1", "ends in a number"},
      {"127.1", "ends in a number"},
      {"0x7F000001", "ends in a number"},
      {"evil.com.0x7f", "ends in a number"},
  };
  for (const auto& [name, reason] : cases) {
    auto normal = normalize_name(name);
    ASSERT_FALSE(normal) << name;
    EXPECT_EQ(normal.error().kind, ErrorKind::kInvalid);
    EXPECT_NE(normal.error().detail.find(reason), std::string::npos)
        << name << ": " << normal.error().detail;
  }
}

TEST(HostTest, TellsAddressesFromNames) {
  auto v6 = parse_host("[::1]");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->address, addr("::1"));
  auto bare = parse_host("::1");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->address, addr("::1"));
  auto v4 = parse_host("127.0.0.1");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->address, addr("127.0.0.1"));
  auto name = parse_host("Example.COM");
  ASSERT_TRUE(name);
  EXPECT_EQ(name->name, "example.com");
  EXPECT_FALSE(parse_host("[127.0.0.1]"));
  EXPECT_FALSE(parse_host("[::1"));
  EXPECT_FALSE(parse_host("0x7f.1")) << "neither an address nor a name";
  EXPECT_FALSE(parse_host("2130706433"));
}

TEST(RuleTest, ParsesEachForm) {
  const std::tuple<const char*, RuleKind, std::optional<uint16_t>, const char*> cases[] = {
      {"pypi.org", RuleKind::kName, std::nullopt, "pypi.org"},
      {"PyPI.org.", RuleKind::kName, std::nullopt, "pypi.org"},
      {"*.github.com", RuleKind::kSuffix, std::nullopt, "*.github.com"},
      {"github.com:22", RuleKind::kName, 22, "github.com:22"},
      {"*.example.com:8443", RuleKind::kSuffix, 8443, "*.example.com:8443"},
      {"203.0.113.7", RuleKind::kCidr, std::nullopt, "203.0.113.7"},
      {"203.0.113.7:5432", RuleKind::kCidr, 5432, "203.0.113.7:5432"},
      {"10.0.0.0/8", RuleKind::kCidr, std::nullopt, "10.0.0.0/8"},
      {"10.0.0.0/8:5432", RuleKind::kCidr, 5432, "10.0.0.0/8:5432"},
      {"2001:db8::1", RuleKind::kCidr, std::nullopt, "2001:db8::1"},
      {"[2001:db8::1]", RuleKind::kCidr, std::nullopt, "2001:db8::1"},
      {"[2001:db8::1]:443", RuleKind::kCidr, 443, "[2001:db8::1]:443"},
      {"fc00::/7", RuleKind::kCidr, std::nullopt, "fc00::/7"},
      {"[fc00::/7]:5432", RuleKind::kCidr, 5432, "[fc00::/7]:5432"},
  };
  for (const auto& [text, kind, port, canonical] : cases) {
    const Rule parsed = rule(text);
    EXPECT_EQ(parsed.kind, kind) << text;
    EXPECT_EQ(parsed.port, port) << text;
    EXPECT_EQ(parsed.to_string(), canonical) << text;
    EXPECT_EQ(rule(parsed.to_string()), parsed) << text << ": canonical text reads back";
  }
}

TEST(RuleTest, RefusesBadRules) {
  for (const char* text : {"",
                           "*",
                           "*.",
                           "*.*.com",
                           "a*.com",
                           "foo.*.com",
                           "github.com:0",
                           "github.com:65536",
                           "github.com:",
                           "github.com:22:33",
                           "github.com:x",
                           "github.com:022",
                           "[::1",
                           "[::1]x",
                           "[::1]:",
                           "[1.2.3.4]:80",
                           "[example.com]:80",
                           "10.0.0.0/33",
                           "10.0.0.1/8",
                           "0x7f.1",
                           "2130706433",
                           "127.1",
                           "bücher.de",
                           "a b",
                           ":80",
                           "*.com:99999"}) {
    auto parsed = parse_rule(text);
    EXPECT_FALSE(parsed) << "\"" << text << "\" parsed as " << (parsed ? parsed->to_string() : "");
    if (!parsed) {
      EXPECT_EQ(parsed.error().kind, ErrorKind::kInvalid);
    }
  }
  auto wildcard = parse_rule("foo.*.com");
  ASSERT_FALSE(wildcard);
  EXPECT_NE(wildcard.error().detail.find("foo.*.com"), std::string::npos)
      << wildcard.error().detail;
}

TEST(DecideTest, SuffixCoversSubdomainsNotTheApex) {
  const Policy policy = filtered({"*.github.com"});
  EXPECT_TRUE(connect(policy, "api.github.com", "140.82.112.6", 443).allowed);
  EXPECT_TRUE(connect(policy, "a.b.github.com", "140.82.112.6", 443).allowed);
  const Decision apex = connect(policy, "github.com", "140.82.112.3", 443);
  EXPECT_FALSE(apex.allowed);
  EXPECT_EQ(apex.rule, "default");
  EXPECT_FALSE(connect(policy, "evilgithub.com", "1.2.3.4", 443).allowed);
  EXPECT_FALSE(connect(policy, "github.com.evil.net", "1.2.3.4", 443).allowed);
}

TEST(DecideTest, ExactNameIsExact) {
  const Policy policy = filtered({"pypi.org"});
  const Decision exact = connect(policy, "PYPI.org.", "151.101.0.223", 443);
  EXPECT_TRUE(exact.allowed);
  EXPECT_EQ(exact.rule, "pypi.org");
  EXPECT_FALSE(connect(policy, "files.pypi.org", "151.101.0.223", 443).allowed);
  EXPECT_FALSE(connect(policy, std::nullopt, "151.101.0.223", 443).allowed)
      << "a name rule never matches a connection whose name is unknown";
}

TEST(DecideTest, PortlessAllowIsHttpAndHttpsOnly) {
  const Policy policy = filtered({"github.com", "github.com:22"});
  EXPECT_TRUE(connect(policy, "github.com", "140.82.112.3", 80).allowed);
  EXPECT_TRUE(connect(policy, "github.com", "140.82.112.3", 443).allowed);
  const Decision ssh = connect(policy, "github.com", "140.82.112.3", 22);
  EXPECT_TRUE(ssh.allowed);
  EXPECT_EQ(ssh.rule, "github.com:22");
  EXPECT_FALSE(connect(policy, "github.com", "140.82.112.3", 25).allowed);
  EXPECT_FALSE(connect(filtered({"1.1.1.1"}), std::nullopt, "1.1.1.1", 853).allowed);
  EXPECT_TRUE(connect(filtered({"1.1.1.1:853"}), std::nullopt, "1.1.1.1", 853).allowed);
}

// On 80 and 443 a portless allow covers what the engine saw to be HTTP/1.x or TLS only: h2c by
// prior knowledge, an HTTP head after a leading CRLF or ssh tunnelled on 443 need the port named.
TEST(DecideTest, PortlessAllowCoversOnlyHttpOrTlsOnItsPorts) {
  const Policy policy = filtered({"github.com", "*.corp.test:443", "10.0.0.0/8"});
  const auto other_tcp = [&](std::optional<std::string> name, std::string_view address,
                             uint16_t port) {
    return decide(policy, Floor{}, Connection{std::move(name), addr(address), port, false});
  };
  for (uint16_t port : {80, 443}) {
    const Decision refused = other_tcp("github.com", "140.82.112.3", port);
    EXPECT_FALSE(refused.allowed) << port;
    EXPECT_EQ(refused.rule, "default");
    const std::string spelt = "github.com:" + std::to_string(port);
    EXPECT_NE(refused.reason.find("neither TLS nor HTTP/1.x"), std::string::npos) << refused.reason;
    EXPECT_NE(refused.reason.find("allow \"" + spelt + "\""), std::string::npos) << refused.reason;
    EXPECT_TRUE(connect(policy, "github.com", "140.82.112.3", port).allowed) << "HTTP or TLS";
  }
  const Decision named = other_tcp("a.corp.test", "203.0.113.9", 443);
  EXPECT_TRUE(named.allowed) << "a rule naming the port covers any TCP on it";
  EXPECT_EQ(named.rule, "*.corp.test:443");
  // A private range opened by a portless CIDR: the same, and the reason names the address.
  const Decision cidr = other_tcp(std::nullopt, "10.1.2.3", 80);
  EXPECT_FALSE(cidr.allowed);
  EXPECT_NE(cidr.reason.find("allow \"10.1.2.3:80\""), std::string::npos) << cidr.reason;
  EXPECT_TRUE(connect(policy, std::nullopt, "10.1.2.3", 80).allowed);
  // Nothing would have allowed it as HTTP either: the usual reason.
  EXPECT_EQ(other_tcp("gitlab.com", "140.82.112.9", 80).reason,
            "no allow rule matches gitlab.com:80");
  // Deny rules and mode open do not look at the protocol.
  Policy open = policy;
  open.mode = Mode::kOpen;
  EXPECT_TRUE(decide(open, Floor{}, Connection{"x.test", addr("203.0.113.9"), 80, false}).allowed);
  const Policy deny = filtered({"github.com:80"}, {"github.com"});
  EXPECT_FALSE(
      decide(deny, Floor{}, Connection{"github.com", addr("140.82.112.3"), 80, false}).allowed);
}

TEST(DecideTest, DenyWins) {
  const Policy policy = filtered({"*.github.com", "140.82.0.0/16"},
                                 {"gist.github.com", "140.82.113.4", "*.github.com:22"});
  const Decision gist = connect(policy, "gist.github.com", "140.82.112.9", 443);
  EXPECT_FALSE(gist.allowed);
  EXPECT_EQ(gist.rule, "gist.github.com");
  EXPECT_NE(gist.reason.find("gist.github.com"), std::string::npos);
  const Decision by_address = connect(policy, "api.github.com", "140.82.113.4", 443);
  EXPECT_FALSE(by_address.allowed);
  EXPECT_EQ(by_address.rule, "140.82.113.4");
  EXPECT_FALSE(connect(policy, "api.github.com", "::ffff:140.82.113.4", 443).allowed)
      << "an IPv4 deny covers the mapped IPv6 spelling";
  EXPECT_TRUE(connect(policy, "api.github.com", "140.82.112.9", 443).allowed);
  EXPECT_FALSE(
      connect(filtered({"github.com:22"}, {"github.com"}), "github.com", "140.82.112.3", 22)
          .allowed)
      << "a portless deny covers every port";
  EXPECT_TRUE(connect(policy, "api.github.com", "140.82.112.9", 80).allowed)
      << "a deny with a port covers that port only";
}

TEST(DecideTest, FloorBeatsEveryRule) {
  const Policy policy = filtered({"0.0.0.0/0", "::/0", "*.example.com", "localhost",
                                  "169.254.169.254:80", "metadata.google.internal"});
  const std::tuple<std::optional<std::string>, const char*, const char*> cases[] = {
      {std::nullopt, "127.0.0.1", "floor: loopback"},
      {std::nullopt, "::1", "floor: loopback"},
      {std::nullopt, "::ffff:127.0.0.1", "floor: loopback"},
      {std::nullopt, "::ffff:7f00:1", "floor: loopback"},
      {std::nullopt, "169.254.169.254", "floor: cloud metadata"},
      {std::nullopt, "fd00:ec2::254", "floor: cloud metadata"},
      {std::nullopt, "100.100.100.200", "floor: cloud metadata"},
      {std::nullopt, "64:ff9b::a9fe:a9fe", "floor: cloud metadata"},
      {std::nullopt, "2002:a9fe:a9fe::", "floor: cloud metadata"},
      {"rebind.example.com", "127.0.0.1", "floor: loopback"},
      {"localhost", "127.0.0.1", "floor: loopback name"},
      {"metadata.google.internal", "169.254.169.254", "floor: cloud metadata name"},
      {"metadata.google.internal", "8.8.8.8", "floor: cloud metadata name"},
  };
  for (const auto& [name, address, reason] : cases) {
    const Decision decision = connect(policy, name, address, 80);
    EXPECT_FALSE(decision.allowed) << address;
    EXPECT_EQ(decision.rule, "floor") << address;
    EXPECT_EQ(decision.reason, reason) << address;
  }
  Policy open;
  open.mode = Mode::kOpen;
  EXPECT_EQ(connect(open, std::nullopt, "169.254.169.254", 80).reason, "floor: cloud metadata");
  EXPECT_EQ(connect(open, std::nullopt, "203.0.113.9", 22,
                    Floor(FloorConfig{
                        std::make_shared<HostAddresses>(std::vector{addr("203.0.113.9")}), {}}))
                .reason,
            "floor: host address");
}

TEST(DecideTest, PrivateRangesNeedAnExplicitCidrAllow) {
  const Policy by_name = filtered({"db.internal.example", "*.corp.example"});
  const Decision rebound = connect(by_name, "db.internal.example", "10.1.2.3", 443);
  EXPECT_FALSE(rebound.allowed);
  EXPECT_EQ(rebound.rule, "floor");
  EXPECT_NE(rebound.reason.find("10.0.0.0/8"), std::string::npos) << rebound.reason;
  EXPECT_FALSE(connect(by_name, "x.corp.example", "fd00::5", 443).allowed);
  EXPECT_FALSE(connect(by_name, "x.corp.example", "::ffff:192.168.1.1", 443).allowed);

  const Policy by_cidr = filtered({"10.0.0.0/8:5432", "192.168.1.10"});
  const Decision db = connect(by_cidr, std::nullopt, "10.1.2.3", 5432);
  EXPECT_TRUE(db.allowed);
  EXPECT_EQ(db.rule, "10.0.0.0/8:5432");
  EXPECT_TRUE(connect(by_cidr, "db.internal.example", "10.1.2.3", 5432).allowed)
      << "the CIDR allow opens the address whatever name it has";
  EXPECT_FALSE(connect(by_cidr, std::nullopt, "10.1.2.3", 443).allowed) << "wrong port";
  EXPECT_TRUE(connect(by_cidr, std::nullopt, "192.168.1.10", 443).allowed);
  EXPECT_TRUE(connect(by_cidr, std::nullopt, "::ffff:192.168.1.10", 443).allowed);
  EXPECT_FALSE(connect(by_cidr, std::nullopt, "192.168.1.11", 443).allowed);

  Policy open;
  open.mode = Mode::kOpen;
  EXPECT_FALSE(connect(open, std::nullopt, "172.16.0.1", 443).allowed);
  open.allow.push_back(rule("172.16.0.0/12"));
  EXPECT_TRUE(connect(open, std::nullopt, "172.16.0.1", 443).allowed);
  EXPECT_FALSE(connect(filtered({"100.64.0.0/10:80"}), std::nullopt, "100.100.100.200", 80).allowed)
      << "a CIDR covering a metadata address does not open it";
}

TEST(DecideTest, ModesDecideFirst) {
  Policy none = filtered({"*.example.com"});
  none.mode = Mode::kNone;
  EXPECT_EQ(connect(none, "a.example.com", "1.2.3.4", 443).rule, "mode none");
  none.mode = Mode::kLoopback;
  EXPECT_EQ(connect(none, "a.example.com", "1.2.3.4", 443).rule, "mode loopback");
  Policy open;
  open.mode = Mode::kOpen;
  const Decision public_dest = connect(open, "anything.example", "93.184.215.14", 12345);
  EXPECT_TRUE(public_dest.allowed);
  EXPECT_EQ(public_dest.rule, "mode open");
  open.deny.push_back(rule("*.example"));
  EXPECT_FALSE(connect(open, "anything.example", "93.184.215.14", 443).allowed)
      << "deny still wins";
}

TEST(DecideTest, HostileNamesAreRefused) {
  const Policy policy = filtered({"0.0.0.0/0"});
  const Decision decision = connect(policy, "bücher.example", "1.2.3.4", 443);
  EXPECT_FALSE(decision.allowed);
  EXPECT_EQ(decision.rule, "name");
  EXPECT_NE(decision.reason.find("xn--"), std::string::npos);
  EXPECT_FALSE(connect(policy, "a..b", "1.2.3.4", 443).allowed);
  EXPECT_TRUE(connect(policy, std::nullopt, "1.2.3.4", 443).allowed);
}

// Every spelling of 127.0.0.1 a client might put in a URL or Host header, from parse to
// decision, under a policy that allows everything: an address reaches the floor, the rest is
// refused as a host before anything could resolve it.
TEST(DecideTest, LoopbackInEverySpellingIsRefused) {
  const Policy policy = filtered({"0.0.0.0/0", "::/0", "*.example.com"});
  for (const char* text : {"127.0.0.1",     "127.0.0.2",        "::1",
                           "[::1]",         "::ffff:127.0.0.1", "[::ffff:127.0.0.1]",
                           "::ffff:7f00:1", "::127.0.0.1",      "64:ff9b::127.0.0.1",
                           "2002:7f00:1::", "0:0:0:0:0:0:0:1",  "0x7f.1",
                           "0x7f000001",    "2130706433",       "017700000001",
                           "127.1",         "0177.0.0.1",       "127.0.0.1.",
                           "localhost",     "LOCALHOST.",       "a.localhost"}) {
    auto host = parse_host(text);
    if (!host) continue;  // refused before any decision: never resolved, never dialled
    Decision decision;
    if (host->address) {
      decision = decide(policy, Floor{}, Connection{std::nullopt, *host->address, 80});
    } else {
      decision = decide(policy, Floor{}, Connection{host->name, addr("93.184.215.14"), 80});
    }
    EXPECT_FALSE(decision.allowed) << text;
    EXPECT_EQ(decision.rule, "floor") << text;
    EXPECT_NE(decision.reason.find("loopback"), std::string::npos)
        << text << ": " << decision.reason;
  }
  for (const char* text : {"0x7f.1", "0x7f000001", "2130706433", "017700000001", "127.1",
                           "0177.0.0.1", "127.0.0.1."}) {
    EXPECT_FALSE(parse_host(text)) << text;
  }
}

TEST(DecideNameTest, AnswersOnlyAllowedNames) {
  const Policy policy = filtered({"pypi.org", "*.github.com", "github.com:22", "10.0.0.0/8"},
                                 {"evil.github.com", "*.github.com:8080"});
  EXPECT_TRUE(decide_name(policy, "pypi.org").allowed);
  EXPECT_TRUE(decide_name(policy, "API.github.com.").allowed);
  EXPECT_TRUE(decide_name(policy, "github.com").allowed) << "allowed on port 22";
  EXPECT_FALSE(decide_name(policy, "evil.github.com").allowed);
  EXPECT_TRUE(decide_name(policy, "x.github.com").allowed) << "a deny with a port keeps DNS";
  const Decision exfil = decide_name(policy, "c2VjcmV0.attacker.example");
  EXPECT_FALSE(exfil.allowed);
  EXPECT_EQ(exfil.rule, "default");
  EXPECT_FALSE(decide_name(policy, "metadata.google.internal").allowed);
  EXPECT_FALSE(decide_name(policy, "2130706433").allowed);
  Policy open;
  open.mode = Mode::kOpen;
  EXPECT_TRUE(decide_name(open, "anything.example").allowed);
  EXPECT_FALSE(decide_name(open, "metadata.google.internal").allowed);
  EXPECT_FALSE(decide_name(open, "localhost").allowed);
  open.mode = Mode::kNone;
  EXPECT_FALSE(decide_name(open, "anything.example").allowed);
}

TEST(RebindingTest, ResolvedAddressesAreChecked) {
  const Policy policy = filtered({"*.example.com", "10.9.0.0/16"}, {"203.0.113.66"});
  const Floor floor(
      FloorConfig{std::make_shared<HostAddresses>(std::vector{addr("198.51.100.1")}), {}});
  EXPECT_TRUE(check_resolved(policy, floor, "a.example.com", addr("93.184.215.14")).allowed);
  for (const char* evil :
       {"127.0.0.1", "::1", "::ffff:127.0.0.1", "169.254.169.254", "fd00:ec2::254", "0.0.0.0",
        "198.51.100.1", "10.1.0.1", "192.168.0.1", "fc00::1", "64:ff9b::a00:1", "203.0.113.66"}) {
    const Decision decision = check_resolved(policy, floor, "a.example.com", addr(evil));
    EXPECT_FALSE(decision.allowed) << evil;
    EXPECT_NE(decision.reason.find("a.example.com resolves to"), std::string::npos)
        << decision.reason;
  }
  const Decision cidr = check_resolved(policy, floor, "a.example.com", addr("10.9.1.1"));
  EXPECT_TRUE(cidr.allowed);
  EXPECT_EQ(cidr.rule, "10.9.0.0/16");
}

TEST(AgreeNamesTest, CaseAndTrailingDotDoNotCount) {
  const NameSeen same[] = {
      {"dns", "API.Example.com."}, {"sni", "api.example.com"}, {"host", "api.EXAMPLE.com"}};
  EXPECT_EQ(agree_names(same), "api.example.com");
  const NameSeen one[] = {{"sni", "example.com"}};
  EXPECT_EQ(agree_names(one), "example.com");
}

TEST(AgreeNamesTest, DisagreementIsNamed) {
  const NameSeen differ[] = {
      {"dns", "allowed.example.com"}, {"sni", "allowed.example.com"}, {"host", "evil.example.net"}};
  auto result = agree_names(differ);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().detail.find("host \"evil.example.net\""), std::string::npos)
      << result.error().detail;
  EXPECT_NE(result.error().detail.find("dns \"allowed.example.com\""), std::string::npos);
  const NameSeen apex[] = {{"sni", "github.com"}, {"host", "api.github.com"}};
  EXPECT_FALSE(agree_names(apex));
  const NameSeen bad[] = {{"sni", "example.com"}, {"host", "exa mple.com"}};
  auto hostile = agree_names(bad);
  ASSERT_FALSE(hostile);
  EXPECT_TRUE(hostile.error().detail.starts_with("host: ")) << hostile.error().detail;
  EXPECT_FALSE(agree_names({}));
}

TEST(ModeTest, NamesRoundTrip) {
  for (Mode mode : {Mode::kNone, Mode::kLoopback, Mode::kFiltered, Mode::kOpen}) {
    EXPECT_EQ(parse_mode(mode_name(mode)), mode);
  }
  EXPECT_EQ(parse_mode("raw"), std::nullopt);
  EXPECT_EQ(parse_mode("Filtered"), std::nullopt);
}

}  // namespace
}  // namespace hutch::net
