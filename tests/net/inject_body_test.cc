// request_body_length (net/inject.h): how the relay frames a body on a terminated connection,
// and the framings it refuses rather than guesses.
#include <gtest/gtest.h>

#include <string>

#include "net/inject.h"

namespace hutch::net {
namespace {

std::string head(const std::string& fields) {
  return "POST /v1/x HTTP/1.1\r\nHost: api.test\r\n" + fields + "\r\n";
}

TEST(RequestBodyLength, ContentLengthOrNone) {
  EXPECT_EQ(request_body_length(head("")).value(), 0u);
  EXPECT_EQ(request_body_length(head("Content-Length: 42\r\n")).value(), 42u);
  EXPECT_EQ(request_body_length(head("content-length:\t7 \r\n")).value(), 7u);
  EXPECT_EQ(request_body_length(head("X-Content-Length: 9\r\n")).value(), 0u);
}

TEST(RequestBodyLength, AmbiguousOrUnfollowedFramingIsRefused) {
  auto chunked = request_body_length(head("Transfer-Encoding: chunked\r\n"));
  ASSERT_FALSE(chunked);
  EXPECT_EQ(chunked.error().kind, ErrorKind::kUnsupported);
  for (const char* fields :
       {"Content-Length: 1\r\nContent-Length: 1\r\n", "Content-Length: -1\r\n",
        "Content-Length: 1x\r\n", "Content-Length: \r\n", "Content-Length: 0x10\r\n",
        "Content-Length: 99999999999999999999999\r\n", "Content-Length: 1, 1\r\n"}) {
    auto refused = request_body_length(head(fields));
    ASSERT_FALSE(refused) << fields;
    EXPECT_EQ(refused.error().kind, ErrorKind::kInvalid) << fields;
  }
  auto both = request_body_length(head("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"));
  EXPECT_FALSE(both);
}

}  // namespace
}  // namespace hutch::net
