// The engine behind a corporate upstream proxy, as root: a sandbox namespace S with the egress
// path, an upstream namespace U whose lo holds TEST-NET addresses with HTTP and HTTPS servers,
// and P, a CONNECT proxy in U (tests/common/connect_proxy.h) that records what it was asked.
// curl runs inside S (nsenter). Allowed traffic must reach its upstream only through P, with the
// credentials of the proxy's secret, which nothing the sandbox reads may hold; no_proxy hosts go
// direct; denied names and floor addresses never reach P; P's failures are fast and logged.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "net/egress_path.h"
#include "net/engine/engine.h"
#include "net/inject.h"
#include "net/tls/sandbox_ca.h"
#include "net/tls/server_context.h"
#include "tests/common/command.h"
#include "tests/common/connect_proxy.h"
#include "tests/common/must_work.h"
#include "tests/common/netns.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"
#include "tests/net/engine_world.h"
#include "tests/net/http1_upstream.h"

namespace hutch::net {
namespace {

using namespace std::chrono_literals;
using testing::ConnectProxy;
using testing::Http1Upstream;

constexpr std::string_view kProxyCredentials = "corp-user:corp-pass-7d2a91";
// base64("corp-user:corp-pass-7d2a91")
constexpr std::string_view kProxyAuthorization = "Basic Y29ycC11c2VyOmNvcnAtcGFzcy03ZDJhOTE=";
constexpr std::string_view kApiKey = "sk-real-secret-4f1c9e";
const Address kProxy = *Address::parse("198.51.100.9");
const Address kApi = *Address::parse("198.51.100.10");
const Address kOther = *Address::parse("198.51.100.20");
const Address kDirect = *Address::parse("198.51.100.40");
// A fake address the DNS stub gave out for inner.test, a name only the proxy resolves.
const Address kInnerFake = *Address::parse("198.18.0.77");

Policy proxy_policy() {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* rule :
       {"api.test", "other.test", "direct.test", "inner.test", "198.51.100.9:3128"})
    policy.allow.push_back(*parse_rule(rule));
  policy.inject.push_back(testing::openai_key_rule({"api.test"}));
  return policy;
}

class UpstreamProxyEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/nsenter", "/usr/bin/curl", "/usr/sbin/ip"})
      HUTCH_REQUIRE(access(tool, X_OK) == 0, std::string(tool) + " is not installed");
    signal(SIGPIPE, SIG_IGN);
    sandbox_ns_ = testing::new_netns();
    upstream_ns_ = testing::new_netns();
    HUTCH_REQUIRE(sandbox_ns_ && upstream_ns_, "unshare(CLONE_NEWNET) failed");
    ASSERT_NO_FATAL_FAILURE(testing::prepare_namespaces(sandbox_ns_.get(), upstream_ns_.get(),
                                                        {kProxy, kApi, kOther, kDirect}));
    ASSERT_NO_FATAL_FAILURE(testing::make_engine_cas(dir_.path(), cas_));

    auto tls_context = [&] {
      auto context = tls::make_server_context(*cas_.upstream, {.alpn = {"http/1.1"}});
      return context ? std::move(*context) : nullptr;
    };
    api_tls_ = std::make_unique<Http1Upstream>(upstream_ns_.get(), kApi, 443, "ok from api",
                                               tls_context());
    other_tls_ = std::make_unique<Http1Upstream>(upstream_ns_.get(), kOther, 443, "ok from other",
                                                 tls_context());
    other_http_ = std::make_unique<Http1Upstream>(upstream_ns_.get(), kOther, 80, "ok from other");
    direct_http_ =
        std::make_unique<Http1Upstream>(upstream_ns_.get(), kDirect, 80, "ok from direct");
    ASSERT_TRUE(api_tls_->ok() && other_tls_->ok() && other_http_->ok() && direct_http_->ok())
        << "an upstream's bind";
    proxy_ = std::make_unique<ConnectProxy>(
        upstream_ns_.get(), kProxy.to_string(), 3128,
        std::map<std::string, std::string>{{"api.test", kApi.to_string()},
                                           {"other.test", kOther.to_string()},
                                           {"inner.test", kOther.to_string()}});
    ASSERT_TRUE(proxy_->ok()) << "the proxy's bind";

    auto key = new_placeholder_key();
    ASSERT_TRUE(key);
    key_ = *key;
    placeholder_ = placeholder_for(key_, "OPENAI_API_KEY");
  }

  void start_engine(uint16_t proxy_port = 3128) {
    EngineOptions options;
    // inner.test is missing: the host cannot resolve it, only the proxy can.
    options.resolver = static_resolver({{"api.test", {kApi}},
                                        {"other.test", {kOther}},
                                        {"direct.test", {kDirect}},
                                        {"denied.test", {kOther}}});
    options.upstream_netns_fd = upstream_ns_.get();
    options.upstream_ca_file = cas_.upstream_path;
    options.connect_timeout = 1000ms;
    options.secrets = testing::secrets_of(
        {{"OPENAI_API_KEY", std::string(kApiKey)}, {"CORP_PROXY", std::string(kProxyCredentials)}});
    UpstreamProxy proxy;
    proxy.host = kProxy.to_string();
    proxy.address = kProxy;
    proxy.port = proxy_port;
    proxy.no_proxy = *NoProxy::parse("direct.test, 10.0.0.0/8");
    proxy.credentials_secret = "CORP_PROXY";
    options.upstream_proxy = proxy;
    engine_ = testing::make_logging_engine(std::move(options), mutex_, logs_);
    ASSERT_NO_FATAL_FAILURE(testing::attach_sandbox(*engine_, sandbox_ns_.get(), proxy_policy(),
                                                    {{kInnerFake, "inner.test"}},
                                                    SandboxInjection{cas_.sandbox, key_}));
  }

  void TearDown() override {
    engine_.reset();
    proxy_.reset();
    api_tls_.reset();
    other_tls_.reset();
    other_http_.reset();
    direct_http_.reset();
  }

  // curl inside S, `host` resolved to `address` on ports 80 and 443.
  testing::CommandResult curl(const std::string& url, const std::string& host,
                              const Address& address, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        "/usr/bin/nsenter",
        "--net=/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(sandbox_ns_.get()),
        "--",
        "/usr/bin/curl",
        "-sS",
        "--max-time",
        "10",
        "--http1.1",
        "--noproxy",
        "*",
        "--resolve",
        host + ":443:" + address.to_string(),
        "--resolve",
        host + ":80:" + address.to_string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    return testing::run_command(argv);
  }

  std::optional<ConnectionLog> log_where(const std::function<bool(const ConnectionLog&)>& match) {
    return testing::last_log_where(mutex_, logs_, match);
  }

  bool anything_holds_credentials(const std::string& text) {
    return text.find(kProxyCredentials) != std::string::npos ||
           text.find(kProxyAuthorization.substr(6)) != std::string::npos;
  }
  bool any_log_holds_credentials() {
    std::lock_guard lock(mutex_);
    for (const ConnectionLog& log : logs_) {
      if (anything_holds_credentials(log.reason + log.rule + log.via_proxy)) return true;
    }
    return false;
  }

  testing::TempDir dir_;
  UniqueFd sandbox_ns_, upstream_ns_;
  testing::EngineCas cas_;
  std::unique_ptr<Http1Upstream> api_tls_, other_tls_, other_http_, direct_http_;
  std::unique_ptr<ConnectProxy> proxy_;
  PlaceholderKey key_{};
  std::string placeholder_;
  std::unique_ptr<Engine> engine_;
  std::mutex mutex_;
  std::vector<ConnectionLog> logs_;
};

TEST_F(UpstreamProxyEngine, PlainHttpPassthroughAndInjectedTlsAllGoThroughTheProxyWithCredentials) {
  start_engine();
  const auto http = curl("http://other.test/plain", "other.test", kOther);
  ASSERT_EQ(http.exit_code, 0) << http.err;
  EXPECT_EQ(http.out, "ok from other");
  const auto passthrough =
      curl("https://other.test/tls", "other.test", kOther, {"--cacert", cas_.upstream_path});
  ASSERT_EQ(passthrough.exit_code, 0) << passthrough.err;
  EXPECT_EQ(passthrough.out, "ok from other");
  const auto injected =
      curl("https://api.test/v1/chat", "api.test", kApi,
           {"--cacert", cas_.sandbox_path, "-H", "Authorization: Bearer " + placeholder_});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  EXPECT_EQ(injected.out, "ok from api");

  // The proxy was asked for each, by name, with the secret's credentials.
  const auto heads = proxy_->heads();
  ASSERT_EQ(heads.size(), 3u);
  EXPECT_TRUE(heads[0].starts_with("CONNECT other.test:80 HTTP/1.1\r\n")) << heads[0];
  EXPECT_TRUE(heads[1].starts_with("CONNECT other.test:443 HTTP/1.1\r\n")) << heads[1];
  EXPECT_TRUE(heads[2].starts_with("CONNECT api.test:443 HTTP/1.1\r\n")) << heads[2];
  for (const std::string& head : heads) {
    EXPECT_NE(head.find("\r\nProxy-Authorization: " + std::string(kProxyAuthorization) + "\r\n"),
              std::string::npos)
        << head;
  }
  // Inside the tunnel the engine still did its work: the API key injected, and no proxy header
  // reached an upstream.
  const auto api_heads = api_tls_->heads();
  ASSERT_EQ(api_heads.size(), 1u);
  EXPECT_NE(api_heads[0].find("Authorization: Bearer " + std::string(kApiKey)), std::string::npos);
  for (const auto* upstream : {api_tls_.get(), other_tls_.get(), other_http_.get()}) {
    for (const std::string& head : upstream->heads())
      EXPECT_FALSE(anything_holds_credentials(head)) << head;
  }
  for (const auto* got : {&http, &passthrough, &injected})
    EXPECT_FALSE(anything_holds_credentials(got->out + got->err));

  auto log = log_where([](const ConnectionLog& l) { return l.name == "api.test"; });
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->allowed);
  EXPECT_EQ(log->via_proxy, "198.51.100.9:3128");
  EXPECT_FALSE(log->proxy_failed);
  EXPECT_NE(log->reason.find("via proxy 198.51.100.9:3128"), std::string::npos) << log->reason;
  EXPECT_NE(log->reason.find("injected Authorization"), std::string::npos) << log->reason;
  EXPECT_FALSE(any_log_holds_credentials());
}

TEST_F(UpstreamProxyEngine, NoProxyHostGoesDirectAndTheProxySeesNothing) {
  start_engine();
  const auto got = curl("http://direct.test/", "direct.test", kDirect);
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok from direct");
  EXPECT_EQ(proxy_->accepted(), 0);
  auto log = log_where([](const ConnectionLog& l) { return l.name == "direct.test"; });
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->allowed);
  EXPECT_EQ(log->via_proxy, "");
  EXPECT_EQ(log->reason.find("via proxy"), std::string::npos) << log->reason;
}

TEST_F(UpstreamProxyEngine, DeniedNamesAndFloorAddressesNeverReachTheProxy) {
  start_engine();
  const auto denied = curl("http://denied.test/", "denied.test", kOther);
  ASSERT_EQ(denied.exit_code, 0) << denied.err;
  EXPECT_NE(denied.out.find("\"error\":\"network_denied\""), std::string::npos) << denied.out;
  const auto denied_tls =
      curl("https://denied.test/", "denied.test", kOther, {"--cacert", cas_.upstream_path});
  EXPECT_NE(denied_tls.exit_code, 0);
  const auto metadata = curl("http://169.254.169.254/latest/", "x.test", kOther);
  EXPECT_NE(metadata.exit_code, 0) << "the kernel's floor refuses it at connect()";
  // The proxy's own address is closed, though a rule allows it: the sandbox cannot use the
  // proxy itself, with or without credentials.
  const auto proxy_itself = curl("http://198.51.100.9:3128/", "x.test", kOther);
  EXPECT_NE(proxy_itself.exit_code, 0) << proxy_itself.out;
  auto log = log_where([](const ConnectionLog& l) {
    return l.port == 3128 && l.reason.find("the upstream proxy's address") != std::string::npos;
  });
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  EXPECT_EQ(log->rule, "floor");
  EXPECT_EQ(proxy_->accepted(), 0) << "nothing reached the proxy";
}

TEST_F(UpstreamProxyEngine, NameOnlyTheProxyResolvesIsTunnelledByName) {
  start_engine();
  // The sandbox got kInnerFake for inner.test from the DNS stub; the host cannot resolve it.
  const auto got = curl("http://inner.test/", "inner.test", kInnerFake);
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok from other");
  const auto heads = proxy_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_TRUE(heads[0].starts_with("CONNECT inner.test:80 ")) << heads[0];
  auto log = log_where([](const ConnectionLog& l) { return l.name == "inner.test"; });
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->allowed);
  EXPECT_EQ(log->address, "");
  EXPECT_NE(log->reason.find("the proxy resolves it"), std::string::npos) << log->reason;
}

// The engine's own time for the connection, under its 1 s connect timeout: curl's wall time
// also counts nsenter's and curl's start, about a second under qemu's emulation (6.1 VM).
constexpr const char* kResetNotHang = "a reset before the connect timeout, not a hang";

TEST_F(UpstreamProxyEngine, ProxyAnswering407FailsFastWith502OrResetAndTheLogNamesIt) {
  start_engine();
  proxy_->set_mode(ConnectProxy::Mode::kRefuse, 407);
  const auto http = curl("http://other.test/", "other.test", kOther, {"-i"});
  ASSERT_EQ(http.exit_code, 0) << http.err;
  EXPECT_TRUE(http.out.starts_with("HTTP/1.1 502 ")) << http.out;
  const std::string body = http.out.substr(http.out.find("\r\n\r\n") + 4);
  auto json = nlohmann::json::parse(body, nullptr, false);
  ASSERT_TRUE(json.is_object()) << body;
  EXPECT_EQ(json["error"], "upstream_proxy_failed");
  EXPECT_EQ(json["proxy_status"], 407);
  EXPECT_EQ(http.out.find("refused by the test proxy"), std::string::npos)
      << "nothing the proxy sent reaches the sandbox";
  EXPECT_FALSE(anything_holds_credentials(http.out));

  const auto tls =
      curl("https://other.test/", "other.test", kOther, {"--cacert", cas_.upstream_path});
  EXPECT_NE(tls.exit_code, 0);
  auto log =
      log_where([](const ConnectionLog& l) { return l.protocol == "tls" && l.proxy_failed; });
  ASSERT_TRUE(log);
  EXPECT_LT(log->duration_ms, 1000) << kResetNotHang;
  EXPECT_NE(log->reason.find("answered 407"), std::string::npos) << log->reason;
  EXPECT_FALSE(any_log_holds_credentials());
}

TEST_F(UpstreamProxyEngine, DeadProxyIsAFastReset) {
  start_engine(3129);  // nothing listens there
  const auto tls =
      curl("https://other.test/", "other.test", kOther, {"--cacert", cas_.upstream_path});
  EXPECT_NE(tls.exit_code, 0);
  auto log = log_where([](const ConnectionLog& l) { return l.proxy_failed; });
  ASSERT_TRUE(log);
  EXPECT_LT(log->duration_ms, 1000) << kResetNotHang;
  EXPECT_NE(log->reason.find("connect to upstream proxy 198.51.100.9:3129"), std::string::npos)
      << log->reason;
}

TEST_F(UpstreamProxyEngine, SilentProxyTimesOutAfterConnectTimeout) {
  start_engine();
  proxy_->set_mode(ConnectProxy::Mode::kSilent);
  const auto http = curl("http://other.test/", "other.test", kOther);
  ASSERT_EQ(http.exit_code, 0) << http.err;
  EXPECT_NE(http.out.find("\"proxy_status\":0"), std::string::npos) << http.out;
  EXPECT_LT(http.elapsed.count(), 5000);
  auto log = log_where([](const ConnectionLog& l) { return l.proxy_failed; });
  ASSERT_TRUE(log);
  EXPECT_NE(log->reason.find("no answer within 1000 ms"), std::string::npos) << log->reason;
}

// Figures for docs/network.md, printed: curl's time for a new plain-HTTP connection and request
// through the proxy (a CONNECT more, and the test proxy's own relaying) against the same
// upstream dialled directly (no_proxy), p50 of 20 each.
TEST_F(UpstreamProxyEngine, MeasuresTheProxysAddedLatencyPerConnection) {
  start_engine();
  auto p50 = [&](const std::string& host, const Address& address) {
    const std::string script =
        "for i in $(seq 20); do curl -s -o /dev/null --noproxy '*' --resolve " + host +
        ":80:" + address.to_string() + " -w '%{time_total}\\n' http://" + host + "/; done";
    const auto got = testing::run_command(
        {"/usr/bin/nsenter",
         "--net=/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(sandbox_ns_.get()),
         "--", "/bin/sh", "-c", script});
    EXPECT_EQ(got.exit_code, 0) << got.err;
    std::vector<double> times;
    std::istringstream in(got.out);
    for (double t; in >> t;) times.push_back(t * 1000);
    EXPECT_EQ(times.size(), 20u) << got.out;
    if (times.empty()) return 0.0;
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const double via_proxy = p50("other.test", kOther);
  const double direct = p50("direct.test", kDirect);
  EXPECT_EQ(proxy_->heads().size(), 20u);
  std::cout << "new HTTP connection, p50 of 20: through the proxy " << via_proxy << " ms, direct "
            << direct << " ms\n";
}

}  // namespace
}  // namespace hutch::net
