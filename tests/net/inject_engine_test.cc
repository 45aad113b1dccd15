// Credential injection end to end in the engine, as root: a sandbox namespace S with the egress
// path, an upstream namespace U whose lo holds TEST-NET addresses with TLS servers on them (their
// certificates from a test CA the engine is told to trust, EngineOptions::upstream_ca_file), and
// curl inside S (nsenter). The sandbox knows only the placeholder; the upstream must see the
// secret, and only where a rule puts it. api.test speaks HTTP/1.1 only, h2.test HTTP/2 only
// (tests/net/h2_upstream.h): curl --http2 reaches each with the protocol its upstream chose.
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
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net/egress_path.h"
#include "net/engine/engine.h"
#include "net/engine/h2_relay.h"
#include "net/inject.h"
#include "net/tls/sandbox_ca.h"
#include "net/tls/server_context.h"
#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/netns.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"
#include "tests/net/engine_world.h"
#include "tests/net/h2_client.h"
#include "tests/net/h2_upstream.h"
#include "tests/net/http1_upstream.h"

namespace hutch::net {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kSecret = "sk-real-secret-4f1c9e";
const Address kApi = *Address::parse("198.51.100.10");
const Address kOther = *Address::parse("198.51.100.20");
const Address kRogue = *Address::parse("198.51.100.30");
const Address kH2 = *Address::parse("198.51.100.40");

using testing::new_netns;

// An HTTPS server on 443 of `address` in U, its certificate from `ca`: keep-alive HTTP/1.1, each
// request answered "ok".
std::unique_ptr<testing::Http1Upstream> tls_upstream(int netns, const Address& address,
                                                     tls::SandboxCa& ca) {
  auto context = tls::make_server_context(ca, {.alpn = {"http/1.1"}, .session_tickets = true});
  if (!context) return nullptr;
  return std::make_unique<testing::Http1Upstream>(netns, address, 443, "ok", std::move(*context));
}

Policy inject_policy() {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* rule : {"api.test", "other.test", "rogue.test", "h2.test"})
    policy.allow.push_back(*parse_rule(rule));
  policy.inject.push_back(testing::openai_key_rule({"api.test", "rogue.test", "h2.test"}));
  return policy;
}

class InjectEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/nsenter", "/usr/bin/curl", "/usr/sbin/ip"})
      HUTCH_REQUIRE(access(tool, X_OK) == 0, std::string(tool) + " is not installed");
    signal(SIGPIPE, SIG_IGN);
    sandbox_ns_ = new_netns();
    upstream_ns_ = new_netns();
    HUTCH_REQUIRE(sandbox_ns_ && upstream_ns_, "unshare(CLONE_NEWNET) failed");
    ASSERT_NO_FATAL_FAILURE(testing::prepare_namespaces(sandbox_ns_.get(), upstream_ns_.get(),
                                                        {kApi, kOther, kRogue, kH2}));

    // The upstreams' CA (the engine trusts it, as it would the host's roots), and a rogue one
    // it does not trust.
    ASSERT_NO_FATAL_FAILURE(testing::make_engine_cas(dir_.path(), cas_));
    auto rogue_ca = tls::SandboxCa::create({.label = "rogue"});
    ASSERT_TRUE(rogue_ca);
    rogue_ca_ = std::move(*rogue_ca);
    bundle_path_ = dir_.path() + "/bundle.pem";
    std::ofstream(bundle_path_) << cas_.upstream->certificate_pem()
                                << cas_.sandbox->certificate_pem();

    api_ = tls_upstream(upstream_ns_.get(), kApi, *cas_.upstream);
    other_ = tls_upstream(upstream_ns_.get(), kOther, *cas_.upstream);
    rogue_ = tls_upstream(upstream_ns_.get(), kRogue, *rogue_ca_);
    h2_ = std::make_unique<testing::H2Upstream>(upstream_ns_.get(), kH2, *cas_.upstream);
    ASSERT_TRUE(api_ && other_ && rogue_) << "an upstream's server context";
    ASSERT_TRUE(api_->ok() && other_->ok() && rogue_->ok() && h2_->ok()) << "an upstream's bind";

    auto key = new_placeholder_key();
    ASSERT_TRUE(key);
    key_ = *key;
    placeholder_ = placeholder_for(key_, "OPENAI_API_KEY");

    EngineOptions options;
    options.resolver = static_resolver({{"api.test", {kApi}},
                                        {"other.test", {kOther}},
                                        {"rogue.test", {kRogue}},
                                        {"h2.test", {kH2}}});
    options.upstream_netns_fd = upstream_ns_.get();
    options.upstream_ca_file = cas_.upstream_path;
    options.secrets = testing::secrets_of({{"OPENAI_API_KEY", std::string(kSecret)}});
    engine_ = testing::make_logging_engine(std::move(options), mutex_, logs_);
    ASSERT_NO_FATAL_FAILURE(testing::attach_sandbox(*engine_, sandbox_ns_.get(), inject_policy(),
                                                    {}, SandboxInjection{cas_.sandbox, key_}));
  }

  void TearDown() override {
    engine_.reset();
    api_.reset();
    other_.reset();
    rogue_.reset();
    h2_.reset();
  }

  // curl inside S, with `host` resolved to `address` (the engine checks it resolves so).
  testing::CommandResult curl(const std::vector<std::string>& urls, const std::string& host,
                              const Address& address, const std::string& cacert,
                              std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        "/usr/bin/nsenter",
        "--net=/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(sandbox_ns_.get()),
        "--",
        "/usr/bin/curl",
        "-sS",
        "--max-time",
        "10",
        "--http1.1",
        "--cacert",
        cacert,
        "--resolve",
        host + ":443:" + address.to_string(),
        "--resolve",
        host + ":80:" + address.to_string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), urls.begin(), urls.end());
    return testing::run_command(argv);
  }

  // `work` on a thread inside S: an H2Client made there connects through the engine.
  void in_sandbox(const std::function<void()>& work) {
    std::thread([&] {
      if (setns(sandbox_ns_.get(), CLONE_NEWNET) == 0)
        work();
      else
        ADD_FAILURE() << "setns into the sandbox namespace";
    }).join();
  }

  // The JSON body of the relay's 403 in curl's output with `-w %{http_code}` appended; not an
  // object when the status was another.
  static nlohmann::json forbidden_body(const std::string& out) {
    if (!out.ends_with("403")) return nullptr;
    return nlohmann::json::parse(out.substr(0, out.size() - 3), nullptr, false);
  }

  std::optional<ConnectionLog> log_where(const std::function<bool(const ConnectionLog&)>& match) {
    return testing::last_log_where(mutex_, logs_, match);
  }

  bool any_log_holds_secret() {
    std::lock_guard lock(mutex_);
    for (const ConnectionLog& log : logs_) {
      if (log.reason.find(kSecret) != std::string::npos ||
          log.rule.find(kSecret) != std::string::npos)
        return true;
    }
    return false;
  }

  testing::TempDir dir_;
  UniqueFd sandbox_ns_, upstream_ns_;
  testing::EngineCas cas_;
  std::unique_ptr<tls::SandboxCa> rogue_ca_;
  std::string bundle_path_;
  std::unique_ptr<testing::Http1Upstream> api_, other_, rogue_;
  std::unique_ptr<testing::H2Upstream> h2_;
  PlaceholderKey key_{};
  std::string placeholder_;
  std::unique_ptr<Engine> engine_;
  std::mutex mutex_;
  std::vector<ConnectionLog> logs_;
};

TEST_F(InjectEngine,
       UpstreamGetsTheSecretOnEveryKeptAliveRequestWhileTheSandboxSendsThePlaceholder) {
  const auto got = curl({"https://api.test/v1/chat", "https://api.test/v1/models"}, "api.test",
                        kApi, cas_.sandbox_path, {"-H", "Authorization: Bearer " + placeholder_});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "okok");
  EXPECT_EQ(got.out.find(kSecret), std::string::npos);
  const auto heads = api_->heads();
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_EQ(api_->accepted(), 1) << "both requests on one terminated connection";
  for (const std::string& head : heads) {
    EXPECT_NE(head.find("\r\nAuthorization: Bearer " + std::string(kSecret) + "\r\n"),
              std::string::npos)
        << head;
    EXPECT_EQ(head.find(placeholder_), std::string::npos) << head;
    EXPECT_EQ(head.find("hutch-placeholder-"), std::string::npos) << head;
  }
  auto log =
      log_where([](const ConnectionLog& l) { return l.name == "api.test" && l.port == 443; });
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->allowed);
  EXPECT_NE(log->reason.find("injected Authorization"), std::string::npos) << log->reason;
  EXPECT_FALSE(any_log_holds_secret());
}

// A sandbox attached with a CA but no inject rule has no upstream TLS client (loading the host's
// trust store costs ~20 ms, which `hutch run --net` would pay on every run): its TLS passes
// through. The first policy with inject rules brings the client, and the next connection to a
// rule's host is terminated with the secret injected.
TEST_F(InjectEngine, InjectRulesAddedLaterToASandboxAttachedWithoutThemAreApplied) {
  engine_->detach("sb");
  Policy without = inject_policy();
  without.inject.clear();
  ASSERT_NO_FATAL_FAILURE(testing::attach_sandbox(*engine_, sandbox_ns_.get(), without, {},
                                                  SandboxInjection{cas_.sandbox, key_}));
  const auto passed = curl({"https://api.test/v1/chat"}, "api.test", kApi, cas_.upstream_path,
                           {"-H", "Authorization: Bearer " + placeholder_});
  ASSERT_EQ(passed.exit_code, 0) << passed.err << " (the upstream's own certificate)";
  ASSERT_EQ(api_->heads().size(), 1u);
  EXPECT_NE(api_->heads()[0].find(placeholder_), std::string::npos) << "not terminated";

  ASSERT_TRUE(engine_->set_policy("sb", inject_policy()));
  const auto got = curl({"https://api.test/v1/chat"}, "api.test", kApi, cas_.sandbox_path,
                        {"-H", "Authorization: Bearer " + placeholder_});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok");
  ASSERT_EQ(api_->heads().size(), 2u);
  EXPECT_NE(api_->heads()[1].find("\r\nAuthorization: Bearer " + std::string(kSecret) + "\r\n"),
            std::string::npos)
      << api_->heads()[1];
}

// The engine's upstream leg resumes its TLS session on the next connection to the same host
// (OpenSSL's SSL_session_reused, logged), each ticket once, and still injects every time.
TEST_F(InjectEngine, NextConnectionsToATerminatedHostResumeTheUpstreamSession) {
  for (int i = 0; i < 3; ++i) {
    const auto got = curl({"https://api.test/v1/n" + std::to_string(i)}, "api.test", kApi,
                          cas_.sandbox_path, {"-H", "Authorization: Bearer " + placeholder_});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_EQ(got.out, "ok");
  }
  EXPECT_EQ(api_->accepted(), 3);
  const auto heads = api_->heads();
  ASSERT_EQ(heads.size(), 3u);
  for (const std::string& head : heads)
    EXPECT_NE(head.find("Authorization: Bearer " + std::string(kSecret)), std::string::npos);
  // Logged as each connection ends, which may trail curl's exit: ordered by start.
  std::vector<ConnectionLog> logs;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        std::lock_guard lock(mutex_);
        logs.clear();
        for (const ConnectionLog& log : logs_)
          if (log.name == "api.test" && log.port == 443) logs.push_back(log);
        return logs.size() == 3;
      },
      5s, "three connection logs"));
  std::sort(logs.begin(), logs.end(),
            [](const auto& a, const auto& b) { return a.started < b.started; });
  std::vector<std::string> reasons;
  for (const ConnectionLog& log : logs) reasons.push_back(log.reason);
  ASSERT_EQ(reasons.size(), 3u);
  const std::string resumed = "; upstream session resumed";
  EXPECT_EQ(reasons[0].find(resumed), std::string::npos) << "the first is a full handshake";
  EXPECT_NE(reasons[1].find(resumed), std::string::npos) << reasons[1];
  EXPECT_NE(reasons[2].find(resumed), std::string::npos)
      << "a ticket of the second: " << reasons[2];
  // curl offers HTTP/1.1 alone: the sandbox gets it whatever the upstream says, so its
  // handshake never waits for the upstream's, resumed or not.
  for (const std::string& reason : reasons)
    EXPECT_NE(reason.find("; handshakes in parallel"), std::string::npos) << reason;
}

// A client offering h2 is offered what the upstream chose. The first connection waits for that
// choice; the next ones take it from the resumed session and shake hands with both at once.
TEST_F(InjectEngine, H2ClientsHandshakeInParallelOnceASessionNamesTheUpstreamsChoice) {
  for (int i = 0; i < 3; ++i) {
    const auto got =
        curl({"https://h2.test/v1/n" + std::to_string(i)}, "h2.test", kH2, cas_.sandbox_path,
             {"--http2", "-H", "Authorization: Bearer " + placeholder_, "-w", " %{http_version}"});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_EQ(got.out, "ok 2");
  }
  std::vector<std::string> reasons;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        std::lock_guard lock(mutex_);
        std::vector<ConnectionLog> logs;
        for (const ConnectionLog& log : logs_)
          if (log.name == "h2.test") logs.push_back(log);
        std::sort(logs.begin(), logs.end(),
                  [](const auto& a, const auto& b) { return a.started < b.started; });
        reasons.clear();
        for (const ConnectionLog& log : logs) reasons.push_back(log.reason);
        return reasons.size() == 3;
      },
      5s, "three connection logs"));
  const std::string parallel = "; handshakes in parallel";
  EXPECT_EQ(reasons[0].find(parallel), std::string::npos) << reasons[0];
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_NE(reasons[i].find("; upstream session resumed"), std::string::npos) << reasons[i];
    EXPECT_NE(reasons[i].find(parallel), std::string::npos) << reasons[i];
    EXPECT_NE(reasons[i].find("; h2"), std::string::npos) << reasons[i];
  }
  const auto requests = h2_->requests();
  ASSERT_EQ(requests.size(), 3u);
  for (const auto& request : requests)
    EXPECT_EQ(request.field("authorization"), "Bearer " + std::string(kSecret));
}

// The upstream chooses otherwise than its last session did (here a server replaced by an
// HTTP/1.1-only one): the sandbox, already promised h2, is reset before a byte is relayed, and
// its next connection waits for the upstream's choice and works.
TEST_F(InjectEngine, UpstreamChoosingAnotherProtocolThanItsSessionResetsThatConnectionOnly) {
  auto get = [&] {
    return curl(
        {"https://h2.test/v1/chat"}, "h2.test", kH2, cas_.sandbox_path,
        {"--http2", "-H", "Authorization: Bearer " + placeholder_, "-w", " %{http_version}"});
  };
  const auto first = get();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, "ok 2");
  ASSERT_TRUE(testing::wait_until(
      [&] { return log_where([](const ConnectionLog& log) { return log.name == "h2.test"; }); }, 5s,
      "the first connection's log"));
  h2_.reset();
  auto http11 = tls_upstream(upstream_ns_.get(), kH2, *cas_.upstream);
  ASSERT_TRUE(http11 && http11->ok()) << "an HTTP/1.1 server on h2.test's address";

  const auto promised_h2 = get();
  EXPECT_NE(promised_h2.exit_code, 0) << promised_h2.out;
  std::optional<ConnectionLog> reset;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        reset = log_where([](const ConnectionLog& log) {
          return log.reason.find("the upstream chose HTTP/1.1") != std::string::npos;
        });
        return reset.has_value();
      },
      5s, "the reset connection's log"));
  EXPECT_NE(reset->reason.find("; handshakes in parallel"), std::string::npos) << reset->reason;
  EXPECT_EQ(reset->bytes_down, 0u) << "nothing relayed to the sandbox: " << reset->reason;
  EXPECT_TRUE(http11->heads().empty()) << "nothing relayed upstream";

  const auto next = get();
  ASSERT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(next.out, "ok 1.1");
  const auto heads = http11->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find("Authorization: Bearer " + std::string(kSecret)), std::string::npos);
}

TEST_F(InjectEngine, SandboxCaServesTheRuleHostAndOnlyItsOwnCertVerifiesWithoutIt) {
  // With the upstreams' CA alone curl refuses api.test: the engine shows the sandbox CA's leaf.
  const auto refused = curl({"https://api.test/v1/x"}, "api.test", kApi, cas_.upstream_path);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_TRUE(api_->heads().empty());
}

TEST_F(InjectEngine, HostWithoutRulesPassesThroughWithTheUpstreamsOwnCertificate) {
  // Verified by the upstreams' CA alone: the engine did not terminate other.test.
  const auto got = curl({"https://other.test/v1/x"}, "other.test", kOther, cas_.upstream_path,
                        {"-H", "Authorization: Bearer " + placeholder_});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok");
  const auto heads = other_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(heads[0].find(kSecret), std::string::npos) << "never injected without a rule";
  // And with only the sandbox CA, other.test does not verify: nothing minted a leaf for it.
  const auto refused = curl({"https://other.test/"}, "other.test", kOther, cas_.sandbox_path);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_EQ(cas_.sandbox->cached_leaves(), 0u);
}

TEST_F(InjectEngine, PlaceholderWhereNoRulePutsItIsRefusedWith403AndLogged) {
  // /admin is outside the rule's path prefix: the placeholder would go there as it is.
  const auto got = curl({"https://api.test/admin"}, "api.test", kApi, cas_.sandbox_path,
                        {"-H", "X-Key: " + placeholder_});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  auto body = nlohmann::json::parse(got.out, nullptr, false);
  ASSERT_TRUE(body.is_object()) << got.out;
  EXPECT_EQ(body["error"], "network_denied");
  EXPECT_EQ(body["rule"], "inject");
  EXPECT_NE(body["reason"].get<std::string>().find("OPENAI_API_KEY"), std::string::npos);
  EXPECT_TRUE(api_->heads().empty()) << "nothing reached the upstream";
  auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject"; });
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  EXPECT_EQ(log->reason.find(placeholder_), std::string::npos);
  EXPECT_FALSE(any_log_holds_secret());
}

// Secrets are set in headers only: an API that takes its key in the body would get the
// placeholder, so the sandbox gets the reason instead, a 403 before anything goes upstream when
// the placeholder came with the head (curl sends a small body with it).
TEST_F(InjectEngine, PlaceholderInARequestBodyIsRefusedWith403BeforeTheHeadGoesUpstream) {
  // Outside the rule (the head as it came), and covered by it (the head rewritten).
  for (const std::string path : {"/admin", "/v1/chat"}) {
    std::vector<std::string> options = {"-H",
                                        "Content-Type: application/json",
                                        "--data-binary",
                                        "{\"api_key\":\"" + placeholder_ + "\"}",
                                        "-w",
                                        "%{http_code}"};
    if (path == "/v1/chat") {
      options.push_back("-H");
      options.push_back("Authorization: Bearer " + placeholder_);
    }
    const auto got =
        curl({"https://api.test" + path}, "api.test", kApi, cas_.sandbox_path, options);
    ASSERT_EQ(got.exit_code, 0) << path << ": " << got.err;
    const auto body = forbidden_body(got.out);
    ASSERT_TRUE(body.is_object()) << path << ": " << got.out;
    EXPECT_EQ(body["rule"], "inject");
    EXPECT_NE(body["reason"].get<std::string>().find(
                  "the placeholder of secret OPENAI_API_KEY in a request body"),
              std::string::npos)
        << path << ": " << got.out;
  }
  EXPECT_TRUE(api_->heads().empty()) << "nothing reached the upstream";
  auto log = log_where([](const ConnectionLog& l) {
    return l.rule == "inject" && !l.allowed && l.reason.find("in a request body") != l.reason.npos;
  });
  ASSERT_TRUE(log);
  EXPECT_EQ(log->reason.find(placeholder_), std::string::npos);
  EXPECT_FALSE(any_log_holds_secret());
}

// Deep in a large body the head and the first bytes are upstream already: the request is cut
// (both legs reset) before the bytes holding the placeholder go, and the reason is logged.
TEST_F(InjectEngine, PlaceholderDeepInALargeBodyCutsTheRequestBeforeItGoes) {
  const std::string path = dir_.path() + "/body.json";
  std::ofstream(path) << "{\"pad\":\"" << std::string(1 << 20, 'a') << "\",\"api_key\":\""
                      << placeholder_ << "\"}";
  const auto got =
      curl({"https://api.test/v1/chat"}, "api.test", kApi, cas_.sandbox_path,
           {"-H", "Authorization: Bearer " + placeholder_, "--data-binary", "@" + path});
  EXPECT_NE(got.exit_code, 0) << got.out;
  EXPECT_EQ(got.out.find("ok"), std::string::npos) << "the upstream answered: " << got.out;
  std::optional<ConnectionLog> log;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        log = log_where([](const ConnectionLog& l) { return l.rule == "inject" && !l.allowed; });
        return log.has_value();
      },
      5s, "the refusal's log"));
  EXPECT_NE(log->reason.find("the placeholder of secret OPENAI_API_KEY in a request body"),
            std::string::npos)
      << log->reason;
  EXPECT_GT(log->bytes_up, 1u << 20) << "read up to the placeholder";
}

TEST_F(InjectEngine, PlaceholderInAnotherHeaderOfACoveredRequestIsRefused) {
  const auto got = curl({"https://api.test/v1/chat"}, "api.test", kApi, cas_.sandbox_path,
                        {"-H", "X-Forward: " + placeholder_});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_NE(got.out.find("\"rule\":\"inject\""), std::string::npos) << got.out;
  EXPECT_TRUE(api_->heads().empty());
}

TEST_F(InjectEngine, PlaceholderInPlainHttpToAnotherHostIsRefusedAndLogged) {
  const auto got = curl({"http://other.test/collect?k=" + placeholder_}, "other.test", kOther,
                        cas_.sandbox_path);
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_NE(got.out.find("\"rule\":\"inject\""), std::string::npos) << got.out;
  EXPECT_NE(got.out.find("plain HTTP"), std::string::npos) << got.out;
  auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject"; });
  ASSERT_TRUE(log);
  EXPECT_EQ(log->protocol, "http");
  EXPECT_FALSE(log->allowed);
}

TEST_F(InjectEngine, UpstreamThatDoesNotVerifyIsResetAndLogged) {
  // rogue.test has a rule, but its certificate is from a CA the engine does not trust.
  const auto got = curl({"https://rogue.test/v1/x"}, "rogue.test", kRogue, cas_.sandbox_path,
                        {"-H", "Authorization: Bearer " + placeholder_});
  EXPECT_NE(got.exit_code, 0) << got.out;
  EXPECT_TRUE(rogue_->heads().empty());
  auto log = log_where([](const ConnectionLog& l) {
    return l.name == "rogue.test" && l.reason.find("TLS handshake upstream") != std::string::npos;
  });
  EXPECT_TRUE(log) << "the failed upstream verification is logged";
}

// Chunked uploads, framing and upgrades on terminated connections:
// tests/net/http1_exchange_test.cc.
TEST_F(InjectEngine, HostMismatchOnATerminatedConnectionIsRefused) {
  const auto fronted = curl({"https://api.test/v1/x"}, "api.test", kApi, cas_.sandbox_path,
                            {"-H", "Host: other.test"});
  ASSERT_EQ(fronted.exit_code, 0) << fronted.err;
  EXPECT_NE(fronted.out.find("is not the TLS server name"), std::string::npos) << fronted.out;
  EXPECT_TRUE(api_->heads().empty());
}

// HTTP/2 on terminated connections: curl --http2 offers h2, the engine offers it upstream, and
// h2.test's choice of h2 is what the sandbox is offered in turn (Relay::terminate_tls).
TEST_F(InjectEngine, H2ConcurrentStreamsOnOneConnectionEachGetTheSecretInjected) {
  const auto got = curl({"https://h2.test/v1/pair/a", "https://h2.test/v1/pair/b"}, "h2.test", kH2,
                        cas_.sandbox_path,
                        {"--http2", "--parallel", "-H", "Authorization: Bearer " + placeholder_,
                         "-w", " %{http_version}\n"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  // Both bodies and both -w lines, interleaved as the transfers end: each stream was answered
  // only once the other was open (not "alone"), and both in HTTP/2.
  std::string out = got.out;
  std::ranges::sort(out);
  EXPECT_EQ(out, "\n\n  22aaddeeiipprr") << got.out;
  EXPECT_EQ(h2_->accepted(), 1) << "both streams on one upstream connection";
  const auto requests = h2_->requests();
  ASSERT_EQ(requests.size(), 2u);
  for (const auto& request : requests) {
    EXPECT_EQ(request.field("authorization"), "Bearer " + std::string(kSecret));
    for (const auto& [name, value] : request.fields)
      EXPECT_EQ(value.find("hutch-placeholder-"), std::string::npos) << name;
  }
  auto log = log_where([](const ConnectionLog& l) { return l.name == "h2.test" && l.allowed; });
  ASSERT_TRUE(log);
  EXPECT_NE(log->reason.find("; h2"), std::string::npos) << log->reason;
  EXPECT_NE(log->reason.find("injected Authorization"), std::string::npos) << log->reason;
  EXPECT_FALSE(any_log_holds_secret());
}

TEST_F(InjectEngine, H2StreamWithAnotherAuthorityIsRefusedWhileTheOtherStreamGoesOn) {
  // Two URL groups on one connection (--next keeps it): the second sends Host: other.test, which
  // curl turns into that stream's :authority.
  const auto got = curl(
      {"https://h2.test/v1/b"}, "h2.test", kH2, cas_.sandbox_path,
      {"--http2", "--parallel", "https://h2.test/v1/a", "--next", "--http2", "--cacert",
       cas_.sandbox_path, "--resolve", "h2.test:443:" + kH2.to_string(), "-H", "Host: other.test"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_NE(got.out.find("ok"), std::string::npos) << got.out;
  EXPECT_NE(got.out.find("is not the TLS server name h2.test"), std::string::npos) << got.out;
  EXPECT_NE(got.out.find("\"rule\":\"inject\""), std::string::npos) << got.out;
  const auto requests = h2_->requests();
  ASSERT_EQ(requests.size(), 1u) << "only the stream naming h2.test went upstream";
  EXPECT_EQ(requests[0].field(":path"), "/v1/a");
  EXPECT_EQ(h2_->accepted(), 1);
  auto refused = log_where([](const ConnectionLog& l) {
    return l.name == "h2.test" && !l.allowed && l.rule == "inject";
  });
  ASSERT_TRUE(refused) << "the refused stream has a log line of its own";
  EXPECT_NE(refused->reason.find(":authority other.test"), std::string::npos) << refused->reason;
  auto connection =
      log_where([](const ConnectionLog& l) { return l.name == "h2.test" && l.allowed; });
  EXPECT_TRUE(connection) << "and the connection goes on, allowed";
}

TEST_F(InjectEngine, H2PlaceholderInAnotherHeaderIsRefusedWith403NamingTheSecret) {
  const auto got = curl({"https://h2.test/v1/chat"}, "h2.test", kH2, cas_.sandbox_path,
                        {"--http2", "-H", "X-Forward: " + placeholder_, "-w", "%{http_code}"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const auto body = forbidden_body(got.out);
  ASSERT_TRUE(body.is_object()) << got.out;
  EXPECT_EQ(body["rule"], "inject");
  EXPECT_NE(body["reason"].get<std::string>().find("OPENAI_API_KEY"), std::string::npos);
  EXPECT_TRUE(h2_->requests().empty()) << "nothing reached the upstream";
  auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject" && !l.allowed; });
  ASSERT_TRUE(log);
  EXPECT_NE(log->reason.find("sent to h2.test GET where no inject rule"), std::string::npos)
      << log->reason;
  EXPECT_EQ(log->reason.find(placeholder_), std::string::npos);
  EXPECT_FALSE(any_log_holds_secret());
}

TEST_F(InjectEngine, H2PlaceholderInARequestBodyIsRefusedOnItsStream) {
  const auto got = curl({"https://h2.test/v1/echo"}, "h2.test", kH2, cas_.sandbox_path,
                        {"--http2", "-H", "Authorization: Bearer " + placeholder_, "--data-binary",
                         "{\"api_key\":\"" + placeholder_ + "\"}", "-w", "%{http_code}"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const auto body = forbidden_body(got.out);
  ASSERT_TRUE(body.is_object()) << got.out;
  EXPECT_EQ(body["rule"], "inject");
  EXPECT_NE(body["reason"].get<std::string>().find("in a request body"), std::string::npos);
  for (const auto& request : h2_->requests())
    EXPECT_EQ(request.body_size, 0u) << "no body byte reached the upstream";
  auto log = log_where([](const ConnectionLog& l) { return l.rule == "inject" && !l.allowed; });
  ASSERT_TRUE(log);
  EXPECT_EQ(log->reason.find(placeholder_), std::string::npos);
  EXPECT_FALSE(any_log_holds_secret());
}

TEST_F(InjectEngine, H2LargeBodiesPastTheFlowControlWindowsAreRelayedByteExact) {
  // 8 MiB each way: 32 times the relay's stream window, 8 times its connection window.
  std::string sent(8 << 20, '\0');
  std::mt19937_64 random(12);
  for (char& c : sent) c = static_cast<char>(random());
  const std::string in = dir_.path() + "/upload.bin", out = dir_.path() + "/download.bin";
  std::ofstream(in, std::ios::binary) << sent;
  const auto got =
      curl({"https://h2.test/v1/echo"}, "h2.test", kH2, cas_.sandbox_path,
           {"--http2", "--max-time", "60", "-H", "Authorization: Bearer " + placeholder_,
            "--data-binary", "@" + in, "-o", out, "-w", "%{http_code} %{http_version}"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "200 2");
  std::ifstream file(out, std::ios::binary);
  const std::string received((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(received.size(), sent.size());
  EXPECT_TRUE(received == sent) << "the echoed body differs";
  const auto requests = h2_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].body_size, sent.size());
  EXPECT_EQ(requests[0].field("authorization"), "Bearer " + std::string(kSecret));
}

TEST_F(InjectEngine, H2ResponseTrailersReachTheSandbox) {
  const std::string headers = dir_.path() + "/headers.txt";
  const auto got = curl({"https://h2.test/v1/trailers"}, "h2.test", kH2, cas_.sandbox_path,
                        {"--http2", "-D", headers});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok");
  std::ifstream file(headers);
  const std::string dumped((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
  EXPECT_NE(dumped.find("x-checksum: 4f1c"), std::string::npos) << dumped;
  EXPECT_NE(dumped.find("grpc-status: 0"), std::string::npos) << dumped;
}

TEST_F(InjectEngine, H2CapableClientToAnHttp11OnlyUpstreamSpeaksHttp11OnBothLegs) {
  const auto got =
      curl({"https://api.test/v1/chat"}, "api.test", kApi, cas_.sandbox_path,
           {"--http2", "-H", "Authorization: Bearer " + placeholder_, "-w", " %{http_version}"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "ok 1.1");
  const auto heads = api_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find("\r\nAuthorization: Bearer " + std::string(kSecret) + "\r\n"),
            std::string::npos)
      << heads[0];
}

// What curl cannot send or show, with the scripted client (tests/net/h2_client.h).
TEST_F(InjectEngine, H2RequestTrailersAreForwardedAndAPlaceholderInOneIsRefused) {
  in_sandbox([&] {
    testing::H2Client client(kH2, "h2.test", cas_.sandbox_path);
    ASSERT_TRUE(client.ok());
    const int32_t kept =
        client.request("POST", "/v1/echo", {{"authorization", "Bearer " + placeholder_}},
                       "uploaded", {{"x-request-trailer", "yes"}});
    const int32_t leaked =
        client.request("POST", "/v1/echo/leak", {}, "uploaded", {{"x-leak", placeholder_}});
    ASSERT_TRUE(client.run_until(
        [&] { return client.streams[kept].closed && client.streams[leaked].closed; }));
    EXPECT_EQ(client.streams[kept].status, "200");
    EXPECT_EQ(client.streams[kept].body, "uploaded");
    EXPECT_EQ(client.streams[leaked].status, "403");
    EXPECT_NE(client.streams[leaked].body.find("OPENAI_API_KEY"), std::string::npos)
        << client.streams[leaked].body;
    EXPECT_NE(client.streams[leaked].body.find("in a trailer"), std::string::npos);
  });
  const auto requests = h2_->requests();
  ASSERT_EQ(requests.size(), 1u) << "the stream with the placeholder never ended upstream";
  EXPECT_EQ(requests[0].field("x-request-trailer"), "yes");
  EXPECT_EQ(requests[0].field("authorization"), "Bearer " + std::string(kSecret));
  ASSERT_TRUE(testing::wait_until([&] { return !h2_->resets().empty(); }, 5s, "the reset"));
  EXPECT_EQ(h2_->resets(), std::vector<uint32_t>{0x8}) << "CANCEL upstream for the refused stream";
  EXPECT_FALSE(any_log_holds_secret());
}

TEST_F(InjectEngine, H2StreamResetsCrossTheRelayBothWaysWithTheirCodes) {
  in_sandbox([&] {
    testing::H2Client client(kH2, "h2.test", cas_.sandbox_path);
    ASSERT_TRUE(client.ok());
    const int32_t refused = client.request("GET", "/v1/reset");
    const int32_t held = client.request("GET", "/v1/pair/held");
    // The upstream resets /v1/reset: the sandbox's stream is reset with the same code.
    ASSERT_TRUE(client.run_until(
        [&] { return client.streams[refused].closed && h2_->requests().size() == 2; }));
    EXPECT_EQ(client.streams[refused].code, 0xbu) << "ENHANCE_YOUR_CALM";
    EXPECT_EQ(client.max_concurrent_streams(), kMaxConcurrentStreams);
    // The sandbox resets the held stream: the upstream's is reset too.
    client.reset(held, 0x8);
    EXPECT_TRUE(client.run_until([&] { return !h2_->resets().empty(); }));
  });
  EXPECT_EQ(h2_->resets(), std::vector<uint32_t>{0x8});
}

TEST_F(InjectEngine, H2UpstreamGoawayReachesTheSandboxAfterItsLastStream) {
  in_sandbox([&] {
    testing::H2Client client(kH2, "h2.test", cas_.sandbox_path);
    ASSERT_TRUE(client.ok());
    const int32_t last = client.request("GET", "/v1/goaway");
    ASSERT_TRUE(client.run_until([&] { return client.streams[last].closed && client.goaway; }));
    EXPECT_EQ(client.streams[last].status, "200");
    EXPECT_EQ(client.streams[last].body, "ok");
  });
  auto log = log_where([](const ConnectionLog& l) { return l.name == "h2.test" && l.allowed; });
  ASSERT_TRUE(log) << "the connection ended when the sandbox's session was done";
}

// Figures for docs/network.md, printed: the cost of termination and injection per request (100
// kept-alive requests in one curl) and per connection (curl's time to the TLS handshake's end),
// against the passthrough of a host without rules.
TEST_F(InjectEngine, MeasuresTerminationCostAgainstPassthrough) {
  constexpr int kRequests = 100;
  auto measure = [&](const std::string& host, const Address& address, const std::string& cacert) {
    std::vector<std::string> urls;
    for (int i = 0; i < kRequests; ++i)
      urls.push_back("https://" + host + "/v1/n" + std::to_string(i));
    const auto many = curl(urls, host, address, cacert,
                           {"-H", "Authorization: Bearer " + placeholder_, "-o", "/dev/null"});
    EXPECT_EQ(many.exit_code, 0) << many.err;
    const auto one = curl({"https://" + host + "/v1/x"}, host, address, cacert,
                          {"-o", "/dev/null", "-w", "%{time_appconnect}"});
    EXPECT_EQ(one.exit_code, 0) << one.err;
    return std::pair{many.elapsed, std::stod(one.out.empty() ? "0" : one.out) * 1000};
  };
  const auto [terminated, terminated_handshake] = measure("api.test", kApi, cas_.sandbox_path);
  const auto [passthrough, passthrough_handshake] =
      measure("other.test", kOther, cas_.upstream_path);
  EXPECT_EQ(api_->heads().size(), static_cast<size_t>(kRequests + 1));
  std::cout << "terminated+injected: " << terminated.count() << " ms for " << kRequests
            << " kept-alive requests, TLS connect " << terminated_handshake << " ms\n"
            << "passthrough:         " << passthrough.count() << " ms for " << kRequests
            << " kept-alive requests, TLS connect " << passthrough_handshake << " ms\n";
}

}  // namespace
}  // namespace hutch::net
