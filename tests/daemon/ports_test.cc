// A sandbox's ports through hutchd (ANY /v1/sandboxes/{id}/ports/{port}/...): a real hutchd
// with its TCP listener on 127.0.0.1 and a bearer token, a real sandbox, and in it a small
// Python server that answers each request with what it received (method, target, headers,
// body length and CRC-32) and writes every request head to /tmp/seen.log, so the sandbox's own
// view proves what was and was not forwarded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "tests/common/command.h"
#include "tests/common/socket_io.h"
#include "tests/common/time_scale.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kEchoServer = R"PY(
import http.server, json, sys, time, zlib
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        with open("/tmp/seen.log", "a") as seen:
            seen.write(self.requestline + "\n" + str(self.headers) + "\n")
        crc, length = 0, 0
        def take(data):
            nonlocal crc, length
            crc = zlib.crc32(data, crc)
            length += len(data)
        if self.headers.get("Transfer-Encoding") == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                take(self.rfile.read(size))
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left > 0:
                data = self.rfile.read(min(left, 1 << 20))
                take(data)
                left -= len(data)
        if self.path == "/events":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(5):
                self.wfile.write(b"data: %d\n\n" % i)
                self.wfile.flush()
                time.sleep(0.4)
            return
        body = json.dumps({"method": self.command, "target": self.path,
                           "headers": [[k, v] for k, v in self.headers.items()],
                           "length": length, "crc32": crc}).encode()
        self.send_response(int(self.headers.get("X-Answer-Status") or 200))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo", "yes")
        self.send_header("Connection", "X-Server-Hop")
        self.send_header("X-Server-Hop", "must not pass")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
)PY";

constexpr int kPort = 8080;

// A raw TCP server: answers every byte upper-cased, and passes an EOF on.
constexpr const char* kUpperServer = R"PY(
import socket, sys, threading
def serve(c):
    while data := c.recv(65536):
        c.sendall(data.upper())
    c.shutdown(socket.SHUT_WR)
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    threading.Thread(target=serve, args=(server.accept()[0],)).start()
)PY";
constexpr int kRawPort = 9000;

// A server that switches protocols as a WebSocket server would (without the framing): 101 with
// the Upgrade and Connection it received echoed back, the word "ready" at once, then every byte
// upper-cased.
constexpr const char* kUpgradeServer = R"PY(
import socket, sys, threading
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(1)
    lines = head.decode().split("\r\n")
    fields = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + fields.get("upgrade", "") +
               "\r\nConnection: Upgrade\r\nX-Seen-Connection: " + fields.get("connection", "") +
               "\r\nX-Seen-Target: " + lines[0].split(" ")[1] + "\r\n\r\nready").encode())
    while data := c.recv(65536):
        c.sendall(data.upper())
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    threading.Thread(target=serve, args=(server.accept()[0],)).start()
)PY";
constexpr int kUpgradePort = 9100;

extern "C" char** environ;

uint32_t crc32(const std::string& data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

// One request written as is on a fresh unix-socket connection (no client library to tidy the
// target); what came back until the server closed or 5 s passed.
std::string raw_round_trip(const std::string& socket, const std::string& request) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return "";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return "";
  timeval timeout{5, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd.get(), buffer, sizeof buffer, 0)) > 0)
    answer.append(buffer, static_cast<size_t>(n));
  return answer;
}

// The JSON body of a raw answer, de-chunked when it is chunked (the proxy's always are).
UniqueFd connect_unix(const std::string& socket) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return UniqueFd();
  return fd;
}

UniqueFd connect_tcp(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return UniqueFd();
  return fd;
}

// Reads `size` bytes, or up to the peer's EOF when size is 0 (5 s per read at most).
std::string receive(int fd, size_t size = 0) {
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string data;
  char buffer[65536];
  while (size == 0 || data.size() < size) {
    size_t want = size == 0 ? sizeof buffer : std::min(sizeof buffer, size - data.size());
    ssize_t n = ::recv(fd, buffer, want, 0);
    if (n <= 0) break;
    data.append(buffer, static_cast<size_t>(n));
  }
  return data;
}

// The head of an answer, read byte by byte so that nothing after it is taken.
std::string receive_head(int fd) {
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string head;
  char c;
  while (!head.ends_with("\r\n\r\n") && ::recv(fd, &c, 1, 0) == 1) head.push_back(c);
  return head;
}

json body_of(const std::string& raw) {
  size_t at = raw.find("\r\n\r\n");
  if (at == std::string::npos) return json();
  std::string body = raw.substr(at + 4);
  if (raw.substr(0, at).find("Transfer-Encoding: chunked") != std::string::npos) {
    std::string joined;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t eol = body.find("\r\n", pos);
      if (eol == std::string::npos) break;
      size_t size = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
      if (size == 0) break;
      joined += body.substr(eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    body = joined;
  }
  return json::parse(body, nullptr, false);
}

// The value of header `name` as the sandbox's server received it, "" when absent.
std::string seen_header(const json& echo, const std::string& name) {
  for (const json& pair : echo["headers"]) {
    if (strcasecmp(pair[0].get<std::string>().c_str(), name.c_str()) == 0)
      return pair[1].get<std::string>();
  }
  return "";
}

class PortsTest : public DaemonTest {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    tcp_port_ = free_tcp_port();
    ASSERT_NE(tcp_port_, 0);
    std::ofstream(temp_.path() + "/token") << token_ << "\n";
    daemon_ = std::make_unique<Hutchd>(
        temp_.path(), std::vector<std::string>{"--destroy-on-exit", "--listen",
                                               "127.0.0.1:" + std::to_string(tcp_port_),
                                               "--token-file", temp_.path() + "/token"});
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
    id_ = create({{"network", "loopback"}});
    ASSERT_FALSE(id_.empty());
    start_echo(id_, kPort);
  }

  void start_echo(const std::string& id, int port) {
    ASSERT_EQ(daemon_->put("/v1/sandboxes/" + id + "/files?path=/tmp/echo.py", kEchoServer).status,
              200);
    auto started = daemon_->post(
        "/v1/sandboxes/" + id + "/exec",
        {{"argv", {"python3", "/tmp/echo.py", std::to_string(port)}}, {"background", true}});
    ASSERT_EQ(started.status, 201) << started.raw;
    ASSERT_TRUE(wait_until([&] { return daemon_->get(path("/ready", id, port)).status == 200; },
                           10s, "the echo server in the sandbox to answer through hutchd", 50ms));
  }

  std::string path(const std::string& rest, const std::string& id = "", int port = kPort) const {
    return "/v1/sandboxes/" + (id.empty() ? id_ : id) + "/ports/" + std::to_string(port) + rest;
  }

  // The port's token routes: /v1/sandboxes/{id}/port-tokens/{port}[rest].
  std::string token_path(const std::string& rest = "", const std::string& id = "",
                         int port = kPort) const {
    return "/v1/sandboxes/" + (id.empty() ? id_ : id) + "/port-tokens/" + std::to_string(port) +
           rest;
  }

  std::unique_ptr<httplib::Client> tcp() const {
    auto client = std::make_unique<httplib::Client>("127.0.0.1", tcp_port_);
    client->set_read_timeout(60, 0);
    return client;
  }

  std::string issue_token(int port = kPort, int ttl = 60, const std::string& id = "") {
    auto reply = daemon_->post(token_path("", id, port), {{"ttl_seconds", ttl}});
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.status == 201 ? reply.body["token"].get<std::string>() : "";
  }

  int get_with_port_token(const std::string& target, const std::string& token) const {
    auto answer = tcp()->Get(target, {{"X-Hutch-Port-Token", token}});
    return answer ? answer->status : 0;
  }

  // A tunnel to `port` of `id` opened on `fd` (a connection to hutchd): hutchd's answer head.
  std::string open_tunnel(int fd, int port, const std::string& extra_headers = "") const {
    if (!send_all(fd, "POST /v1/sandboxes/" + id_ + "/tunnel/" + std::to_string(port) +
                          " HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n" + extra_headers + "\r\n"))
      return "";
    return receive_head(fd);
  }

  void start_upper_server() {
    ASSERT_EQ(
        daemon_->put("/v1/sandboxes/" + id_ + "/files?path=/tmp/upper.py", kUpperServer).status,
        200);
    auto started = daemon_->post(
        "/v1/sandboxes/" + id_ + "/exec",
        {{"argv", {"python3", "/tmp/upper.py", std::to_string(kRawPort)}}, {"background", true}});
    ASSERT_EQ(started.status, 201) << started.raw;
    ASSERT_TRUE(wait_until(
        [&] {
          UniqueFd fd = connect_unix(daemon_->socket());
          return fd && open_tunnel(fd.get(), kRawPort).starts_with("HTTP/1.1 200");
        },
        10s, "the raw server in the sandbox to accept a tunnel", 50ms));
  }

  const std::string token_ = "hutchd-bearer-0123456789abcdef";
  int tcp_port_ = 0;
  std::string id_;
};

TEST_F(PortsTest, GetWithQueryReachesTheSandboxServer) {
  auto answer = daemon_->client()->Get(path("/a/b?x=1&y=two%20words"));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_EQ(answer->get_header_value("X-Echo"), "yes");
  json echo = json::parse(answer->body);
  EXPECT_EQ(echo["method"], "GET");
  EXPECT_EQ(echo["target"], "/a/b?x=1&y=two%20words");
  EXPECT_EQ(seen_header(echo, "Host"), "127.0.0.1:8080");
  EXPECT_EQ(seen_header(echo, "X-Forwarded-Prefix"), path(""));
  EXPECT_EQ(seen_header(echo, "X-Forwarded-Proto"), "http");
  // The server's hop-by-hop header (named in its Connection header) stays in the sandbox.
  EXPECT_FALSE(answer->has_header("X-Server-Hop"));

  auto head = daemon_->client()->Head(path("/h"));
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  // A server's error answer is the server's, not hutchd's (no JSON error of its own).
  auto missing = daemon_->client()->Get(path("/nf"), {{"X-Answer-Status", "404"}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["target"], "/nf");
}

TEST_F(PortsTest, LargeBodiesStreamInBothFramings) {
  std::string body(24u << 20, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>((i * 7 + i / 4093) & 0xFF);
  auto started = Clock::now();
  auto sized = daemon_->client()->Post(path("/upload"), body, "application/octet-stream");
  double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ASSERT_TRUE(sized);
  ASSERT_EQ(sized->status, 200) << sized->body;
  json echo = json::parse(sized->body);
  EXPECT_EQ(echo["length"], body.size());
  EXPECT_EQ(echo["crc32"], crc32(body));
  std::printf("24 MiB upload through the proxy: %.0f ms\n", seconds * 1000);

  // Chunked from the client: relayed chunked to the server, never held whole.
  size_t offset = 0;
  auto chunked = daemon_->client()->Post(
      path("/upload"),
      [&](size_t, httplib::DataSink& sink) {
        size_t n = std::min<size_t>(1 << 20, body.size() - offset);
        sink.write(body.data() + offset, n);
        offset += n;
        if (offset == body.size()) sink.done();
        return true;
      },
      "application/octet-stream");
  ASSERT_TRUE(chunked);
  ASSERT_EQ(chunked->status, 200) << chunked->body;
  echo = json::parse(chunked->body);
  EXPECT_EQ(echo["length"], body.size());
  EXPECT_EQ(echo["crc32"], crc32(body));
  EXPECT_EQ(seen_header(echo, "Transfer-Encoding"), "chunked");
}

TEST_F(PortsTest, StreamedAnswerArrivesAsItIsWritten) {
  std::vector<double> arrivals;
  std::string received;
  auto started = Clock::now();
  auto answer = daemon_->client()->Get(path("/events"), [&](const char* data, size_t size) {
    received.append(data, size);
    arrivals.push_back(std::chrono::duration<double>(Clock::now() - started).count());
    return true;
  });
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(received, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  ASSERT_GE(arrivals.size(), 2u);
  // Five events 0.4 s apart: the first is here long before the last is written.
  EXPECT_LT(arrivals.front(), 1.0 * time_scale());
  EXPECT_GT(arrivals.back() - arrivals.front(), 1.2);
}

TEST_F(PortsTest, HopByHopHeadersAndHutchdCredentialsStayOut) {
  std::string port_token = issue_token();
  auto answer = tcp()->Get(path("/h"), {{"Authorization", "Bearer " + token_},
                                        {"Connection", "keep-alive, X-Drop-Me"},
                                        {"X-Drop-Me", "1"},
                                        {"Keep-Alive", "timeout=5"},
                                        {"TE", "trailers"},
                                        {"Proxy-Authorization", "Basic eA=="},
                                        {"Upgrade", "websocket"},
                                        {"X-Hutch-Port-Token", port_token},
                                        {"Cookie", "a=1; hutch_port_token=" + port_token + "; b=2"},
                                        {"X-Forwarded-For", "6.6.6.6"},
                                        {"X-Kept", "kept"}});
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  json echo = json::parse(answer->body);
  for (const char* gone : {"Authorization", "X-Drop-Me", "Keep-Alive", "TE", "Proxy-Authorization",
                           "Upgrade", "X-Hutch-Port-Token"})
    EXPECT_EQ(seen_header(echo, gone), "") << gone;
  EXPECT_EQ(seen_header(echo, "Connection"), "close");
  EXPECT_EQ(seen_header(echo, "Cookie"), "a=1; b=2");
  EXPECT_EQ(seen_header(echo, "X-Forwarded-For"), "127.0.0.1");
  EXPECT_EQ(seen_header(echo, "X-Kept"), "kept");

  // An Authorization that is not hutchd's is the application's own: it passes (here with a
  // port token for hutchd).
  auto app_auth = tcp()->Get(
      path("/h"), {{"X-Hutch-Port-Token", port_token}, {"Authorization", "Basic dXNlcjpwdw=="}});
  ASSERT_TRUE(app_auth);
  ASSERT_EQ(app_auth->status, 200);
  EXPECT_EQ(seen_header(json::parse(app_auth->body), "Authorization"), "Basic dXNlcjpwdw==");

  // The sandbox's own record of every request: neither token ever reached it.
  json grep =
      exec(id_, {{"argv", {"grep", "-c", "-e", token_, "-e", port_token, "/tmp/seen.log"}}});
  EXPECT_EQ(grep["stdout"], "0\n") << grep;
}

TEST_F(PortsTest, NothingListeningIs502NamingThePort) {
  auto reply = daemon_->get(path("/", "", 8081));
  EXPECT_EQ(reply.status, 502) << reply.raw;
  EXPECT_EQ(error_code(reply), "port_unreachable");
  EXPECT_NE(reply.raw.find("8081"), std::string::npos) << reply.raw;
}

TEST_F(PortsTest, BadPortsAre400AndUnknownSandboxesAre404) {
  for (const char* port : {"0", "65536", "abc", "08080", "-1", "99999999999"}) {
    auto reply = daemon_->get("/v1/sandboxes/" + id_ + "/ports/" + port + "/");
    EXPECT_EQ(reply.status, 400) << port << ": " << reply.raw;
    EXPECT_EQ(error_code(reply), "invalid_port") << port;
  }
  auto unknown = daemon_->get("/v1/sandboxes/sb-000000000000/ports/8080/");
  EXPECT_EQ(unknown.status, 404) << unknown.raw;
  EXPECT_EQ(error_code(unknown), "sandbox_not_found");
  auto tokens_of_unknown = daemon_->post("/v1/sandboxes/sb-000000000000/port-tokens/8080", {});
  EXPECT_EQ(tokens_of_unknown.status, 404) << tokens_of_unknown.raw;
}

TEST_F(PortsTest, NetworkNoneIsAClearError) {
  std::string isolated = create({{"network", "none"}});
  ASSERT_FALSE(isolated.empty());
  auto reply = daemon_->get(path("/", isolated));
  EXPECT_EQ(reply.status, 502) << reply.raw;
  EXPECT_EQ(error_code(reply), "port_unreachable");
  EXPECT_NE(reply.raw.find("network \\\"none\\\""), std::string::npos) << reply.raw;
}

TEST_F(PortsTest, PortTokenOpensItsSandboxAndPortOnly) {
  EXPECT_EQ(get_with_port_token(path("/x"), ""), 401);
  auto issued = daemon_->post(token_path(), {{"ttl_seconds", 60}});
  ASSERT_EQ(issued.status, 201) << issued.raw;
  std::string token = issued.body["token"];
  EXPECT_TRUE(token.starts_with("hpt_")) << token;
  EXPECT_EQ(issued.body["url"], path("/?hutch_port_token=" + token));
  EXPECT_EQ(get_with_port_token(path("/x"), token), 200);
  EXPECT_EQ(get_with_port_token(path("/x"), token + "0"), 401);
  EXPECT_EQ(get_with_port_token(path("/x", "", 8081), token), 401);
  std::string other = create({{"network", "loopback"}});
  ASSERT_FALSE(other.empty());
  EXPECT_EQ(get_with_port_token(path("/x", other), token), 401);
  // Not hutchd's other routes, not even this port's token routes (nor another port's).
  EXPECT_EQ(get_with_port_token("/v1/sandboxes", token), 401);
  EXPECT_EQ(get_with_port_token("/v1/sandboxes/" + id_, token), 401);
  EXPECT_EQ(get_with_port_token(token_path(), token), 401);
  EXPECT_EQ(get_with_port_token(token_path("", "", 8081), token), 401);

  // Listed by id and expiry; the value is shown once, at creation.
  auto listed = tcp()->Get(token_path(), {{"Authorization", "Bearer " + token_}});
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->status, 200) << listed->body;
  json tokens = json::parse(listed->body)["tokens"];
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0]["id"], issued.body["id"]);
  EXPECT_EQ(listed->body.find(token), std::string::npos);
}

TEST_F(PortsTest, TheSandboxServersOwnTokensPathIsReachable) {
  // The token routes are beside the proxy's paths: /tokens and /tokens/x of the sandbox's server
  // reach the server, with hutchd's credential or a port token, and issue or revoke nothing.
  std::string token = issue_token();
  for (const std::string rest : {"/tokens", "/tokens/abc", "/tokens/"}) {
    auto answer = daemon_->get(path(rest));
    EXPECT_EQ(answer.status, 200) << rest << ": " << answer.raw;
    EXPECT_EQ(answer.body.value("target", ""), rest) << answer.raw;
    EXPECT_EQ(get_with_port_token(path(rest), token), 200) << rest;
  }
  auto posted = daemon_->post(path("/tokens"), {{"ttl_seconds", 60}});
  EXPECT_EQ(posted.body.value("method", ""), "POST") << posted.raw;
  EXPECT_EQ(posted.body.value("target", ""), "/tokens") << posted.raw;
  EXPECT_EQ(posted.raw.find("hpt_"), std::string::npos) << posted.raw;
  auto listed = daemon_->get(token_path());
  ASSERT_EQ(listed.status, 200) << listed.raw;
  EXPECT_EQ(listed.body["tokens"].size(), 1u) << listed.raw;
  // Hostile ids and ports on the token routes: a 400 or 404, never a token.
  for (const std::string& target :
       {"/v1/sandboxes/" + id_ + "/port-tokens/0", "/v1/sandboxes/" + id_ + "/port-tokens/65536",
        "/v1/sandboxes/" + id_ + "/port-tokens/abc", "/v1/sandboxes/" + id_ + "/port-tokens/8080.5",
        "/v1/sandboxes/" + id_ + "/port-tokens/8080/../8081"}) {
    auto reply = daemon_->post(target, json::object());
    EXPECT_TRUE(reply.status == 400 || reply.status == 404) << target << ": " << reply.raw;
    EXPECT_EQ(reply.raw.find("hpt_"), std::string::npos) << target;
  }
}

TEST_F(PortsTest, ExpiredAndRevokedTokensAreRefused) {
  std::string short_lived = issue_token(kPort, 1);
  EXPECT_EQ(get_with_port_token(path("/x"), short_lived), 200);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(get_with_port_token(path("/x"), short_lived), 401);

  auto issued = daemon_->post(token_path(), json::object());
  ASSERT_EQ(issued.status, 201);
  std::string token = issued.body["token"];
  EXPECT_EQ(get_with_port_token(path("/x"), token), 200);
  EXPECT_EQ(daemon_->del(token_path("/" + issued.body["id"].get<std::string>())).status, 204);
  EXPECT_EQ(get_with_port_token(path("/x"), token), 401);
  EXPECT_EQ(daemon_->del(token_path("/" + issued.body["id"].get<std::string>())).status, 404);

  EXPECT_EQ(daemon_->post(token_path(), {{"ttl_seconds", 0}}).status, 400);
  EXPECT_EQ(daemon_->post(token_path(), {{"ttl_seconds", 3600}, {"port", 1}}).status, 400);
}

TEST_F(PortsTest, QueryTokenIsTradedForAPathScopedCookie) {
  std::string token = issue_token();
  auto redirect = tcp()->Get(path("/app/page?a=1&hutch_port_token=" + token + "&b=2"));
  ASSERT_TRUE(redirect);
  EXPECT_EQ(redirect->status, 303) << redirect->body;
  EXPECT_EQ(redirect->get_header_value("Location"), path("/app/page?a=1&b=2"));
  std::string cookie = redirect->get_header_value("Set-Cookie");
  EXPECT_TRUE(cookie.starts_with("hutch_port_token=" + token + ";")) << cookie;
  EXPECT_NE(cookie.find("; Path=" + path("/") + ";"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos) << cookie;

  auto followed =
      tcp()->Get(path("/app/page?a=1&b=2"), {{"Cookie", "theme=dark; hutch_port_token=" + token}});
  ASSERT_TRUE(followed);
  ASSERT_EQ(followed->status, 200) << followed->body;
  json echo = json::parse(followed->body);
  EXPECT_EQ(echo["target"], "/app/page?a=1&b=2");
  EXPECT_EQ(seen_header(echo, "Cookie"), "theme=dark");

  auto forged = tcp()->Get(path("/app?hutch_port_token=hpt_0000000000000000_00"));
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 401);
  EXPECT_TRUE(forged->get_header_value("Set-Cookie").empty());
}

TEST_F(PortsTest, TokensDieWithTheirSandbox) {
  std::string other = create({{"network", "loopback"}});
  ASSERT_FALSE(other.empty());
  start_echo(other, kPort);
  std::string token = issue_token(kPort, 600, other);
  EXPECT_EQ(get_with_port_token(path("/x", other), token), 200);
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + other).status, 204);
  EXPECT_EQ(get_with_port_token(path("/x", other), token), 401);
  EXPECT_EQ(daemon_->get(token_path("", other)).status, 404);
}

TEST_F(PortsTest, HostileTargetsStayInsideTheirPort) {
  // Dot segments, plain or percent-encoded, are the sandbox server's path to interpret: they
  // reach it as sent and never route to another hutchd route.
  for (const std::string rest :
       {"/../../../health", "/%2e%2e/%2e%2e/%2e%2e/health", "/..%2f..%2f"}) {
    std::string raw =
        raw_round_trip(daemon_->socket(),
                       "GET " + path(rest) + " HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(raw.starts_with("HTTP/1.1 200")) << rest << ": " << raw;
    EXPECT_EQ(body_of(raw)["target"], rest);
  }
  // A target that only decodes to a port path is refused rather than guessed at.
  std::string encoded = raw_round_trip(
      daemon_->socket(), "GET /v1/sandboxes/" + id_ +
                             "/ports%2f8080/x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(encoded.starts_with("HTTP/1.1 400")) << encoded;
  std::string around = raw_round_trip(
      daemon_->socket(), "GET /v1/sandboxes/../sandboxes/" + id_ +
                             "/ports/8080/ HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(around.starts_with("HTTP/1.1 404")) << around;

  // Huge headers are refused by hutchd; the daemon and the proxy go on.
  std::string huge =
      raw_round_trip(daemon_->socket(), "GET " + path("/") + " HTTP/1.1\r\nHost: h\r\nX-Big: " +
                                            std::string(256 << 10, 'a') + "\r\n\r\n");
  EXPECT_TRUE(huge.starts_with("HTTP/1.1 4")) << huge.substr(0, 200);
  EXPECT_EQ(daemon_->get(path("/after")).status, 200);
}

TEST_F(PortsTest, TokensNeverReachTheLog) {
  std::string token = issue_token();
  EXPECT_EQ(get_with_port_token(path("/x"), token), 200);
  auto redirect = tcp()->Get(path("/?hutch_port_token=" + token));
  ASSERT_TRUE(redirect);
  EXPECT_EQ(redirect->status, 303);
  auto bearer = tcp()->Get(path("/y"), {{"Authorization", "Bearer " + token_}});
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 200);
  std::string log = daemon_->log();
  EXPECT_NE(log.find(path("/x")), std::string::npos) << "the requests are logged";
  EXPECT_EQ(log.find(token.substr(21)), std::string::npos) << log;
  EXPECT_EQ(log.find(token_), std::string::npos);
}

TEST_F(PortsTest, TunnelRelaysRawBytesBothWays) {
  start_upper_server();
  UniqueFd fd = connect_unix(daemon_->socket());
  ASSERT_TRUE(fd);
  std::string head = open_tunnel(fd.get(), kRawPort);
  ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  ASSERT_TRUE(send_all(fd.get(), "hello, tunnel"));
  EXPECT_EQ(receive(fd.get(), 13), "HELLO, TUNNEL");

  // 16 MiB each way, written while read, then the half-close passed on: the server's EOF comes
  // back after all of it.
  std::string payload(16u << 20, 'x');
  auto started = Clock::now();
  std::thread writer([&] {
    send_all(fd.get(), payload);
    ::shutdown(fd.get(), SHUT_WR);
  });
  std::string echoed = receive(fd.get());
  writer.join();
  double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_EQ(echoed.size(), payload.size());
  EXPECT_EQ(echoed, std::string(payload.size(), 'X'));
  std::printf("16 MiB each way through a tunnel: %.0f ms\n", seconds * 1000);

  UniqueFd refused = connect_unix(daemon_->socket());
  std::string nothing = open_tunnel(refused.get(), 9001);
  EXPECT_TRUE(nothing.starts_with("HTTP/1.1 502")) << nothing;
}

TEST_F(PortsTest, PortTokenOpensTheTunnelOfItsPortOnly) {
  start_upper_server();
  std::string token = issue_token(kRawPort);
  UniqueFd without = connect_tcp(tcp_port_);
  EXPECT_TRUE(open_tunnel(without.get(), kRawPort).starts_with("HTTP/1.1 401"));
  UniqueFd other_port = connect_tcp(tcp_port_);
  EXPECT_TRUE(open_tunnel(other_port.get(), kPort, "X-Hutch-Port-Token: " + token + "\r\n")
                  .starts_with("HTTP/1.1 401"));
  UniqueFd with = connect_tcp(tcp_port_);
  std::string head = open_tunnel(with.get(), kRawPort, "X-Hutch-Port-Token: " + token + "\r\n");
  ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  ASSERT_TRUE(send_all(with.get(), "abc"));
  EXPECT_EQ(receive(with.get(), 3), "ABC");
}

TEST_F(PortsTest, StoppingHutchdEndsOpenTunnels) {
  start_upper_server();
  UniqueFd fd = connect_unix(daemon_->socket());
  ASSERT_TRUE(open_tunnel(fd.get(), kRawPort).starts_with("HTTP/1.1 200"));
  ASSERT_TRUE(send_all(fd.get(), "up"));
  ASSERT_EQ(receive(fd.get(), 2), "UP");
  auto started = Clock::now();
  EXPECT_EQ(daemon_->stop(SIGTERM), 0) << daemon_->log();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - started).count(), 5.0 * time_scale());
  EXPECT_EQ(receive(fd.get()), "");  // the tunnel closed
}

// WebSocket through the proxy: the upgrade is forwarded, the server's 101 comes back as it sent
// it, and the connection then carries the server's bytes.
TEST_F(PortsTest, UpgradeSwitchesTheConnectionOver) {
  ASSERT_EQ(
      daemon_->put("/v1/sandboxes/" + id_ + "/files?path=/tmp/upgrade.py", kUpgradeServer).status,
      200);
  ASSERT_EQ(daemon_
                ->post("/v1/sandboxes/" + id_ + "/exec",
                       {{"argv", {"python3", "/tmp/upgrade.py", std::to_string(kUpgradePort)}},
                        {"background", true}})
                .status,
            201);
  std::string request = "GET " + path("/socket?room=1", "", kUpgradePort) +
                        " HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\n"
                        "Upgrade: hutch-test\r\nSec-WebSocket-Key: abc\r\n\r\n";
  UniqueFd fd;
  std::string head;
  ASSERT_TRUE(wait_until(
      [&] {
        fd = connect_unix(daemon_->socket());
        head = send_all(fd.get(), request) ? receive_head(fd.get()) : "";
        return head.starts_with("HTTP/1.1 101");
      },
      10s, "the upgrade server in the sandbox to switch protocols", 50ms));
  EXPECT_NE(head.find("Upgrade: hutch-test\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("X-Seen-Connection: Upgrade\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("X-Seen-Target: /socket?room=1\r\n"), std::string::npos) << head;
  EXPECT_EQ(receive(fd.get(), 5), "ready");
  ASSERT_TRUE(send_all(fd.get(), "frames"));
  EXPECT_EQ(receive(fd.get(), 6), "FRAMES");
}

// hutch port-forward: a local port that reaches the sandbox's, one tunnel per connection.
TEST_F(PortsTest, PortForwardServesALocalPort) {
  int local = free_tcp_port();
  ASSERT_NE(local, 0);
  std::vector<std::string> args = {
      HUTCH_BINARY, "port-forward",        "--socket",           daemon_->socket(),
      id_,          std::to_string(kPort), std::to_string(local)};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  auto request = [&](const std::string& target) {
    UniqueFd fd = connect_tcp(local);
    if (!fd || !send_all(fd.get(), "GET " + target +
                                       " HTTP/1.1\r\nHost: x\r\n"
                                       "Connection: close\r\n\r\n"))
      return json();
    return body_of(receive(fd.get()));
  };
  EXPECT_TRUE(wait_until([&] { return request("/probe").is_object(); }, 10s,
                         "hutch port-forward to listen", 50ms));
  for (int i = 0; i < 3; ++i) {
    json echo = request("/through/forward/" + std::to_string(i));
    ASSERT_TRUE(echo.is_object());
    EXPECT_EQ(echo["target"], "/through/forward/" + std::to_string(i));
  }
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);

  // A port with nothing behind it is told before anything listens.
  std::vector<std::string> closed = {"port-forward", "--socket",           daemon_->socket(), id_,
                                     "8099",         std::to_string(local)};
  CommandResult refused = hutch(closed);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("port_unreachable"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace hutch::testing
