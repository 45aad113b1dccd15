// The names a connection shows at each layer, read by the real parsers and checked together:
// what the engine will do when a sandbox resolves one name, sends another in its TLS SNI and a
// third in its HTTP Host (domain fronting, or a client tricked into it).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "net/dns_message.h"
#include "net/http_head.h"
#include "net/policy.h"
#include "net/tls_hello.h"

namespace hutch::net {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes corpus(const char* name) {
  std::ifstream file(std::string(HUTCH_TLS_CORPUS) + "/" + name, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(file), {});
}

Bytes text(std::string_view s) { return Bytes(s.begin(), s.end()); }

// The DNS name the sandbox asked for: a query for `name`, as the stub parses it.
std::string dns_name(std::string_view name) {
  Bytes packet = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (size_t start = 0; start < name.size();) {
    const size_t dot = std::min(name.find('.', start), name.size());
    packet.push_back(static_cast<uint8_t>(dot - start));
    packet.insert(packet.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  packet.insert(packet.end(), {0, 0, 1, 0, 1});
  auto query = parse_dns_query(packet);
  EXPECT_TRUE(query) << name;
  return query ? query->name : "";
}

TEST(LayersTest, SniAndHostThatAgreeGiveOneName) {
  const ClientHello hello = parse_client_hello(corpus("openssl_sni_alpn.bin"));
  ASSERT_EQ(hello.status, HelloStatus::kComplete);
  const HttpHead head = parse_http_head(text("GET / HTTP/1.1\r\nHost: API.example.com\r\n\r\n"));
  ASSERT_EQ(head.status, HeadStatus::kComplete);
  const std::string dns = dns_name("api.EXAMPLE.com");
  const NameSeen seen[] = {{"dns", dns}, {"sni", hello.server_name}, {"host", head.host}};
  EXPECT_EQ(agree_names(seen), "api.example.com");
}

TEST(LayersTest, HostDisagreeingWithSniIsRefused) {
  const ClientHello hello = parse_client_hello(corpus("openssl_sni_alpn.bin"));
  ASSERT_EQ(hello.server_name, "api.example.com");
  const HttpHead head =
      parse_http_head(text("GET / HTTP/1.1\r\nHost: internal.evil.example\r\n\r\n"));
  ASSERT_EQ(head.status, HeadStatus::kComplete);
  const NameSeen seen[] = {{"sni", hello.server_name}, {"host", head.host}};
  auto name = agree_names(seen);
  ASSERT_FALSE(name);
  EXPECT_NE(name.error().detail.find("sni \"api.example.com\", host \"internal.evil.example\""),
            std::string::npos)
      << name.error().detail;
}

TEST(LayersTest, SniDisagreeingWithTheResolvedNameIsRefused) {
  const ClientHello hello = parse_client_hello(corpus("openssl_tls12.bin"));
  ASSERT_EQ(hello.server_name, "pypi.org");
  const std::string dns = dns_name("files.pythonhosted.org");
  const NameSeen seen[] = {{"dns", dns}, {"sni", hello.server_name}};
  EXPECT_FALSE(agree_names(seen));
}

}  // namespace
}  // namespace hutch::net
