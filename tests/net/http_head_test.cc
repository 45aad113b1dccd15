#include "net/http_head.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hutch::net {
namespace {

HttpHead parse(std::string_view text) {
  return parse_http_head(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

TEST(HttpHeadTest, OriginFormTakesTheHostHeader) {
  const std::string_view text =
      "GET /simple/requests/ HTTP/1.1\r\nUser-Agent: pip\r\n"
      "host:  PyPI.org:8080 \r\nAccept: */*\r\n\r\nBODY";
  const HttpHead head = parse(text);
  ASSERT_EQ(head.status, HeadStatus::kComplete) << head.detail;
  EXPECT_EQ(head.method, "GET");
  EXPECT_EQ(head.target, "/simple/requests/");
  EXPECT_EQ(head.host, "PyPI.org");
  EXPECT_EQ(head.port, 8080);
  EXPECT_EQ(head.head_size, text.size() - 4);
}

TEST(HttpHeadTest, AbsoluteFormAndConnectTakeTheTarget) {
  HttpHead head = parse("GET http://example.com:81/x?y HTTP/1.1\r\nHost: example.com:81\r\n\r\n");
  ASSERT_EQ(head.status, HeadStatus::kComplete) << head.detail;
  EXPECT_EQ(head.host, "example.com");
  EXPECT_EQ(head.port, 81);
  head = parse("GET HTTP://[2001:db8::1]/ HTTP/1.1\r\n\r\n");
  ASSERT_EQ(head.status, HeadStatus::kComplete) << head.detail;
  EXPECT_EQ(head.host, "2001:db8::1");
  EXPECT_EQ(head.port, std::nullopt);
  head = parse("CONNECT github.com:22 HTTP/1.1\r\nHost: github.com:22\r\n\r\n");
  ASSERT_EQ(head.status, HeadStatus::kComplete) << head.detail;
  EXPECT_EQ(head.host, "github.com");
  EXPECT_EQ(head.port, 22);
  head = parse("GET / HTTP/1.0\r\n\r\n");
  ASSERT_EQ(head.status, HeadStatus::kComplete) << "HTTP/1.0 may omit Host";
  EXPECT_EQ(head.host, "");
  head = parse("GET http://Example.COM./ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  EXPECT_EQ(head.status, HeadStatus::kComplete) << "case and a trailing dot do not count";
}

TEST(HttpHeadTest, NeedsMoreUntilTheEmptyLine) {
  const std::string_view text = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
  for (size_t size = 0; size < text.size(); ++size) {
    EXPECT_EQ(parse(text.substr(0, size)).status, HeadStatus::kNeedMore) << size;
  }
  const std::string huge = "GET / HTTP/1.1\r\nX: " + std::string(kMaxHttpHead, 'a');
  EXPECT_EQ(parse(huge).status, HeadStatus::kMalformed);
}

TEST(HttpHeadTest, RefusesAmbiguousHeads) {
  const std::pair<const char*, const char*> cases[] = {
      {"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", "duplicate Host"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nhOST: a.example\r\n\r\n", "duplicate Host"},
      {"GET / HTTP/1.1\r\n\r\n", "without a host"},
      {"GET / HTTP/1.1\r\nHost:\r\n\r\n", "without a host"},
      {"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", "disagrees"},
      {"GET http://a.example:80/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n", "disagrees"},
      {"CONNECT a.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n", "disagrees"},
      {"GET http://user@a.example/ HTTP/1.1\r\n\r\n", "userinfo"},
      {"GET / HTTP/1.1\r\nHost: evil.example@a.example\r\n\r\n", "userinfo"},
      {"GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", "whitespace before ':'"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\n folded\r\n\r\n", "folding"},
      {"GET / HTTP/1.1\nHost: a.example\r\n\r\n", "bare CR, LF"},
      {"GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", "bare CR, LF"},
      {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", "request line"},
      {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP/1.0 or HTTP/1.1"},
      {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", "bad method"},
      {"GET ftp://a.example/ HTTP/1.1\r\n\r\n", "absolute-form"},
      {"CONNECT a.example HTTP/1.1\r\nHost: a.example\r\n\r\n", "without a port"},
      {"GET / HTTP/1.1\r\nHost: a.example:0\r\n\r\n", "bad port"},
      {"GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n", "bad port"},
      {"GET / HTTP/1.1\r\nHost: a.example:\r\n\r\n", "bad port"},
      {"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", "unclosed"},
      {"GET / HTTP/1.1\r\nHost: a\x01.example\r\n\r\n", "control byte"},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", "without ':'"},
  };
  for (const auto& [text, reason] : cases) {
    const HttpHead head = parse(text);
    EXPECT_EQ(head.status, HeadStatus::kMalformed) << text;
    EXPECT_NE(head.detail.find(reason), std::string::npos) << text << ": " << head.detail;
  }
  EXPECT_EQ(parse(std::string_view("GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n", 29)).status,
            HeadStatus::kMalformed);
}

TEST(ForbiddenResponseTest, NamesTheRuleInJson) {
  const std::string response =
      build_forbidden_response("evil\"\xff.example", 80, "default", "no allow rule matches\n");
  ASSERT_TRUE(response.starts_with("HTTP/1.1 403 Forbidden\r\n"));
  EXPECT_NE(response.find("Connection: close\r\n"), std::string::npos);
  const size_t split = response.find("\r\n\r\n");
  ASSERT_NE(split, std::string::npos);
  const std::string body = response.substr(split + 4);
  EXPECT_NE(response.find("Content-Length: " + std::to_string(body.size()) + "\r\n"),
            std::string::npos);
  const auto json = nlohmann::json::parse(body);
  EXPECT_EQ(json["error"], "network_denied");
  EXPECT_EQ(json["host"], "evil\"\u00ff.example");
  EXPECT_EQ(json["port"], 80);
  EXPECT_EQ(json["rule"], "default");
  EXPECT_EQ(json["reason"], "no allow rule matches\n");
}

}  // namespace
}  // namespace hutch::net
