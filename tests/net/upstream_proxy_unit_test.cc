// The upstream proxy's pure logic (net/upstream_proxy.h) and the decision for names only the
// proxy resolves (decide_unresolved): no sockets.
#include <gtest/gtest.h>

#include <string>

#include "net/upstream_proxy.h"

namespace hutch::net {
namespace {

std::span<const uint8_t> bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST(ProxyUrl, TakesHttpNamesAndLiteralsAndRefusesEverythingElse) {
  auto named = parse_proxy_url("http://Proxy.Corp.:3128/");
  ASSERT_TRUE(named) << named.error().message();
  EXPECT_EQ(named->host, "proxy.corp");
  EXPECT_FALSE(named->address);
  EXPECT_EQ(named->port, 3128);
  auto v6 = parse_proxy_url("http://[2001:db8::1]:8080");
  ASSERT_TRUE(v6) << v6.error().message();
  EXPECT_EQ(v6->address, Address::parse("2001:db8::1").value());
  auto v4 = parse_proxy_url("http://10.1.2.3:3128");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->host, "10.1.2.3");
  for (const char* bad :
       {"https://proxy.corp:3128", "socks5://proxy.corp:1080", "http://user:pw@proxy.corp:3128",
        "http://proxy.corp", "http://proxy.corp:3128/path", "http://10.0.0.0/8:3128",
        "http://*.corp:3128", "http://proxy.corp:0", "proxy.corp:3128"}) {
    EXPECT_FALSE(parse_proxy_url(bad)) << bad;
  }
  auto https = parse_proxy_url("https://proxy.corp:3128");
  EXPECT_NE(https.error().message().find("not supported yet"), std::string::npos);
  auto credentials = parse_proxy_url("http://user:secret-pw@proxy.corp:3128");
  EXPECT_EQ(credentials.error().message().find("secret-pw"), std::string::npos)
      << "an error never repeats the credentials";
}

TEST(NoProxy, NamesSuffixesAddressesAndPrefixes) {
  auto list = NoProxy::parse("internal.corp, .svc.local *.example.com,10.0.0.0/8\t2001:db8::/32");
  ASSERT_TRUE(list) << list.error().message();
  EXPECT_EQ(list->to_string(), "internal.corp,*.svc.local,*.example.com,10.0.0.0/8,2001:db8::/32");
  EXPECT_TRUE(list->covers("internal.corp", std::nullopt));
  EXPECT_FALSE(list->covers("a.internal.corp", std::nullopt)) << "a name is that name only";
  EXPECT_TRUE(list->covers("a.b.svc.local", std::nullopt));
  EXPECT_FALSE(list->covers("svc.local", std::nullopt)) << "a suffix is not its apex";
  EXPECT_TRUE(list->covers("api.example.com", std::nullopt));
  EXPECT_TRUE(list->covers(std::nullopt, Address::parse("10.9.8.7").value()));
  EXPECT_TRUE(list->covers(std::nullopt, Address::parse("::ffff:10.9.8.7").value()))
      << "an embedded IPv4 address counts";
  EXPECT_TRUE(list->covers("public.test", Address::parse("2001:db8::5").value()));
  EXPECT_FALSE(list->covers("public.test", Address::parse("203.0.113.1").value()));
  EXPECT_TRUE(NoProxy::parse("")->empty());
  for (const char* bad : {"example.com:443", "*", "exa mple..com", "10.0.0.1/8"})
    EXPECT_FALSE(NoProxy::parse(bad)) << bad;
}

TEST(UpstreamProxy, TunnelsByNameElseByAddressUnlessNoProxyCoversIt) {
  UpstreamProxy proxy;
  proxy.host = "2001:db8::9";
  proxy.address = *Address::parse("2001:db8::9");
  proxy.port = 3128;
  proxy.no_proxy = *NoProxy::parse("direct.test,10.0.0.0/8");
  EXPECT_EQ(proxy.authority(), "[2001:db8::9]:3128");
  EXPECT_EQ(proxy.tunnel_target("api.test", Address::parse("203.0.113.5").value(), 443),
            "api.test:443");
  EXPECT_EQ(proxy.tunnel_target(std::nullopt, Address::parse("203.0.113.5").value(), 22),
            "203.0.113.5:22");
  EXPECT_EQ(proxy.tunnel_target(std::nullopt, Address::parse("2001:db8::5").value(), 22),
            "[2001:db8::5]:22");
  EXPECT_EQ(proxy.tunnel_target("inner.test", std::nullopt, 80), "inner.test:80");
  EXPECT_FALSE(proxy.tunnel_target("direct.test", Address::parse("203.0.113.5").value(), 80));
  EXPECT_FALSE(proxy.tunnel_target("api.test", Address::parse("10.1.1.1").value(), 443));
  EXPECT_TRUE(proxy.is_proxy_address(*Address::parse("2001:db8::9")));
  EXPECT_FALSE(proxy.is_proxy_address(*Address::parse("2001:db8::a")));
}

TEST(ConnectRequest, CarriesTheTargetAndTheCredentialsHeader) {
  EXPECT_EQ(connect_request("api.test:443", std::nullopt),
            "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n");
  EXPECT_EQ(connect_request("[2001:db8::5]:22", "Basic dTpw"),
            "CONNECT [2001:db8::5]:22 HTTP/1.1\r\nHost: [2001:db8::5]:22\r\n"
            "Proxy-Authorization: Basic dTpw\r\n\r\n");
}

TEST(ProxyAnswer, ReadsTheStatusLineUpToTheEmptyLine) {
  auto ok = parse_proxy_answer(bytes("HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0"));
  EXPECT_EQ(ok.status, ProxyAnswer::Status::kComplete);
  EXPECT_EQ(ok.code, 200);
  EXPECT_EQ(ok.head_size, 39u) << "the tunnel's first bytes are not the answer's";
  auto refused = parse_proxy_answer(
      bytes("HTTP/1.0 407 Proxy Authentication Required\r\nContent-Length: 3\r\n\r\nno!"));
  EXPECT_EQ(refused.status, ProxyAnswer::Status::kComplete);
  EXPECT_EQ(refused.code, 407);
  EXPECT_EQ(parse_proxy_answer(bytes("HTTP/1.1 200 OK\r\n")).status,
            ProxyAnswer::Status::kNeedMore);
  EXPECT_EQ(parse_proxy_answer(bytes("HTTP/1.1 200\r\n\r\n")).code, 200) << "no reason phrase";
  for (const char* bad :
       {"SSH-2.0-x\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n",
        "HTTP/2 200\r\n\r\n", "HTTP/1.1 099 x\r\n\r\n"}) {
    EXPECT_EQ(parse_proxy_answer(bytes(bad)).status, ProxyAnswer::Status::kMalformed) << bad;
  }
  const std::string endless(kMaxProxyAnswer, 'x');
  EXPECT_EQ(parse_proxy_answer(bytes(endless)).status, ProxyAnswer::Status::kMalformed);
}

TEST(ProxyFailureResponse, Is502WithJsonNamingTheProxyStatus) {
  const std::string response =
      build_proxy_failure_response("a\"b.test", 80, 407, "upstream proxy p:3128 answered 407");
  EXPECT_TRUE(response.starts_with("HTTP/1.1 502 Bad Gateway\r\n")) << response;
  EXPECT_NE(
      response.find("{\"error\":\"upstream_proxy_failed\",\"host\":\"a\\\"b.test\",\"port\":80,"
                    "\"proxy_status\":407,\"reason\":\"upstream proxy p:3128 answered 407\"}\n"),
      std::string::npos)
      << response;
}

TEST(DecideUnresolved, OnlyRulesNamingTheNameOnItsPortAllowIt) {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* rule : {"inner.test", "*.corp.test", "git.test:22", "10.0.0.0/8"})
    policy.allow.push_back(*parse_rule(rule));
  policy.deny.push_back(*parse_rule("bad.corp.test"));
  EXPECT_TRUE(decide_unresolved(policy, "inner.test", 443, true).allowed);
  EXPECT_TRUE(decide_unresolved(policy, "x.corp.test", 80, true).allowed);
  EXPECT_FALSE(decide_unresolved(policy, "inner.test", 22, true).allowed) << "80 and 443 only";
  EXPECT_TRUE(decide_unresolved(policy, "git.test", 22, false).allowed);
  const Decision not_http = decide_unresolved(policy, "inner.test", 443, false);
  EXPECT_FALSE(not_http.allowed) << "a portless allow covers HTTP and TLS only";
  EXPECT_NE(not_http.reason.find("allow \"inner.test:443\""), std::string::npos) << not_http.reason;
  EXPECT_EQ(decide_unresolved(policy, "bad.corp.test", 443, true).rule, "bad.corp.test");
  EXPECT_EQ(decide_unresolved(policy, "metadata.google.internal", 80, true).rule, "floor");
  EXPECT_EQ(decide_unresolved(policy, "other.test", 443, true).rule, "default");
  policy.mode = Mode::kOpen;
  EXPECT_FALSE(decide_unresolved(policy, "other.test", 443, true).allowed)
      << "mode open cannot vouch for an address nobody here knows";
  EXPECT_TRUE(decide_unresolved(policy, "inner.test", 443, true).allowed);
}

}  // namespace
}  // namespace hutch::net
