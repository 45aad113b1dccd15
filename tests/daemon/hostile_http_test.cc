// hutchd against hostile and slow clients, over raw sockets: slow request heads, connection
// floods, ambiguous framing, oversized bodies, duplicate JSON keys.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
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

UniqueFd connect_unix(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return UniqueFd();
  return fd;
}

// A TCP connection to 127.0.0.1:port from `source` (any 127/8 address is a distinct peer).
UniqueFd connect_tcp(const char* source, int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0)
    return UniqueFd();
  return fd;
}

struct Answer {
  std::string raw;
  bool closed = false;  // the server closed the connection (EOF) within the timeout
  int status = 0;
  json body;
  std::string code() const {
    return body.is_object() && body.contains("error") ? body["error"].value("code", "") : "";
  }
};

// Whether `raw` holds a whole answer (its head and Content-Length bytes of body).
bool answer_complete(const std::string& raw) {
  size_t end = raw.find("\r\n\r\n");
  size_t length = raw.find("Content-Length: ");
  if (end == std::string::npos || length == std::string::npos || length > end) return false;
  return raw.size() >= end + 4 + std::stoul(raw.substr(length + 16));
}

// Reads until the server closes the connection or `timeout` passes (or, with `one_answer`, a
// whole answer has arrived).
Answer read_until_closed(int fd, std::chrono::milliseconds timeout, bool one_answer = false) {
  Answer answer;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, static_cast<int>(left.count())) <= 0) break;
    char buffer[4096];
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      answer.closed = true;
      break;
    }
    answer.raw.append(buffer, static_cast<size_t>(n));
    if (one_answer && answer_complete(answer.raw)) break;
  }
  if (answer.raw.starts_with("HTTP/1.1 ")) answer.status = std::atoi(answer.raw.c_str() + 9);
  size_t body = answer.raw.find("\r\n\r\n");
  if (body != std::string::npos) {
    answer.body = json::parse(answer.raw.substr(body + 4), nullptr, false);
    if (answer.body.is_discarded()) answer.body = nullptr;
  }
  return answer;
}

// One request on a fresh unix-socket connection; the answer as the server sends it.
Answer round_trip(const std::string& socket, const std::string& request,
                  std::chrono::milliseconds timeout = 3000ms) {
  UniqueFd fd = connect_unix(socket);
  if (!fd || !send_all(fd.get(), request)) return {};
  return read_until_closed(fd.get(), timeout);
}

// The inodes of the daemon's ends of connections to the unix socket `path` (they carry the
// listener's path in /proc/net/unix; a client's end has none): state 02 not accepted yet, 03
// accepted. The listener itself is state 01.
std::vector<std::string> unix_server_ends(const std::string& path, bool accepted_only) {
  std::vector<std::string> inodes;
  std::istringstream table(read_file_or_empty("/proc/net/unix"));
  for (std::string line; std::getline(table, line);) {
    std::istringstream fields(line);
    std::string num, refs, protocol, flags, type, state, inode, name;
    if (!(fields >> num >> refs >> protocol >> flags >> type >> state >> inode >> name)) continue;
    if (name == path && (state == "03" || (!accepted_only && state == "02")))
      inodes.push_back(inode);
  }
  return inodes;
}

// The inodes of the daemon's ends of established connections to its TCP `port` on 127.0.0.1
// (/proc/net/tcp: local address 0100007F:<port hex>, state 01).
std::vector<std::string> tcp_server_ends(int port) {
  char local[32];
  std::snprintf(local, sizeof local, "0100007F:%04X", port);
  std::vector<std::string> inodes;
  std::istringstream table(read_file_or_empty("/proc/net/tcp"));
  for (std::string line; std::getline(table, line);) {
    std::istringstream fields(line);
    std::string slot, local_address, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(fields >> slot >> local_address >> remote >> state >> queues >> timer >> retransmits >>
          uid >> timeout >> inode))
      continue;
    if (local_address == local && state == "01") inodes.push_back(inode);
  }
  return inodes;
}

// How many of `inodes` are open in `pid`: the connections hutchd has accepted (and counts
// against its caps) and not closed yet.
int held_by(pid_t pid, const std::vector<std::string>& inodes) {
  int held = 0;
  for (const std::string& fd : dir_entries("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code error;
    const std::string target =
        std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/fd/" + fd, error);
    for (const std::string& inode : inodes)
      if (target == "socket:[" + inode + "]") ++held;
  }
  return held;
}

int unix_connections_held(const Hutchd& daemon) {
  return held_by(daemon.pid(), unix_server_ends(daemon.socket(), true));
}

// Starts a hutchd with `args`, and waits until the connection of its start-up health check has
// been released (the caps count open connections).
std::unique_ptr<Hutchd> start_daemon(const TempDir& temp, std::vector<std::string> args) {
  args.push_back("--destroy-on-exit");
  auto daemon = std::make_unique<Hutchd>(temp.path(), std::move(args));
  if (!daemon->start()) {
    ADD_FAILURE() << daemon->log();
    return nullptr;
  }
  EXPECT_TRUE(wait_until([&] { return unix_server_ends(daemon->socket(), false).empty(); }, 5s,
                         "hutchd to close its start-up health check's connection"));
  return daemon;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

class HostileHttpTest : public ::testing::Test {
 protected:
  void SetUp() override { HUTCH_REQUIRE_ROOT(); }
  void TearDown() override {
    if (daemon_ && HasFailure())
      std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon_->log().c_str());
    if (daemon_ && daemon_->pid() > 0) {
      EXPECT_EQ(daemon_->stop(SIGTERM), 0);
    }
  }
  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
};

// 300 clients dribble their request heads a byte at a time: none of them holds a thread, so a
// health check and an exec on fresh connections answer at once.
TEST_F(HostileHttpTest, SlowHeadsDoNotDelayOtherClients) {
  daemon_ = start_daemon(temp_, {"--max-connections-per-peer", "1000"});
  ASSERT_TRUE(daemon_);
  auto created = daemon_->post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];

  constexpr int kSlow = 300;
  std::vector<UniqueFd> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(connect_unix(daemon_->socket()));
    ASSERT_TRUE(slow.back()) << "connect " << i << ": " << std::strerror(errno);
  }
  const std::string head = "GET /v1/health HTTP/1.1\r\nHost: hutch\r\nX-Slow: ";
  std::atomic<bool> done{false};
  std::atomic<int> failed_sends{0};
  std::atomic<size_t> bytes_sent{0};
  std::thread dribbler([&] {
    for (size_t byte = 0; !done.load(); ++byte) {
      char c = byte < head.size() ? head[byte] : 'a';
      for (const UniqueFd& fd : slow) {
        if (::send(fd.get(), &c, 1, MSG_NOSIGNAL) != 1) failed_sends.fetch_add(1);
      }
      bytes_sent.store(byte + 1);
      std::this_thread::sleep_for(20ms);
    }
  });
  // Every slow connection is mid-head: hutchd has accepted it and holds part of a head.
  EXPECT_TRUE(wait_until([&] { return unix_connections_held(*daemon_) == kSlow; }, 10s,
                         "hutchd to accept every slow connection", 20ms));
  EXPECT_TRUE(wait_until([&] { return bytes_sent.load() >= 10; }, 5s, "ten bytes of each head"));

  auto started = Clock::now();
  auto health = daemon_->get("/v1/health");
  double health_ms = ms_since(started);
  started = Clock::now();
  auto exec = daemon_->post("/v1/sandboxes/" + id + "/exec", {{"command", "echo fast"}});
  double exec_ms = ms_since(started);
  // Nobody answered the slow ones: they were all held open, mid-head, the whole time.
  int answered = 0;
  for (const UniqueFd& fd : slow) {
    pollfd entry{fd.get(), POLLIN, 0};
    if (::poll(&entry, 1, 0) > 0) ++answered;
  }
  done.store(true);
  dribbler.join();

  EXPECT_EQ(health.status, 200) << health.raw;
  EXPECT_LT(health_ms, 1000.0 * time_scale());
  EXPECT_EQ(exec.status, 200) << exec.raw;
  EXPECT_EQ(exec.body.value("stdout", ""), "fast\n");
  EXPECT_LT(exec_ms, 1000.0 * time_scale());
  EXPECT_EQ(failed_sends.load(), 0);
  EXPECT_EQ(answered, 0);
  std::fprintf(stderr, "with %d slow heads open: health %.1f ms, exec %.1f ms\n", kSlow, health_ms,
               exec_ms);
}

// The head has a total deadline: a byte every 100 ms does not keep it alive past it.
TEST_F(HostileHttpTest, HeadDeadlineIsTotalNotPerRead) {
  daemon_ = start_daemon(temp_, {"--head-timeout", "1"});
  ASSERT_TRUE(daemon_);
  UniqueFd fd = connect_unix(daemon_->socket());
  ASSERT_TRUE(fd);
  auto started = Clock::now();
  const std::string head = "GET /v1/health HTTP/1.1\r\nHost: hutch\r\nX-Slow: ";
  Answer answer;
  for (size_t byte = 0; ms_since(started) < 5000; ++byte) {
    char c = byte < head.size() ? head[byte] : 'a';
    if (::send(fd.get(), &c, 1, MSG_NOSIGNAL) != 1) break;
    pollfd entry{fd.get(), POLLIN, 0};
    if (::poll(&entry, 1, 100) > 0) break;
  }
  double answered_ms = ms_since(started);
  answer = read_until_closed(fd.get(), 2000ms);
  EXPECT_EQ(answer.status, 408) << answer.raw;
  EXPECT_EQ(answer.code(), "request_timeout") << answer.raw;
  EXPECT_TRUE(answer.closed);
  EXPECT_GE(answered_ms, 900.0);
  EXPECT_LT(answered_ms, 2500.0);
  // Others are served as before.
  EXPECT_EQ(daemon_->get("/v1/health").status, 200);
}

TEST_F(HostileHttpTest, HeadOverTheCapIs431) {
  daemon_ = start_daemon(temp_, {});
  ASSERT_TRUE(daemon_);
  std::string head = "GET /v1/health HTTP/1.1\r\nHost: hutch\r\n";
  while (head.size() < 70 * 1024) head += "X-Filler: " + std::string(100, 'a') + "\r\n";
  Answer answer = round_trip(daemon_->socket(), head);
  EXPECT_EQ(answer.status, 431) << answer.raw.substr(0, 200);
  EXPECT_EQ(answer.code(), "request_head_too_large");
  EXPECT_TRUE(answer.closed);
}

// Connections are capped per uid over the unix socket: the one past the cap gets its 429 at
// once; closing one makes room again.
TEST_F(HostileHttpTest, ConnectionsPerUidAreCapped) {
  daemon_ = start_daemon(temp_, {"--max-connections-per-peer", "4"});
  ASSERT_TRUE(daemon_);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_unix(daemon_->socket()));
  ASSERT_TRUE(wait_until([&] { return unix_connections_held(*daemon_) == 4; }, 5s,
                         "hutchd to accept the four connections"));
  auto started = Clock::now();
  Answer refused = round_trip(daemon_->socket(), "GET /v1/health HTTP/1.1\r\nHost: hutch\r\n\r\n");
  EXPECT_EQ(refused.status, 429) << refused.raw;
  EXPECT_EQ(refused.code(), "too_many_connections") << refused.raw;
  EXPECT_NE(refused.raw.find("uid 0"), std::string::npos) << refused.raw;
  EXPECT_TRUE(refused.closed);
  EXPECT_LT(ms_since(started), 1000.0 * time_scale());
  idle.pop_back();
  EXPECT_TRUE(wait_until([&] { return daemon_->get("/v1/health").status == 200; }, 1s,
                         "room for a connection again", 50ms));
}

// Over TCP the cap is per address: 127.0.0.2 at its cap does not block 127.0.0.1.
TEST_F(HostileHttpTest, ConnectionsPerAddressAreCapped) {
  int port = free_tcp_port();
  ASSERT_NE(port, 0);
  std::string token = "0123456789abcdef0123456789abcdef";
  std::ofstream(temp_.path() + "/token") << token << "\n";
  daemon_ = start_daemon(temp_, {"--listen", "127.0.0.1:" + std::to_string(port), "--token-file",
                                 temp_.path() + "/token", "--max-connections-per-peer", "4"});
  ASSERT_TRUE(daemon_);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(connect_tcp("127.0.0.2", port));
    ASSERT_TRUE(idle.back()) << std::strerror(errno);
  }
  ASSERT_TRUE(wait_until([&] { return held_by(daemon_->pid(), tcp_server_ends(port)) == 4; }, 5s,
                         "hutchd to accept the four connections"));
  UniqueFd fifth = connect_tcp("127.0.0.2", port);
  ASSERT_TRUE(fifth);
  ASSERT_TRUE(send_all(
      fifth.get(),
      "GET /v1/health HTTP/1.1\r\nHost: hutch\r\nAuthorization: Bearer " + token + "\r\n\r\n"));
  Answer refused = read_until_closed(fifth.get(), 3000ms);
  EXPECT_EQ(refused.status, 429) << refused.raw;
  EXPECT_EQ(refused.code(), "too_many_connections") << refused.raw;
  EXPECT_NE(refused.raw.find("127.0.0.2"), std::string::npos) << refused.raw;
  EXPECT_TRUE(refused.closed);

  httplib::Client other("127.0.0.1", port);
  other.set_bearer_token_auth(token);
  auto health = other.Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(HostileHttpTest, ConnectionsInTotalAreCapped) {
  daemon_ = start_daemon(temp_, {"--max-connections", "4", "--max-connections-per-peer", "100"});
  ASSERT_TRUE(daemon_);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_unix(daemon_->socket()));
  ASSERT_TRUE(wait_until([&] { return unix_connections_held(*daemon_) == 4; }, 5s,
                         "hutchd to accept the four connections"));
  Answer refused = round_trip(daemon_->socket(), "GET /v1/health HTTP/1.1\r\nHost: hutch\r\n\r\n");
  EXPECT_EQ(refused.status, 503) << refused.raw;
  EXPECT_EQ(refused.code(), "connection_limit") << refused.raw;
  EXPECT_TRUE(refused.closed);
}

// Each request is one a proxy and hutchd could frame two ways: 400 and the connection closes
// (the bytes after the head are never taken for a request). The route is one that reads a body
// and has no side effect (no such sandbox).
TEST_F(HostileHttpTest, AmbiguousFramingIs400AndCloses) {
  daemon_ = start_daemon(temp_, {});
  ASSERT_TRUE(daemon_);
  const std::string line = "POST /v1/sandboxes/none/exec HTTP/1.1\r\nHost: hutch\r\n";
  const std::string chunked_body = "5\r\nhello\r\n0\r\n\r\n";
  struct Case {
    const char* name;
    std::string request;
  };
  std::vector<Case> cases = {
      {"length and chunked",
       line + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_body},
      {"two lengths", line + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
      {"gzip", line + "Transfer-Encoding: gzip\r\n\r\nhello"},
      {"gzip, chunked", line + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked_body},
      {"Chunked", line + "Transfer-Encoding: Chunked\r\n\r\n" + chunked_body},
      {"chunked twice",
       line + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_body},
      {"negative length", line + "Content-Length: -1\r\n\r\nhello"},
      {"non-numeric length", line + "Content-Length: abc\r\n\r\nhello"},
      {"length with junk", line + "Content-Length: 5x\r\n\r\nhello"},
      {"length with sign", line + "Content-Length: +5\r\n\r\nhello"},
  };
  for (const Case& c : cases) {
    Answer answer = round_trip(daemon_->socket(), c.request);
    EXPECT_EQ(answer.status, 400) << c.name << ": " << answer.raw;
    EXPECT_EQ(answer.code(), "invalid_framing") << c.name << ": " << answer.raw;
    EXPECT_TRUE(answer.closed) << c.name;
  }
  // The same route, framed plainly, is read and answered (no such sandbox), keep-alive.
  Answer plain = round_trip(daemon_->socket(), line + "Content-Length: 2\r\n\r\n{}", 500ms);
  EXPECT_EQ(plain.status, 404) << plain.raw;
  EXPECT_FALSE(plain.closed);
  // Neither header: no body (RFC 9112 6.3), answered at once rather than read until EOF.
  UniqueFd fd = connect_unix(daemon_->socket());
  ASSERT_TRUE(fd && send_all(fd.get(), line + "\r\n"));
  auto started = Clock::now();
  Answer bodiless = read_until_closed(fd.get(), 3000ms, true);
  EXPECT_EQ(bodiless.status, 404) << bodiless.raw;
  EXPECT_LT(ms_since(started), 1000.0 * time_scale());
}

// A Content-Length over every limit is refused from the head alone: no body is ever sent.
TEST_F(HostileHttpTest, HugeContentLengthIs413AtOnce) {
  daemon_ = start_daemon(temp_, {});
  ASSERT_TRUE(daemon_);
  const std::string head =
      "POST /v1/sandboxes/none/exec HTTP/1.1\r\nHost: hutch\r\nContent-Type: "
      "application/json\r\nContent-Length: 1000000000000000\r\n";
  for (const std::string& extra : {std::string(), std::string("Expect: 100-continue\r\n")}) {
    auto started = Clock::now();
    Answer answer = round_trip(daemon_->socket(), head + extra + "\r\n");
    EXPECT_EQ(answer.status, 413) << extra << answer.raw;
    EXPECT_EQ(answer.code(), "payload_too_large") << answer.raw;
    EXPECT_TRUE(answer.closed);
    EXPECT_LT(ms_since(started), 1000.0 * time_scale());
  }
  // A JSON route's cap is the JSON limit (8 MiB), also from the head alone.
  Answer json_cap = round_trip(daemon_->socket(),
                               "POST /v1/sandboxes HTTP/1.1\r\nHost: hutch\r\nContent-Length: "
                               "9000000\r\n\r\n{");
  EXPECT_EQ(json_cap.status, 413) << json_cap.raw;
  EXPECT_TRUE(json_cap.closed);
}

TEST_F(HostileHttpTest, DuplicateJsonKeysAre400) {
  daemon_ = start_daemon(temp_, {});
  ASSERT_TRUE(daemon_);
  auto top = daemon_->post_raw("/v1/sandboxes", R"({"hostname": "a", "hostname": "b"})");
  EXPECT_EQ(top.status, 400) << top.raw;
  EXPECT_EQ(error_code(top), "duplicate_key") << top.raw;
  auto nested = daemon_->post_raw("/v1/sandboxes", R"({"env": {"A": "1", "A": "2"}})");
  EXPECT_EQ(nested.status, 400) << nested.raw;
  EXPECT_EQ(error_code(nested), "duplicate_key") << nested.raw;
  EXPECT_EQ(daemon_->get("/v1/sandboxes").body["sandboxes"].size(), 0u);
  // One key in two objects is no duplicate.
  auto fine = daemon_->post_raw("/v1/sandboxes", R"({"env": {"A": "1"}, "labels": {"A": "2"}})");
  ASSERT_EQ(fine.status, 201) << fine.raw;
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + fine.body["id"].get<std::string>()).status, 204);
}

// Two requests in one write get two answers (the second head is already in the buffer when the
// first is answered).
TEST_F(HostileHttpTest, PipelinedRequestsAreBothAnswered) {
  daemon_ = start_daemon(temp_, {});
  ASSERT_TRUE(daemon_);
  Answer answer =
      round_trip(daemon_->socket(),
                 "GET /v1/health HTTP/1.1\r\nHost: hutch\r\n\r\n"
                 "GET /v1/sandboxes HTTP/1.1\r\nHost: hutch\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(answer.closed);
  EXPECT_NE(answer.raw.find("\"status\":\"ok\""), std::string::npos) << answer.raw;
  EXPECT_NE(answer.raw.find("\"sandboxes\":[]"), std::string::npos) << answer.raw;
}

}  // namespace
}  // namespace hutch::testing
