// Request framing (net/http1_framing.h): where a request's body ends, read strictly, and the
// framings refused rather than guessed (request smuggling); chunked bodies fed whole and byte by
// byte; the status of an upgrade request's response.
#include "net/http1_framing.h"

#include <gtest/gtest.h>

#include <string>

namespace hutch::net {
namespace {

std::string head(const std::string& fields) {
  return "POST /v1/x HTTP/1.1\r\nHost: api.test\r\n" + fields + "\r\n";
}

std::span<const uint8_t> bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST(RequestFraming, ContentLengthChunkedOrNone) {
  EXPECT_EQ(request_framing(head(""))->kind, BodyFraming::Kind::kNone);
  auto length = request_framing(head("Content-Length: 42\r\n"));
  ASSERT_TRUE(length);
  EXPECT_EQ(length->kind, BodyFraming::Kind::kLength);
  EXPECT_EQ(length->length, 42u);
  EXPECT_EQ(request_framing(head("content-length:\t7 \r\n"))->length, 7u);
  EXPECT_EQ(request_framing(head("X-Content-Length: 9\r\n"))->kind, BodyFraming::Kind::kNone);
  EXPECT_EQ(request_framing(head("Transfer-Encoding: chunked\r\n"))->kind,
            BodyFraming::Kind::kChunked);
  EXPECT_EQ(request_framing(head("transfer-encoding: Chunked\r\n"))->kind,
            BodyFraming::Kind::kChunked);
}

TEST(RequestFraming, AmbiguousFramingIsRefusedWithoutEchoingValues) {
  for (const char* fields :
       {"Content-Length: 1\r\nContent-Length: 1\r\n", "Content-Length: 1\r\nContent-Length: 2\r\n",
        "Content-Length: -1\r\n", "Content-Length: 1x\r\n", "Content-Length: \r\n",
        "Content-Length: 0x10\r\n", "Content-Length: +5\r\n",
        "Content-Length: 99999999999999999999999\r\n", "Content-Length: 1, 1\r\n",
        "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: xchunked\r\n"}) {
    auto refused = request_framing(head(fields));
    ASSERT_FALSE(refused) << fields;
    EXPECT_EQ(refused.error().kind, ErrorKind::kInvalid) << fields;
    EXPECT_EQ(refused.error().detail.find("gzip"), std::string::npos);
  }
}

TEST(RequestFraming, UpgradeNeedsTheFieldAndTheConnectionOption) {
  EXPECT_TRUE(wants_upgrade(head("Connection: Upgrade\r\nUpgrade: websocket\r\n")));
  EXPECT_TRUE(wants_upgrade(head("Connection: keep-alive, upgrade\r\nUpgrade: websocket\r\n")));
  EXPECT_TRUE(wants_upgrade(head("Connection: close\r\nConnection: upgrade\r\nUpgrade: h2c\r\n")));
  EXPECT_FALSE(wants_upgrade(head("Upgrade: websocket\r\n")));
  EXPECT_FALSE(wants_upgrade(head("Connection: upgrade\r\n")));
  EXPECT_FALSE(wants_upgrade(head("Connection: upgraded\r\nUpgrade: websocket\r\n")));
}

TEST(RequestFraming, UpgradeOffersOtherThanWebSocketAreTakenOut) {
  const std::string h2c = head(
      "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQ\r\n"
      "Accept: */*\r\n");
  const auto without = only_websocket_upgrade(h2c);
  ASSERT_TRUE(without);
  EXPECT_EQ(*without, head("Connection: Upgrade, HTTP2-Settings\r\nAccept: */*\r\n"));
  EXPECT_FALSE(wants_upgrade(*without));
  // WebSocket stays, whatever else is offered beside it, in any case and with a version.
  const auto mixed = only_websocket_upgrade(
      head("Connection: upgrade\r\nUpgrade: H2C, WebSocket/13 ,foo/1\r\nupgrade: tls/1.2\r\n"));
  ASSERT_TRUE(mixed);
  EXPECT_EQ(*mixed, head("Connection: upgrade\r\nUpgrade: WebSocket/13\r\n"));
  EXPECT_TRUE(wants_upgrade(*mixed));
  EXPECT_FALSE(only_websocket_upgrade(head("Connection: Upgrade\r\nUpgrade: websocket\r\n")));
  EXPECT_FALSE(only_websocket_upgrade(head("Accept: */*\r\n")));
  // HTTP2-Settings alone is an h2c offer's remains: taken out too.
  EXPECT_EQ(only_websocket_upgrade(head("HTTP2-Settings: AAMA\r\n")).value_or(""), head(""));
}

// The whole body at once, then byte by byte: the same body either way.
void expect_body(const std::string& body, const std::string& after = "GET / HTTP/1.1") {
  {
    ChunkedBody chunked;
    const std::string input = body + after;
    const ChunkedBody::Scan scan = chunked.scan(bytes(input));
    EXPECT_TRUE(scan.error.empty()) << scan.error << " in " << body;
    EXPECT_TRUE(scan.done) << body;
    EXPECT_EQ(scan.body, body.size()) << body;
  }
  ChunkedBody chunked;
  std::string pending;
  size_t taken = 0;
  for (char c : body) {
    pending.push_back(c);
    const ChunkedBody::Scan scan = chunked.scan(bytes(pending));
    ASSERT_TRUE(scan.error.empty()) << scan.error << " in " << body;
    taken += scan.body;
    pending.erase(0, scan.body);
    if (scan.done) break;
  }
  EXPECT_EQ(taken, body.size()) << body;
  EXPECT_TRUE(pending.empty());
}

TEST(ChunkedBody, WellFormedBodiesEndWhereTheyEnd) {
  expect_body("0\r\n\r\n");
  expect_body("3\r\nabc\r\n0\r\n\r\n");
  expect_body("A\r\n0123456789\r\n1\r\n\n\r\n0\r\n\r\n");
  expect_body("0003\r\nabc\r\n00\r\n\r\n");
  expect_body("3;name=value\r\nabc\r\n3 ; a ; b = \"q \\\" d\"\r\nxyz\r\n0\r\n\r\n");
  ChunkedBody largest;  // the largest size spelt: its data would follow
  const ChunkedBody::Scan scan = largest.scan(bytes("ffffffffffffffff\r\nabc"));
  EXPECT_TRUE(scan.error.empty()) << scan.error;
  EXPECT_FALSE(scan.done);
  EXPECT_EQ(scan.body, 21u);
}

TEST(ChunkedBody, TrailersAreReportedForChecking) {
  const std::string body = "3\r\nabc\r\n0\r\nX-Checksum: 12\r\nX-Other:\tv\r\n\r\n";
  ChunkedBody chunked;
  const ChunkedBody::Scan scan = chunked.scan(bytes(body + "next"));
  ASSERT_TRUE(scan.error.empty()) << scan.error;
  EXPECT_TRUE(scan.done);
  EXPECT_EQ(scan.body, body.size());
  EXPECT_EQ(body.substr(scan.trailers_at, scan.trailers_size),
            "X-Checksum: 12\r\nX-Other:\tv\r\n\r\n");
  expect_body("0\r\nA: b\r\n\r\n");
}

TEST(ChunkedBody, HostileFramingIsRefused) {
  for (const char* body : {
           "x\r\n",                           // not hex
           "\r\n",                            // no digits
           "-1\r\n",                          // a sign
           "0x3\r\nabc\r\n",                  // a prefix
           "10000000000000000\r\n",           // 2^64: 17 digits
           "00000000000000001\r\n",           // 17 digits, even with leading zeros
           "3\nabc\r\n",                      // bare LF
           "3\r\r\nabc\r\n",                  // bare CR
           "3 \r\nabc\r\n",                   // whitespace without an extension
           "3;\r\nabc\r\n",                   // an extension without a name
           "3;a=\"open\r\nabc\r\n",           // an unclosed quoted value
           "3;a=b c\r\nabc\r\n",              // junk after a value
           "3\r\nabcX\r\n",                   // data longer than its size
           "3\r\nab\r\n\r\n",                 // shorter: its CRLF is data, then no CRLF
           "3\r\nabc\n0\r\n\r\n",             // data ended by a bare LF
           "0\r\nContent-Length: 5\r\n\r\n",  // framing in trailers
           "0\r\nTransfer-Encoding: chunked\r\n\r\n",
           "0\r\nHost: evil.test\r\n\r\n",
           "0\r\n folded\r\n\r\n",      // folding
           "0\r\nbad name: v\r\n\r\n",  // not a token
           "0\r\nA: b\rc\r\n\r\n",      // bare CR in a trailer
           "0\r\n\rX",                  // neither a field nor the end
       }) {
    ChunkedBody chunked;
    const ChunkedBody::Scan scan = chunked.scan(bytes(body));
    EXPECT_FALSE(scan.error.empty()) << body;
    EXPECT_FALSE(scan.done) << body;
  }
}

TEST(ChunkedBody, LongLinesAndTrailersAreBounded) {
  ChunkedBody line;
  const std::string extension = "3;" + std::string(kMaxChunkLine, 'a');
  EXPECT_FALSE(line.scan(bytes(extension)).error.empty()) << "no CRLF in sight: refused early";
  ChunkedBody trailers;
  const std::string big = "0\r\nX: " + std::string(70 * 1024, 'v');
  const ChunkedBody::Scan scan = trailers.scan(bytes(big));
  EXPECT_FALSE(scan.error.empty());
  ChunkedBody waiting;
  EXPECT_TRUE(waiting.scan(bytes("3;a=b")).error.empty()) << "a line still arriving waits";
}

TEST(ResponseHead, StatusLineOnly) {
  auto parse = [](std::string_view text) { return parse_response_head(bytes(text)); };
  const std::string_view text = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nxx";
  ResponseHead head = parse(text);
  ASSERT_EQ(head.status, ResponseHead::Status::kComplete);
  EXPECT_EQ(head.code, 101);
  EXPECT_EQ(head.head_size, text.size() - 2);
  EXPECT_EQ(parse("HTTP/1.1 200\r\n\r\n").code, 200);
  EXPECT_EQ(parse("HTTP/1.1 101 Switching").status, ResponseHead::Status::kNeedMore);
  for (const char* bad : {"HTTP/2 101 x\r\n\r\n", "HTTP/1.1 1x1 x\r\n\r\n", "HTTP/1.1 10\r\n\r\n",
                          "HTTP/1.1 1011 x\r\n\r\n", "SSH-2.0\r\n\r\n"}) {
    EXPECT_EQ(parse(bad).status, ResponseHead::Status::kMalformed) << bad;
  }
  EXPECT_EQ(parse(std::string(70 * 1024, 'x')).status, ResponseHead::Status::kMalformed);
}

}  // namespace
}  // namespace hutch::net
