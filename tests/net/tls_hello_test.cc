#include "net/tls_hello.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace hutch::net {
namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& out, size_t value) {
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

struct Extension {
  uint16_t type;
  Bytes data;
};

Extension server_name(std::string_view name) {
  Bytes entry = {0};
  put16(entry, name.size());
  entry.insert(entry.end(), name.begin(), name.end());
  Bytes data;
  put16(data, entry.size());
  data.insert(data.end(), entry.begin(), entry.end());
  return {0, data};
}

Extension alpn(std::initializer_list<std::string_view> protocols) {
  Bytes list;
  for (std::string_view protocol : protocols) {
    list.push_back(static_cast<uint8_t>(protocol.size()));
    list.insert(list.end(), protocol.begin(), protocol.end());
  }
  Bytes data;
  put16(data, list.size());
  data.insert(data.end(), list.begin(), list.end());
  return {16, data};
}

// A ClientHello handshake message (type, 3-byte length, body) with these extensions.
Bytes hello_message(const std::vector<Extension>& extensions, bool with_extensions = true) {
  Bytes body = {3, 3};
  body.insert(body.end(), 32, 0xab);            // random
  body.push_back(0);                            // session id
  body.insert(body.end(), {0, 2, 0x13, 0x01});  // one cipher suite
  body.insert(body.end(), {1, 0});              // null compression
  if (with_extensions) {
    Bytes all;
    for (const Extension& extension : extensions) {
      put16(all, extension.type);
      put16(all, extension.data.size());
      all.insert(all.end(), extension.data.begin(), extension.data.end());
    }
    put16(body, all.size());
    body.insert(body.end(), all.begin(), all.end());
  }
  Bytes message = {1, 0};
  put16(message, body.size());
  message.insert(message.end(), body.begin(), body.end());
  return message;
}

// The message in handshake records of at most `fragment` bytes each.
Bytes records(const Bytes& message, size_t fragment = 16384) {
  Bytes out;
  for (size_t at = 0; at < message.size(); at += fragment) {
    const size_t size = std::min(fragment, message.size() - at);
    out.insert(out.end(), {22, 3, 1});
    put16(out, size);
    out.insert(out.end(), message.begin() + at, message.begin() + at + size);
  }
  return out;
}

Bytes corpus(const char* name) {
  std::ifstream file(std::string(HUTCH_TLS_CORPUS) + "/" + name, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(file), {});
}

TEST(TlsHelloTest, ReadsSniAndAlpnOfARealHello) {
  const Bytes bytes = corpus("openssl_sni_alpn.bin");
  ASSERT_GT(bytes.size(), 100u);
  const ClientHello hello = parse_client_hello(bytes);
  EXPECT_EQ(hello.status, HelloStatus::kComplete) << hello.detail;
  EXPECT_EQ(hello.server_name, "api.example.com");
  EXPECT_EQ(hello.alpn, (std::vector<std::string>{"h2", "http/1.1"}));

  const ClientHello tls12 = parse_client_hello(corpus("openssl_tls12.bin"));
  EXPECT_EQ(tls12.status, HelloStatus::kComplete) << tls12.detail;
  EXPECT_EQ(tls12.server_name, "pypi.org");
  EXPECT_TRUE(tls12.alpn.empty());

  const ClientHello anonymous = parse_client_hello(corpus("openssl_no_sni.bin"));
  EXPECT_EQ(anonymous.status, HelloStatus::kNoSni) << anonymous.detail;
  EXPECT_EQ(anonymous.server_name, "");
}

TEST(TlsHelloTest, EveryPrefixNeedsMore) {
  const Bytes bytes = corpus("openssl_sni_alpn.bin");
  for (size_t size = 0; size < bytes.size(); ++size) {
    const ClientHello hello = parse_client_hello(std::span(bytes).first(size));
    ASSERT_EQ(hello.status, HelloStatus::kNeedMore) << size << ": " << hello.detail;
  }
}

TEST(TlsHelloTest, ReassemblesAHelloSplitOverRecords) {
  const Bytes message = hello_message({server_name("split.example.com"), alpn({"h2"})});
  for (size_t fragment : {1, 3, 4, 5, 17, 100}) {
    const Bytes bytes = records(message, fragment);
    const ClientHello hello = parse_client_hello(bytes);
    EXPECT_EQ(hello.status, HelloStatus::kComplete) << fragment << ": " << hello.detail;
    EXPECT_EQ(hello.server_name, "split.example.com") << fragment;
    EXPECT_EQ(hello.alpn, std::vector<std::string>{"h2"});
    for (size_t size : {bytes.size() / 2, bytes.size() - 1}) {
      EXPECT_EQ(parse_client_hello(std::span(bytes).first(size)).status, HelloStatus::kNeedMore)
          << fragment << " cut at " << size;
    }
  }
}

TEST(TlsHelloTest, TellsNotTlsFromMalformed) {
  const auto status = [](Bytes bytes) { return parse_client_hello(bytes).status; };
  const auto text = [](std::string_view s) { return Bytes(s.begin(), s.end()); };
  EXPECT_EQ(status(text("GET / HTTP/1.1\r\n")), HelloStatus::kNotTls);
  EXPECT_EQ(status(text("G")), HelloStatus::kNotTls);
  EXPECT_EQ(status(text("SSH-2.0-OpenSSH_9.2\r\n")), HelloStatus::kNotTls);
  EXPECT_EQ(status({0x80, 0x2e, 0x01, 0x00, 0x02}), HelloStatus::kNotTls) << "SSLv2 hello";
  EXPECT_EQ(status({22, 2}), HelloStatus::kNotTls);
  EXPECT_EQ(status({22, 3, 1, 0, 4, 2, 0, 0, 0}), HelloStatus::kNotTls) << "a ServerHello";
  EXPECT_EQ(status({21, 3, 3, 0, 2, 2, 40}), HelloStatus::kNotTls) << "an alert";
  EXPECT_EQ(status({22}), HelloStatus::kNeedMore);
  EXPECT_EQ(status({}), HelloStatus::kNeedMore);

  const Bytes message = hello_message({server_name("a.example")});
  Bytes interrupted = records(Bytes(message.begin(), message.begin() + 10));
  interrupted.insert(interrupted.end(), {23, 3, 3, 0, 1, 0});
  EXPECT_EQ(status(interrupted), HelloStatus::kMalformed) << "application data inside the hello";
  EXPECT_EQ(status({22, 3, 1, 0, 0}), HelloStatus::kMalformed) << "empty record";
  EXPECT_EQ(status({22, 3, 1, 0x48, 0x00}), HelloStatus::kNeedMore)
      << "an 18 KiB record is allowed";
  EXPECT_EQ(status({22, 3, 1, 0xff, 0xff}), HelloStatus::kMalformed) << "record over 18 KiB";
  EXPECT_EQ(status({22, 3, 1, 0, 4, 1, 0x02, 0, 0}), HelloStatus::kMalformed)
      << "a hello over 64 KiB";
  Bytes trailing = message;
  trailing.push_back(0);
  EXPECT_EQ(status(records(trailing)), HelloStatus::kMalformed) << "record past the message";
}

TEST(TlsHelloTest, HostileExtensions) {
  const auto parse = [](const std::vector<Extension>& extensions) {
    return parse_client_hello(records(hello_message(extensions)));
  };
  EXPECT_EQ(parse({server_name("a.example"), server_name("b.example")}).status,
            HelloStatus::kMalformed)
      << "server_name twice";
  Extension two_names = server_name("a.example");
  {
    Bytes entry = {0, 0, 9};
    for (char c : std::string_view("b.example")) entry.push_back(static_cast<uint8_t>(c));
    two_names.data.insert(two_names.data.end(), entry.begin(), entry.end());
    const size_t list = two_names.data.size() - 2;
    two_names.data[0] = static_cast<uint8_t>(list >> 8);
    two_names.data[1] = static_cast<uint8_t>(list);
  }
  EXPECT_EQ(parse({two_names}).status, HelloStatus::kMalformed) << "two host names";
  EXPECT_EQ(parse({server_name("")}).status, HelloStatus::kMalformed);
  Extension short_list = server_name("a.example");
  short_list.data[1] += 1;
  EXPECT_EQ(parse({short_list}).status, HelloStatus::kMalformed);
  EXPECT_EQ(parse({alpn({})}).status, HelloStatus::kMalformed);
  EXPECT_EQ(parse({alpn({"h2", ""})}).status, HelloStatus::kMalformed);
  EXPECT_EQ(parse({{0, {}}}).status, HelloStatus::kMalformed) << "empty server_name data";
  EXPECT_EQ(parse({{0, {0, 3, 1, 0, 0}}}).status, HelloStatus::kNoSni) << "another name type only";
  EXPECT_EQ(parse({}).status, HelloStatus::kNoSni);
  EXPECT_EQ(parse_client_hello(records(hello_message({}, false))).status, HelloStatus::kNoSni);

  // The name is returned as sent: the policy refuses what is not a host name.
  const ClientHello odd = parse({server_name(std::string_view("evil\0.example", 13))});
  EXPECT_EQ(odd.status, HelloStatus::kComplete);
  EXPECT_EQ(odd.server_name, std::string("evil\0.example", 13));
}

TEST(TlsHelloTest, StatusNames) {
  EXPECT_EQ(hello_status_name(HelloStatus::kNeedMore), "need more");
  EXPECT_EQ(hello_status_name(HelloStatus::kNotTls), "not tls");
}

}  // namespace
}  // namespace hutch::net
