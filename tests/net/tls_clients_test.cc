// Real clients against the engine's server context, configured only through the trust bundle
// and the environment trust_environment() gives: curl (CURL_CA_BUNDLE), Python's ssl
// (SSL_CERT_FILE, with VERIFY_X509_STRICT as Python 3.13 sets by default) and Node
// (NODE_EXTRA_CA_CERTS, the CA alone). The server listens on 127.0.0.1 inside a network
// namespace the test makes; the clients run in it by nsenter.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <thread>

#include "net/tls/sandbox_ca.h"
#include "net/tls/server_context.h"
#include "net/tls/trust_bundle.h"
#include "runtime/ns/net.h"
#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::net::tls {
namespace {

constexpr std::string_view kHost = "api.example.com";

class TlsClients : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/nsenter", "/usr/bin/curl", "/usr/bin/python3"}) {
      HUTCH_REQUIRE(access(tool, X_OK) == 0, std::string(tool) + " is not installed");
    }
    HUTCH_REQUIRE(access(std::string(kHostRootsPath).c_str(), R_OK) == 0,
                  std::string(kHostRootsPath) + " is missing");
    signal(SIGPIPE, SIG_IGN);
    auto ca = SandboxCa::create({.label = "clients", .permitted_hosts = {std::string(kHost)}});
    ASSERT_TRUE(ca) << ca.error().message();
    ca_ = std::move(*ca);
    // HTTP/1.1 only: the stand-in server below answers HTTP/1.1.
    auto server = make_server_context(*ca_, {.alpn = {"http/1.1"}});
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    auto bundle = build_trust_bundle(ca_->certificate_pem());
    ASSERT_TRUE(bundle) << bundle.error().message();
    bundle_path_ = dir_.path() + "/bundle.pem";
    ca_path_ = dir_.path() + "/ca.pem";
    std::ofstream(bundle_path_) << *bundle;
    std::ofstream(ca_path_) << ca_->certificate_pem();

    // unshare(CLONE_NEWNET) on a thread of its own; the listener is made in the namespace on
    // another, so no thread of the test process is left in it.
    std::thread([&] {
      auto netns = make_loopback_netns();
      ASSERT_TRUE(netns) << netns.error().message();
      netns_ = std::move(*netns);
    }).join();
    ASSERT_TRUE(netns_);
    std::thread([&] {
      ASSERT_EQ(setns(netns_.get(), CLONE_NEWNET), 0) << strerror(errno);
      listener_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
      ASSERT_EQ(listen(listener_.get(), 4), 0);
      socklen_t size = sizeof address;
      getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &size);
      port_ = ntohs(address.sin_port);
    }).join();
    ASSERT_NE(port_, 0);
  }

  // Serves one connection (if one comes within 10 s): TLS, then "ok" to any request head.
  std::thread serve_one() {
    return std::thread([this] {
      pollfd ready{.fd = listener_.get(), .events = POLLIN, .revents = 0};
      if (poll(&ready, 1, 10'000) != 1) return;
      UniqueFd connection(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      SslPtr ssl(SSL_new(server_.get()));
      SSL_set_fd(ssl.get(), connection.get());
      if (SSL_accept(ssl.get()) == 1) {
        char buffer[4096];
        std::string head;
        while (head.find("\r\n\r\n") == std::string::npos) {
          const int n = SSL_read(ssl.get(), buffer, sizeof buffer);
          if (n <= 0) break;
          head.append(buffer, static_cast<size_t>(n));
        }
        const std::string answer =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        SSL_write(ssl.get(), answer.data(), static_cast<int>(answer.size()));
        SSL_shutdown(ssl.get());
      }
      ERR_clear_error();
    });
  }

  // `argv` inside the namespace, with PATH and `environment` only.
  testing::CommandResult run_inside(std::vector<std::string> argv,
                                    const std::vector<EnvEntry>& environment) {
    argv.insert(
        argv.begin(),
        {"/usr/bin/nsenter",
         "--net=/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(netns_.get()), "--"});
    testing::CommandOptions options;
    options.env.push_back("PATH=/usr/bin:/bin");
    for (const EnvEntry& entry : environment) options.env.push_back(entry.name + "=" + entry.value);
    std::thread server = serve_one();
    auto result = testing::run_command(argv, options);
    server.join();
    return result;
  }

  testing::CommandResult curl(const std::vector<EnvEntry>& environment) {
    const std::string port = std::to_string(port_);
    return run_inside({"curl", "-sS", "--max-time", "10", "--http1.1", "--resolve",
                       std::string(kHost) + ":" + port + ":127.0.0.1",
                       "https://" + std::string(kHost) + ":" + port + "/"},
                      environment);
  }

  testing::CommandResult python(const std::vector<EnvEntry>& environment) {
    const std::string script =
        "import socket, ssl\n"
        "context = ssl.create_default_context()\n"
        "context.verify_flags |= ssl.VERIFY_X509_STRICT\n"
        "raw = socket.create_connection(('127.0.0.1', " +
        std::to_string(port_) +
        "), timeout=10)\n"
        "tls = context.wrap_socket(raw, server_hostname='" +
        std::string(kHost) +
        "')\n"
        "tls.sendall(b'GET / HTTP/1.1\\r\\nHost: " +
        std::string(kHost) +
        "\\r\\n\\r\\n')\n"
        "print(tls.recv(4096).split(b'\\r\\n\\r\\n')[1].decode())\n";
    return run_inside({"python3", "-c", script}, environment);
  }

  testing::CommandResult node(const std::vector<EnvEntry>& environment) {
    const std::string script =
        "require('https').get({host: '127.0.0.1', port: " + std::to_string(port_) +
        ", servername: '" + std::string(kHost) + "', headers: {Host: '" + std::string(kHost) +
        "'}}, (r) => { let body = ''; r.on('data', (d) => body += d);"
        " r.on('end', () => console.log(body)); })"
        ".on('error', (e) => { console.error(e.code); process.exit(1); });";
    return run_inside({"node", "-e", script}, environment);
  }

  testing::TempDir dir_;
  std::unique_ptr<SandboxCa> ca_;
  SslCtxPtr server_;
  std::string bundle_path_, ca_path_;
  UniqueFd netns_, listener_;
  uint16_t port_ = 0;
};

TEST_F(TlsClients, CurlTrustsTheBundleFromTheEnvironment) {
  const auto result = curl(trust_environment(bundle_path_, ca_path_));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "ok");
}

TEST_F(TlsClients, CurlWithTheHostRootsOnlyRefuses) {
  const auto result = curl({{"CURL_CA_BUNDLE", std::string(kHostRootsPath)}});
  EXPECT_EQ(result.exit_code, 60) << result.err;  // CURLE_PEER_FAILED_VERIFICATION
}

TEST_F(TlsClients, PythonStrictTrustsTheBundleFromTheEnvironment) {
  const auto result = python(trust_environment(bundle_path_, ca_path_));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "ok\n");
}

TEST_F(TlsClients, PythonWithTheHostRootsOnlyRefuses) {
  const auto result = python({{"SSL_CERT_FILE", std::string(kHostRootsPath)}});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("CERTIFICATE_VERIFY_FAILED"), std::string::npos) << result.err;
}

// Node keeps its own roots and adds NODE_EXTRA_CA_CERTS (the CA alone) to them.
TEST_F(TlsClients, NodeTrustsTheExtraCaFromTheEnvironment) {
  HUTCH_REQUIRE(access("/usr/bin/node", X_OK) == 0, "/usr/bin/node is not installed");
  const auto result = node(trust_environment(bundle_path_, ca_path_));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "ok\n");
}

TEST_F(TlsClients, NodeWithItsOwnRootsOnlyRefuses) {
  HUTCH_REQUIRE(access("/usr/bin/node", X_OK) == 0, "/usr/bin/node is not installed");
  const auto result = node({});
  EXPECT_NE(result.exit_code, 0);
  // The server sends the leaf alone: Node finds no issuer for it among its roots.
  EXPECT_NE(result.err.find("UNABLE_TO_VERIFY_LEAF_SIGNATURE"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace hutch::net::tls
