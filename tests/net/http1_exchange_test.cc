// The engine's HTTP/1.1 exchange end to end (net/engine/http1_exchange.cc), as root, on both
// paths: plain HTTP and TLS terminated for a host with an inject rule. A sandbox namespace S with
// the egress path; an upstream namespace U whose lo holds TEST-NET addresses with HTTP/1.1
// servers (plain on 80, TLS on 443 with certificates from a test CA the engine trusts) that
// record what they receive, decode chunked bodies and echo WebSocket frames after a 101; the
// clients are threads in S speaking raw bytes (and OpenSSL), so every framing can be sent.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "net/egress_path.h"
#include "net/engine/engine.h"
#include "net/inject.h"
#include "net/tls/sandbox_ca.h"
#include "net/tls/server_context.h"
#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/netns.h"
#include "tests/common/socket_io.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"
#include "tests/net/engine_world.h"

namespace hutch::net {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kSecret = "sk-real-secret-4f1c9e";
const Address kApi = *Address::parse("198.51.100.10");
const Address kOther = *Address::parse("198.51.100.20");

using testing::new_netns;

using testing::in_netns;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// A field's value in a head ("" when absent), the name compared case-insensitively.
std::string field(const std::string& head, const std::string& name) {
  const std::string folded = lower(head);
  const size_t at = folded.find("\r\n" + lower(name) + ":");
  if (at == std::string::npos) return "";
  size_t start = at + 3 + name.size();
  while (head[start] == ' ') ++start;
  return head.substr(start, head.find("\r\n", start) - start);
}

// Bytes both ways over a plain socket or a TLS session, the same for servers and clients.
class Stream {
 public:
  virtual ~Stream() = default;
  // >0 bytes, 0 at the end, <0 an error (a reset, a timeout).
  virtual ssize_t read_some(char* data, size_t size) = 0;
  virtual bool write(std::string_view data) = 0;

  // Reads into buffer_ until it holds `delimiter`; the bytes through it are taken out.
  std::optional<std::string> read_through(std::string_view delimiter) {
    size_t at;
    while ((at = buffer_.find(delimiter)) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    std::string out = buffer_.substr(0, at + delimiter.size());
    buffer_.erase(0, out.size());
    return out;
  }
  std::optional<std::string> read_exactly(size_t n) {
    while (buffer_.size() < n) {
      if (!fill()) return std::nullopt;
    }
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return out;
  }
  // One response with a Content-Length body (what the test upstreams and the engine send).
  std::optional<std::string> read_response() {
    auto head = read_through("\r\n\r\n");
    if (!head) return std::nullopt;
    const std::string length = field(*head, "Content-Length");
    auto body = read_exactly(length.empty() ? 0 : std::stoul(length));
    if (!body) return std::nullopt;
    return *head + *body;
  }
  // Everything until the end; `reset` tells whether it ended with an error rather than a close.
  std::string read_to_end(bool* reset = nullptr) {
    while (fill()) {
    }
    if (reset) *reset = last_ < 0;
    return std::exchange(buffer_, "");
  }

 private:
  bool fill() {
    char chunk[16384];
    last_ = read_some(chunk, sizeof chunk);
    if (last_ <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(last_));
    return true;
  }
  std::string buffer_;
  ssize_t last_ = 0;
};

class FdStream final : public Stream {
 public:
  explicit FdStream(int fd) : fd_(fd) {}
  ssize_t read_some(char* data, size_t size) override { return ::read(fd_, data, size); }
  bool write(std::string_view data) override { return testing::send_all(fd_, data); }

 private:
  int fd_;
};

class SslStream final : public Stream {
 public:
  explicit SslStream(SSL* ssl) : ssl_(ssl) {}
  ssize_t read_some(char* data, size_t size) override {
    const int n = SSL_read(ssl_, data, static_cast<int>(size));
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    ERR_clear_error();
    return error == SSL_ERROR_ZERO_RETURN ? 0 : -1;
  }
  bool write(std::string_view data) override {
    while (!data.empty()) {
      const int n = SSL_write(ssl_, data.data(), static_cast<int>(data.size()));
      if (n <= 0) {
        ERR_clear_error();
        return false;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

 private:
  SSL* ssl_;
};

// RFC 6455 5.2: one frame, FIN set, masked when the client sends it.
std::string ws_frame(uint8_t opcode, std::string_view payload, bool masked) {
  std::string out{static_cast<char>(0x80 | opcode)};
  const char mask_bit = masked ? static_cast<char>(0x80) : 0;
  if (payload.size() < 126) {
    out.push_back(static_cast<char>(mask_bit | static_cast<char>(payload.size())));
  } else {
    out.push_back(static_cast<char>(mask_bit | 126));
    out.push_back(static_cast<char>(payload.size() >> 8));
    out.push_back(static_cast<char>(payload.size()));
  }
  if (!masked) return out.append(payload);
  const char key[4] = {0x12, 0x34, 0x56, 0x78};
  out.append(key, 4);
  for (size_t i = 0; i < payload.size(); ++i) out.push_back(payload[i] ^ key[i % 4]);
  return out;
}

struct WsFrame {
  uint8_t opcode = 0;
  std::string payload;
};
std::optional<WsFrame> read_ws_frame(Stream& stream) {
  auto start = stream.read_exactly(2);
  if (!start) return std::nullopt;
  WsFrame frame{static_cast<uint8_t>((*start)[0] & 0x0f), ""};
  const bool masked = (*start)[1] & 0x80;
  size_t length = (*start)[1] & 0x7f;
  if (length == 126) {
    auto extended = stream.read_exactly(2);
    if (!extended) return std::nullopt;
    length = static_cast<uint8_t>((*extended)[0]) << 8 | static_cast<uint8_t>((*extended)[1]);
  }
  std::string key = masked ? stream.read_exactly(4).value_or("") : "";
  auto payload = stream.read_exactly(length);
  if (!payload || (masked && key.size() != 4)) return std::nullopt;
  if (masked) {
    for (size_t i = 0; i < payload->size(); ++i) (*payload)[i] ^= key[i % 4];
  }
  frame.payload = std::move(*payload);
  return frame;
}

std::string ws_accept(const std::string& key) {
  const std::string text = key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  unsigned char encoded[64];
  const int n = EVP_EncodeBlock(encoded, digest, SHA_DIGEST_LENGTH);
  return std::string(reinterpret_cast<char*>(encoded), static_cast<size_t>(n));
}

struct Received {
  std::string head;
  std::string body;      // decoded when chunked
  std::string trailers;  // a chunked body's trailer lines
};

// An HTTP/1.1 server on `address`:`port` in U, TLS when given a context: keep-alive, each request
// recorded (and every byte it read), answered "ok:<body size>"; a WebSocket upgrade to /ws gets
// a 101 and a "welcome" frame in the same write, then its frames echoed.
class Upstream {
 public:
  Upstream(int netns, const Address& address, uint16_t port, tls::SslCtxPtr tls = nullptr)
      : tls_(std::move(tls)) {
    listener_ = testing::listen_in(netns, address.v4_value(), port);
    if (listener_) thread_ = std::thread([this] { run(); });
  }
  ~Upstream() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
    for (std::thread& one : connections_) one.join();
  }
  bool ok() const { return static_cast<bool>(listener_); }
  std::vector<Received> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::string raw() const {
    std::lock_guard lock(mutex_);
    return raw_;
  }

 private:
  // Records what the server reads.
  class Recorded final : public Stream {
   public:
    Recorded(Stream& inner, Upstream& owner) : inner_(inner), owner_(owner) {}
    ssize_t read_some(char* data, size_t size) override {
      const ssize_t n = inner_.read_some(data, size);
      if (n > 0) {
        std::lock_guard lock(owner_.mutex_);
        owner_.raw_.append(data, static_cast<size_t>(n));
      }
      return n;
    }
    bool write(std::string_view data) override { return inner_.write(data); }

   private:
    Stream& inner_;
    Upstream& owner_;
  };

  void run() {
    while (!stop_) {
      pollfd ready{.fd = listener_.get(), .events = POLLIN, .revents = 0};
      if (poll(&ready, 1, 50) != 1) continue;
      const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mutex_);
      open_.push_back(fd);
      connections_.emplace_back([this, fd] {
        const timeval timeout{10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        if (tls_) {
          tls::SslPtr ssl(SSL_new(tls_.get()));
          SSL_set_fd(ssl.get(), fd);
          if (SSL_accept(ssl.get()) == 1) {
            SslStream stream(ssl.get());
            serve(stream);
          }
          ERR_clear_error();
        } else {
          FdStream stream(fd);
          serve(stream);
        }
        ::shutdown(fd, SHUT_RDWR);
      });
    }
  }

  void serve(Stream& inner) {
    Recorded stream(inner, *this);
    while (auto head = stream.read_through("\r\n\r\n")) {
      Received request{*head, "", ""};
      if (lower(field(*head, "Transfer-Encoding")) == "chunked") {
        while (true) {
          auto line = stream.read_through("\r\n");
          if (!line) return;
          const size_t size = std::stoul(line->substr(0, line->find_first_of(";\r")), nullptr, 16);
          if (size == 0) break;
          auto data = stream.read_exactly(size + 2);
          if (!data) return;
          request.body += data->substr(0, size);
        }
        while (true) {
          auto trailer = stream.read_through("\r\n");
          if (!trailer) return;
          if (*trailer == "\r\n") break;
          request.trailers += *trailer;
        }
      } else if (auto length = field(*head, "Content-Length"); !length.empty()) {
        auto body = stream.read_exactly(std::stoul(length));
        if (!body) return;
        request.body = *body;
      }
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(request);
      }
      // An h2c offer accepted, as servers that speak h2c do: HTTP/2 would follow.
      if (lower(field(*head, "Upgrade")) == "h2c") {
        stream.write(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
        return;
      }
      if (lower(field(*head, "Upgrade")) == "websocket") {
        if (head->find(" /ws ") == std::string::npos) {
          stream.write("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nno socket");
          continue;
        }
        stream.write(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
            ws_accept(field(*head, "Sec-WebSocket-Key")) + "\r\n\r\n" +
            ws_frame(1, "welcome", false));
        while (auto frame = read_ws_frame(stream)) {
          if (!stream.write(ws_frame(frame->opcode, frame->payload, false)) || frame->opcode == 8)
            return;
        }
        return;
      }
      const std::string body = "ok:" + std::to_string(request.body.size());
      if (!stream.write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\n\r\n" + body))
        return;
    }
  }

  tls::SslCtxPtr tls_;
  UniqueFd listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<int> open_;
  std::vector<std::thread> connections_;
  std::vector<Received> requests_;
  std::string raw_;
};

std::string get(std::string_view host, std::string_view path, std::string_view extra = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: " + std::string(host) + "\r\n" +
         std::string(extra) + "\r\n";
}

std::string upgrade_request(std::string_view path) {
  return "GET " + std::string(path) +
         " HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
}

Policy exchange_policy() {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* rule : {"api.test", "other.test"}) policy.allow.push_back(*parse_rule(rule));
  policy.inject.push_back(testing::openai_key_rule({"api.test"}));
  return policy;
}

class Http1Exchange : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    HUTCH_REQUIRE(access("/usr/sbin/ip", X_OK) == 0, "/usr/sbin/ip is not installed");
    signal(SIGPIPE, SIG_IGN);
    sandbox_ns_ = new_netns();
    upstream_ns_ = new_netns();
    HUTCH_REQUIRE(sandbox_ns_ && upstream_ns_, "unshare(CLONE_NEWNET) failed");
    ASSERT_NO_FATAL_FAILURE(
        testing::prepare_namespaces(sandbox_ns_.get(), upstream_ns_.get(), {kApi, kOther}));
    ASSERT_NO_FATAL_FAILURE(testing::make_engine_cas(dir_.path(), cas_));

    api_ = std::make_unique<Upstream>(upstream_ns_.get(), kApi, 80);
    other_ = std::make_unique<Upstream>(upstream_ns_.get(), kOther, 80);
    auto context = tls::make_server_context(*cas_.upstream, {.alpn = {"http/1.1"}});
    ASSERT_TRUE(context) << context.error().message();
    api_tls_ = std::make_unique<Upstream>(upstream_ns_.get(), kApi, 443, std::move(*context));
    ASSERT_TRUE(api_->ok() && other_->ok() && api_tls_->ok()) << "an upstream's bind";

    auto key = new_placeholder_key();
    ASSERT_TRUE(key);
    placeholder_ = placeholder_for(*key, "OPENAI_API_KEY");

    EngineOptions options;
    options.resolver = static_resolver({{"api.test", {kApi}}, {"other.test", {kOther}}});
    options.upstream_netns_fd = upstream_ns_.get();
    options.upstream_ca_file = cas_.upstream_path;
    options.secrets = testing::secrets_of({{"OPENAI_API_KEY", std::string(kSecret)}});
    engine_ = testing::make_logging_engine(std::move(options), mutex_, logs_);
    ASSERT_NO_FATAL_FAILURE(testing::attach_sandbox(*engine_, sandbox_ns_.get(), exchange_policy(),
                                                    {}, SandboxInjection{cas_.sandbox, *key}));
  }

  void TearDown() override {
    engine_.reset();
    api_.reset();
    other_.reset();
    api_tls_.reset();
  }

  // A socket of S connected to `address`:`port`, with timeouts so that a hang fails the test.
  UniqueFd connect_from_sandbox(const Address& address, uint16_t port) {
    return in_netns(sandbox_ns_.get(), [&] {
      UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const timeval timeout{5, 0};
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(port);
      to.sin_addr.s_addr = htonl(address.v4_value());
      if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
        ADD_FAILURE() << "connect: " << strerror(errno);
      return fd;
    });
  }

  // `body` with a plain connection from S.
  template <class Body>
  auto plain(const Address& address, uint16_t port, Body&& body) {
    UniqueFd fd = connect_from_sandbox(address, port);
    FdStream stream(fd.get());
    return body(stream);
  }

  // Whether a TLS handshake from S to api.test:443 verifies with the CAs of `ca_path` only.
  bool verifies_with(const std::string& ca_path) {
    UniqueFd fd = connect_from_sandbox(kApi, 443);
    tls::SslCtxPtr context(SSL_CTX_new(TLS_client_method()));
    SSL_CTX_load_verify_locations(context.get(), ca_path.c_str(), nullptr);
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
    tls::SslPtr ssl(SSL_new(context.get()));
    SSL_set_tlsext_host_name(ssl.get(), "api.test");
    SSL_set1_host(ssl.get(), "api.test");
    SSL_set_fd(ssl.get(), fd.get());
    const bool verified = SSL_connect(ssl.get()) == 1;
    ERR_clear_error();
    return verified;
  }

  // `body` with a TLS connection from S to api.test:443, verified with the sandbox CA only (the
  // engine terminates it), or with the CAs of `ca_path`.
  template <class Body>
  auto tls(Body&& body, const std::string& ca_path = "") {
    UniqueFd fd = connect_from_sandbox(kApi, 443);
    tls::SslCtxPtr context(SSL_CTX_new(TLS_client_method()));
    SSL_CTX_load_verify_locations(
        context.get(), ca_path.empty() ? cas_.sandbox_path.c_str() : ca_path.c_str(), nullptr);
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
    tls::SslPtr ssl(SSL_new(context.get()));
    SSL_set_tlsext_host_name(ssl.get(), "api.test");
    SSL_set1_host(ssl.get(), "api.test");
    SSL_set_fd(ssl.get(), fd.get());
    EXPECT_EQ(SSL_connect(ssl.get()), 1) << "TLS handshake with the engine";
    ERR_clear_error();
    SslStream stream(ssl.get());
    return body(stream);
  }

  std::optional<ConnectionLog> log_where(const std::function<bool(const ConnectionLog&)>& match) {
    return testing::last_log_where(mutex_, logs_, match);
  }

  // `first` on `stream` and its response, then `second` and all that comes back until the end.
  static std::pair<std::string, std::string> answer_then_rest(Stream& stream,
                                                              const std::string& first,
                                                              const std::string& second) {
    stream.write(first);
    auto answer = stream.read_response().value_or("");
    stream.write(second);
    return {answer, stream.read_to_end()};
  }

  static nlohmann::json denial_body(const std::string& response) {
    EXPECT_TRUE(response.starts_with("HTTP/1.1 403 ")) << response;
    return nlohmann::json::parse(response.substr(response.find("\r\n\r\n") + 4), nullptr, false);
  }

  testing::TempDir dir_;
  UniqueFd sandbox_ns_, upstream_ns_;
  testing::EngineCas cas_;
  std::unique_ptr<Upstream> api_, other_, api_tls_;
  std::string placeholder_;
  std::unique_ptr<Engine> engine_;
  std::mutex mutex_;
  std::vector<ConnectionLog> logs_;
};

TEST_F(Http1Exchange, KeptAlivePlainRequestWithAnotherHostGets403AndIsLoggedDenied) {
  const auto [first, rest] = plain(kApi, 80, [](Stream& stream) {
    return answer_then_rest(stream, get("api.test", "/one"), get("other.test", "/two"));
  });
  EXPECT_TRUE(first.starts_with("HTTP/1.1 200 ")) << first;
  const nlohmann::json body = denial_body(rest);
  ASSERT_TRUE(body.is_object()) << rest;
  EXPECT_EQ(body["error"], "network_denied");
  EXPECT_EQ(body["rule"], "name");
  EXPECT_NE(body["reason"].get<std::string>().find("other.test"), std::string::npos) << body;
  ASSERT_EQ(api_->requests().size(), 1u);
  EXPECT_EQ(api_->raw().find("/two"), std::string::npos) << "the refused head never went up";
  EXPECT_TRUE(other_->requests().empty());
  auto log = log_where([](const ConnectionLog& l) { return l.name == "api.test" && l.port == 80; });
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  EXPECT_EQ(log->rule, "name");
  EXPECT_EQ(log->protocol, "http");
}

TEST_F(Http1Exchange, PlaceholderInASecondOrThirdPlainRequestGets403) {
  for (size_t position : {2u, 3u}) {
    const auto [answers, rest] = plain(kApi, 80, [&](Stream& stream) {
      std::vector<std::string> answers;
      for (size_t i = 1; i < position; ++i) {
        stream.write(get("api.test", "/fine"));
        answers.push_back(stream.read_response().value_or(""));
      }
      stream.write(get("api.test", "/leak", "X-Key: " + placeholder_ + "\r\n"));
      return std::pair{answers, stream.read_to_end()};
    });
    for (const std::string& answer : answers) EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 "));
    const nlohmann::json body = denial_body(rest);
    ASSERT_TRUE(body.is_object()) << rest;
    EXPECT_EQ(body["rule"], "inject");
    EXPECT_NE(body["reason"].get<std::string>().find("plain HTTP"), std::string::npos);
  }
  EXPECT_EQ(api_->requests().size(), 3u) << "the 1 + 2 requests before the placeholder";
  EXPECT_EQ(api_->raw().find("hutch-placeholder-"), std::string::npos);
  auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject"; });
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  EXPECT_EQ(log->reason.find(placeholder_), std::string::npos);
}

TEST_F(Http1Exchange, PipelinedRequestsAreEachChecked) {
  // A body that reads like a request is a body: it is not checked as one, nor split off.
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: other.test\r\n\r\n";
  const std::string fine =
      get("api.test", "/a") +
      "POST /b HTTP/1.1\r\nHost: api.test\r\nContent-Length: " + std::to_string(smuggled.size()) +
      "\r\n\r\n" + smuggled + get("api.test", "/c");
  const std::string all = plain(kApi, 80, [&](Stream& stream) {
    stream.write(fine);
    std::string out;
    for (int i = 0; i < 3; ++i) out += stream.read_response().value_or("");
    return out;
  });
  EXPECT_EQ(all,
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok:0"
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok:" +
                std::to_string(smuggled.size()) +
                "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok:0");
  ASSERT_EQ(api_->requests().size(), 3u);

  const std::string refused = plain(kApi, 80, [&](Stream& stream) {
    stream.write(get("api.test", "/d") + get("other.test", "/e") + get("api.test", "/f"));
    return stream.read_to_end();
  });
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok:0HTTP/1.1 403 "))
      << refused;
  EXPECT_NE(refused.find("\"rule\":\"name\""), std::string::npos) << refused;
  EXPECT_EQ(api_->requests().size(), 4u) << "only /d of the second batch went up";
  EXPECT_EQ(api_->raw().find("/f "), std::string::npos);
}

TEST_F(Http1Exchange, ChunkedUploadToAnInjectedHostArrivesByteExactWithTheSecret) {
  std::mt19937 random(12);
  std::string data(300 * 1024, '\0');
  for (char& c : data) c = static_cast<char>(random());
  std::string request = "POST /v1/upload HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " +
                        placeholder_ + "\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t at = 0; at < data.size();) {
    const size_t size = std::min<size_t>(data.size() - at, 1 + random() % 40000);
    char line[32];
    snprintf(line, sizeof line, at % 2 ? "%zx;ext=\"v\"\r\n" : "%zX\r\n", size);
    request += line + data.substr(at, size) + "\r\n";
    at += size;
  }
  request += "0\r\nX-Checksum: 42\r\n\r\n";
  const auto [answer, second] = tls([&](Stream& stream) {
    stream.write(request);
    auto answer = stream.read_response().value_or("");
    stream.write(get("api.test", "/v1/after"));
    return std::pair{answer, stream.read_response().value_or("")};
  });
  EXPECT_TRUE(answer.ends_with("ok:" + std::to_string(data.size()))) << answer;
  EXPECT_TRUE(second.ends_with("ok:0")) << second;
  const auto requests = api_tls_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_TRUE(requests[0].body == data) << "the body arrived byte for byte";
  EXPECT_EQ(requests[0].trailers, "X-Checksum: 42\r\n");
  EXPECT_EQ(field(requests[0].head, "Authorization"), "Bearer " + std::string(kSecret));
  EXPECT_EQ(api_tls_->raw().find("hutch-placeholder-"), std::string::npos);
  auto log = log_where([](const ConnectionLog& l) { return l.port == 443; });
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->allowed) << log->reason;
  EXPECT_NE(log->reason.find("injected Authorization"), std::string::npos);
}

// The same with a real client: curl streams a file as a chunked upload (its chunk sizes, its
// framing) through terminated TLS.
TEST_F(Http1Exchange, CurlsChunkedUploadThroughTerminatedTlsArrivesWhole) {
  for (const char* tool : {"/usr/bin/nsenter", "/usr/bin/curl"})
    HUTCH_REQUIRE(access(tool, X_OK) == 0, std::string(tool) + " is not installed");
  std::mt19937 random(7);
  std::string data(1 << 20, '\0');
  for (char& c : data) c = static_cast<char>(random());
  const std::string file = dir_.path() + "/upload.bin";
  std::ofstream(file, std::ios::binary) << data;
  const auto got = testing::run_command(
      {"/usr/bin/nsenter",
       "--net=/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(sandbox_ns_.get()), "--",
       "/usr/bin/curl", "-sS", "--max-time", "20", "--http1.1", "--cacert", cas_.sandbox_path,
       "--resolve", "api.test:443:" + kApi.to_string(), "-H", "Transfer-Encoding: chunked", "-H",
       "Authorization: Bearer " + placeholder_, "--data-binary", "@" + file,
       "https://api.test/v1/upload"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok:" + std::to_string(data.size()));
  const auto requests = api_tls_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].body == data) << "the body arrived byte for byte";
  EXPECT_EQ(field(requests[0].head, "Authorization"), "Bearer " + std::string(kSecret));
}

TEST_F(Http1Exchange, PlaceholderInAChunkedTrailerIsRefusedAndNeverGoesUp) {
  bool reset = false;
  const std::string answer = tls([&](Stream& stream) {
    stream.write(
        "POST /v1/upload HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabc\r\n0\r\nX-Key: " +
        placeholder_ + "\r\n\r\n");
    return stream.read_to_end(&reset);
  });
  EXPECT_EQ(answer.find("200 OK"), std::string::npos) << answer;
  EXPECT_TRUE(api_tls_->requests().empty());
  EXPECT_EQ(api_tls_->raw().find("hutch-placeholder-"), std::string::npos);
  auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject"; });
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  EXPECT_NE(log->reason.find("trailers"), std::string::npos) << log->reason;
}

// A placeholder in a body, split across two reads of the engine (the first half upstream
// already, with the head): the request is cut before the second half goes, with either framing.
TEST_F(Http1Exchange, PlaceholderSplitAcrossBodyReadsIsCutBeforeItIsWholeUpstream) {
  const size_t half = placeholder_.size() / 2;
  const std::string second = placeholder_.substr(half) + "\"}";
  for (const bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    // Each framing's own first half: the wait below sees this connection's bytes.
    const std::string first = std::string("{\"pad\":\"") + (chunked ? "chunked" : "length") +
                              "\",\"key\":\"" + placeholder_.substr(0, half);
    const std::string length = std::to_string(first.size() + second.size());
    const std::string head =
        "POST /v1/upload HTTP/1.1\r\nHost: api.test\r\n" +
        (chunked ? std::string("Transfer-Encoding: chunked\r\n\r\n") + "1000\r\n"
                 : "Content-Length: " + length + "\r\n\r\n");
    bool reset = false;
    const std::string answer = tls([&](Stream& stream) {
      stream.write(head + first);
      // Upstream before the rest is written: the engine has read and sent it on its own.
      EXPECT_TRUE(testing::wait_until(
          [&] { return api_tls_->raw().find(first) != std::string::npos; }, 5s, "the first half"));
      stream.write(second);
      return stream.read_to_end(&reset);
    });
    EXPECT_EQ(answer.find("200 OK"), std::string::npos) << answer;
    EXPECT_TRUE(api_tls_->requests().empty()) << "no request completed upstream";
    EXPECT_EQ(api_tls_->raw().find(placeholder_), std::string::npos);
    auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject"; });
    ASSERT_TRUE(log);
    EXPECT_FALSE(log->allowed);
    EXPECT_NE(log->reason.find("the placeholder of secret OPENAI_API_KEY in a request body"),
              std::string::npos)
        << log->reason;
  }
}

TEST_F(Http1Exchange, HostileFramingIsRefusedWithoutAHang) {
  const std::string chunked =
      "POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n";
  struct Case {
    std::string name, bytes;
    bool bad_request;  // a 400 before anything went up, else a reset
  };
  const std::vector<Case> cases = {
      {"CL+TE",
       "POST /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n"
       "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
       true},
      {"double CL",
       "POST /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n"
       "Content-Length: 3\r\n\r\nabc",
       true},
      {"gzip TE", "POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: gzip\r\n\r\nx", true},
      {"oversized hex", chunked + std::string(40, 'f') + "\r\n", false},
      {"2^64", chunked + "10000000000000000\r\nabc\r\n", false},
      {"non-hex", chunked + "3g\r\nabc\r\n0\r\n\r\n", false},
      {"missing CRLF", chunked + "3\r\nabcd\r\n0\r\n\r\n", false},
      {"bare LF", chunked + "3\nabc\r\n0\r\n\r\n", false},
      {"long line", chunked + "3;" + std::string(5000, 'x'), false},
  };
  for (const Case& test : cases) {
    const auto started = std::chrono::steady_clock::now();
    bool reset = false;
    const std::string answer = plain(kApi, 80, [&](Stream& stream) {
      stream.write(test.bytes);
      return stream.read_to_end(&reset);
    });
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_LT(took, 3s) << test.name << ": refused at once, not after a timeout";
    if (test.bad_request) {
      EXPECT_TRUE(answer.starts_with("HTTP/1.1 400 ")) << test.name << ": " << answer;
    } else {
      EXPECT_EQ(answer.find("200 OK"), std::string::npos) << test.name << ": " << answer;
    }
  }
  EXPECT_TRUE(api_->requests().empty()) << "no request of them completed upstream";
  EXPECT_EQ(api_->raw().find("abc"), std::string::npos) << "no body byte went up";
  auto log = log_where([](const ConnectionLog& l) {
    return l.rule == "http" && l.reason.find("chunked body") != std::string::npos;
  });
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  // On terminated TLS the same refusals.
  bool reset = false;
  const std::string answer = tls([&](Stream& stream) {
    stream.write(
        "POST /v1/up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
        "10000000000000000\r\nabc\r\n");
    return stream.read_to_end(&reset);
  });
  EXPECT_EQ(answer.find("200 OK"), std::string::npos) << answer;
  EXPECT_TRUE(api_tls_->requests().empty());
}

// The refusal waits for the answers to the requests before it, and the upstream gets a FIN: under
// TLS a bare one, which an OpenSSL 3 server answers with a decode_error alert. The sandbox still
// gets its 403, not a reset.
TEST_F(Http1Exchange, RefusalAfterEarlierRequestsOverTerminatedTlsIsAnsweredNotReset) {
  const auto [first, refused] = tls([&](Stream& stream) {
    return answer_then_rest(stream, get("api.test", "/v1/first"), get("other.test", "/v1/sneaky"));
  });
  EXPECT_TRUE(first.ends_with("ok:0")) << first;
  const nlohmann::json body = denial_body(refused);
  ASSERT_TRUE(body.is_object()) << refused;
  EXPECT_EQ(body["rule"], "name");
  EXPECT_EQ(api_tls_->requests().size(), 1u);
  EXPECT_EQ(api_tls_->raw().find("sneaky"), std::string::npos);
}

// A rotation (hutchd's, sandbox_trust.h) hands the engine the next CA: later connections get its
// leaves, which a client trusting only the old CA refuses; a connection open across it keeps its
// leaf and its requests go on.
TEST_F(Http1Exchange, AReplacedCaSignsLaterConnectionsWhileAnOpenOneGoesOn) {
  auto made = tls::SandboxCa::create({.label = "next"});
  ASSERT_TRUE(made) << made.error().message();
  std::shared_ptr<tls::SandboxCa> next = std::move(*made);
  const std::string next_path = dir_.path() + "/next-ca.pem";
  std::ofstream(next_path) << next->certificate_pem();
  EXPECT_FALSE(verifies_with(next_path)) << "the old CA signs until the switch";
  const auto [before, after] = tls([&](Stream& stream) {
    stream.write(get("api.test", "/v1/before"));
    auto before = stream.read_response().value_or("");
    EXPECT_TRUE(engine_->set_ca("sb", next));
    stream.write(get("api.test", "/v1/after"));
    return std::pair{before, stream.read_response().value_or("")};
  });
  EXPECT_TRUE(before.ends_with("ok:0")) << before;
  EXPECT_TRUE(after.ends_with("ok:0")) << after;
  EXPECT_FALSE(verifies_with(cas_.sandbox_path)) << "a new connection gets the next CA's leaf";
  EXPECT_TRUE(verifies_with(next_path));
  const std::string answer = tls(
      [&](Stream& stream) {
        stream.write(get("api.test", "/v1/next"));
        return stream.read_response().value_or("");
      },
      next_path);
  EXPECT_TRUE(answer.ends_with("ok:0")) << answer;
  ASSERT_EQ(api_tls_->requests().size(), 3u);
  for (const auto& request : api_tls_->requests())
    EXPECT_NE(field(request.head, "Authorization").find(kSecret), std::string::npos);
  EXPECT_EQ(engine_->set_ca("nobody", next).error().kind, ErrorKind::kNotFound);
}

// A request, then an upgrade on the same connection; frames both ways, the upstream's first
// frame sent in the same segment as its 101.
template <class Open>
void exchange_websocket_frames(Open&& open, const Upstream& upstream) {
  struct Seen {
    std::string before, switched;
    std::optional<WsFrame> welcome, text, binary, close;
  };
  const std::string large(300, 'b');
  const Seen seen = open([&](Stream& stream) {
    Seen seen;
    stream.write(get("api.test", "/v1/first"));
    seen.before = stream.read_response().value_or("");
    stream.write(upgrade_request("/ws"));
    seen.switched = stream.read_through("\r\n\r\n").value_or("");
    seen.welcome = read_ws_frame(stream);
    stream.write(ws_frame(1, "hello", true));
    seen.text = read_ws_frame(stream);
    stream.write(ws_frame(2, large, true) + ws_frame(8, "", true));
    seen.binary = read_ws_frame(stream);
    seen.close = read_ws_frame(stream);
    return seen;
  });
  EXPECT_TRUE(seen.before.ends_with("ok:0")) << seen.before;
  EXPECT_TRUE(seen.switched.starts_with("HTTP/1.1 101 ")) << seen.switched;
  EXPECT_EQ(field(seen.switched, "Sec-WebSocket-Accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  ASSERT_TRUE(seen.welcome && seen.text && seen.binary && seen.close);
  EXPECT_EQ(seen.welcome->payload, "welcome");
  EXPECT_EQ(seen.text->opcode, 1);
  EXPECT_EQ(seen.text->payload, "hello");
  EXPECT_EQ(seen.binary->opcode, 2);
  EXPECT_EQ(seen.binary->payload, large);
  EXPECT_EQ(seen.close->opcode, 8);
  EXPECT_EQ(upstream.requests().size(), 2u);
}

TEST_F(Http1Exchange, WebSocketUpgradeThroughPlainHttpExchangesFrames) {
  exchange_websocket_frames([&](auto&& body) { return plain(kApi, 80, body); }, *api_);
}

TEST_F(Http1Exchange, WebSocketUpgradeThroughTerminatedTlsExchangesFrames) {
  exchange_websocket_frames([&](auto&& body) { return tls(body); }, *api_tls_);
  EXPECT_NE(field(api_tls_->requests()[0].head, "Authorization").find(kSecret), std::string::npos);
}

// After an h2c upgrade, HTTP/2 would be spliced unread, its :authority never compared with the
// connection's name: the offer is taken out, so the server answers in HTTP/1.1 and the next
// request's Host is still checked.
TEST_F(Http1Exchange, H2cUpgradeOfferIsTakenOutSoLaterRequestsAreStillChecked) {
  const std::string offer =
      "GET /v1/h2c HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
      "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
  const auto upgrade_then_other_host = [&](Stream& stream) {
    return answer_then_rest(stream, offer, get("other.test", "/v1/sneaky"));
  };
  const auto [plain_answer, plain_refused] = plain(kApi, 80, upgrade_then_other_host);
  const auto [tls_answer, tls_refused] = tls(upgrade_then_other_host);
  for (const auto* upstream : {api_.get(), api_tls_.get()}) {
    ASSERT_EQ(upstream->requests().size(), 1u);
    const std::string head = upstream->requests()[0].head;
    EXPECT_EQ(field(head, "Upgrade"), "") << head;
    EXPECT_EQ(field(head, "HTTP2-Settings"), "") << head;
  }
  EXPECT_NE(field(api_tls_->requests()[0].head, "Authorization").find(kSecret), std::string::npos)
      << "the inject rule still applies to the rewritten head";
  for (const std::string& answer : {plain_answer, tls_answer})
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 ")) << answer;
  EXPECT_TRUE(plain_refused.starts_with("HTTP/1.1 403 ")) << plain_refused;
  EXPECT_TRUE(tls_refused.starts_with("HTTP/1.1 403 ")) << tls_refused;
  EXPECT_TRUE(other_->requests().empty());
  auto log = log_where([](const ConnectionLog& l) { return l.port == 80 && !l.allowed; });
  ASSERT_TRUE(log);
  EXPECT_NE(log->reason.find("other.test"), std::string::npos) << log->reason;
  // A connection that ends after the answer is logged allowed, with what was taken out.
  const std::string answer = plain(kApi, 80, [&](Stream& stream) {
    stream.write(offer);
    return stream.read_response().value_or("");
  });
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 ")) << answer;
  auto allowed = log_where([](const ConnectionLog& l) { return l.port == 80 && l.allowed; });
  ASSERT_TRUE(allowed);
  EXPECT_NE(allowed->reason.find("an upgrade offer other than WebSocket's dropped"),
            std::string::npos)
      << allowed->reason;
}

TEST_F(Http1Exchange, DeclinedUpgradeGoesBackToCheckingRequests) {
  const auto [declined, next, refused] = plain(kApi, 80, [](Stream& stream) {
    stream.write(upgrade_request("/not-a-socket"));
    auto declined = stream.read_response().value_or("");
    stream.write(get("api.test", "/after"));
    auto next = stream.read_response().value_or("");
    stream.write(get("other.test", "/sneaky"));
    return std::tuple{declined, next, stream.read_to_end()};
  });
  EXPECT_TRUE(declined.starts_with("HTTP/1.1 404 ")) << declined;
  EXPECT_TRUE(next.ends_with("ok:0")) << next;
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 403 ")) << refused;
  EXPECT_EQ(api_->requests().size(), 2u);
}

}  // namespace
}  // namespace hutch::net
