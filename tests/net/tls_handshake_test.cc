// Real TLS handshakes over a socketpair (no network): a client that trusts only the sandbox CA
// verifies the engine's server context; a client with the host's roots does not; the upstream
// context verifies against a test CA and checks the name.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/tls/client_context.h"
#include "net/tls/sandbox_ca.h"
#include "net/tls/server_context.h"
#include "runtime/base/unique_fd.h"
#include "tests/common/temp_dir.h"

namespace hutch::net::tls {
namespace {

struct Outcome {
  bool client_ok = false;
  long verify_result = -1;
  std::string alpn;
  std::string peer_name;  // the SAN the client saw
  bool server_ok = false;
  std::string echoed;    // what the client read back after the handshake
  bool resumed = false;  // the client's handshake resumed a session
};

// Server side in a thread: accept, echo four bytes. Client side here with `client`, already
// set up for its host. The client's socket closes before the join, so a failed handshake on
// one side ends the other's too. `configure` sets the server's SSL up before its handshake.
Outcome handshake(SSL_CTX* server_context, SslPtr client,
                  const std::function<void(SSL*)>& configure = {}) {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << strerror(errno);
  UniqueFd server_fd(fds[0]), client_fd(fds[1]);
  Outcome outcome;
  std::thread server([&] {
    SslPtr ssl(SSL_new(server_context));
    if (configure) configure(ssl.get());
    SSL_set_fd(ssl.get(), server_fd.get());
    if (SSL_accept(ssl.get()) == 1) {
      outcome.server_ok = true;
      char buffer[4];
      if (SSL_read(ssl.get(), buffer, sizeof buffer) == 4) SSL_write(ssl.get(), buffer, 4);
      SSL_shutdown(ssl.get());
    }
    ERR_clear_error();
    server_fd.reset();
  });
  SSL_set_fd(client.get(), client_fd.get());
  if (SSL_connect(client.get()) == 1) {
    outcome.client_ok = true;
    outcome.resumed = SSL_session_reused(client.get()) == 1;
    const unsigned char* protocol = nullptr;
    unsigned size = 0;
    SSL_get0_alpn_selected(client.get(), &protocol, &size);
    outcome.alpn.assign(reinterpret_cast<const char*>(protocol), size);
    X509Ptr peer(SSL_get1_peer_certificate(client.get()));
    if (peer) {
      auto* names = static_cast<GENERAL_NAMES*>(
          X509_get_ext_d2i(peer.get(), NID_subject_alt_name, nullptr, nullptr));
      if (names != nullptr && sk_GENERAL_NAME_num(names) > 0) {
        const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, 0);
        if (name->type == GEN_DNS) {
          outcome.peer_name = reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.dNSName));
        }
      }
      GENERAL_NAMES_free(names);
    }
    char buffer[4];
    if (SSL_write(client.get(), "ping", 4) == 4 && SSL_read(client.get(), buffer, 4) == 4) {
      outcome.echoed.assign(buffer, 4);
    }
  }
  outcome.verify_result = SSL_get_verify_result(client.get());
  ERR_clear_error();
  client_fd.reset();
  server.join();
  return outcome;
}

class TlsHandshake : public ::testing::Test {
 protected:
  // A side that fails closes its socket while the other may still write (an alert, a
  // close_notify): that must be EPIPE, not a SIGPIPE that ends the test binary. The engine's
  // own sockets are Asio's, which sends with MSG_NOSIGNAL.
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }

  void SetUp() override {
    auto ca = SandboxCa::create({.label = "test"});
    ASSERT_TRUE(ca) << ca.error().message();
    ca_ = std::move(*ca);
    auto server = make_server_context(*ca_);
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    ca_file_ = dir_.path() + "/ca.pem";
    std::ofstream(ca_file_) << ca_->certificate_pem();
  }

  SslCtxPtr client_context(UpstreamOptions options) {
    auto context = make_upstream_context(options);
    EXPECT_TRUE(context) << context.error().message();
    return context ? std::move(*context) : nullptr;
  }

  SslPtr client_for(SSL_CTX* context, std::string_view host) {
    auto ssl = make_upstream_ssl(context, host);
    EXPECT_TRUE(ssl) << ssl.error().message();
    return ssl ? std::move(*ssl) : nullptr;
  }

  testing::TempDir dir_;
  std::unique_ptr<SandboxCa> ca_;
  SslCtxPtr server_;
  std::string ca_file_;
};

TEST_F(TlsHandshake, ClientTrustingTheSandboxCaVerifies) {
  auto context = client_context({.ca_file = ca_file_});
  const Outcome outcome = handshake(server_.get(), client_for(context.get(), "api.example.com"));
  EXPECT_TRUE(outcome.client_ok);
  EXPECT_TRUE(outcome.server_ok);
  EXPECT_EQ(outcome.verify_result, X509_V_OK);
  EXPECT_EQ(outcome.alpn, "h2");
  EXPECT_EQ(outcome.peer_name, "api.example.com");
  EXPECT_EQ(outcome.echoed, "ping");
  // The leaf came from the CA's cache, minted for the SNI.
  EXPECT_EQ(ca_->cached_leaves(), 1u);
}

TEST_F(TlsHandshake, ClientWithTheNormalRootsOnlyFails) {
  auto context = client_context({});
  const Outcome outcome = handshake(server_.get(), client_for(context.get(), "api.example.com"));
  EXPECT_FALSE(outcome.client_ok);
  EXPECT_FALSE(outcome.server_ok);
  EXPECT_EQ(outcome.verify_result, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
}

TEST_F(TlsHandshake, AlpnFollowsWhatTheClientOffers) {
  auto http1 = client_context({.ca_file = ca_file_, .alpn = {"http/1.1"}});
  EXPECT_EQ(handshake(server_.get(), client_for(http1.get(), "a.example.com")).alpn, "http/1.1");
  // Nothing in common: no ALPN, the handshake still completes (the client's default applies).
  auto other = client_context({.ca_file = ca_file_, .alpn = {"spdy/3"}});
  const Outcome outcome = handshake(server_.get(), client_for(other.get(), "a.example.com"));
  EXPECT_TRUE(outcome.client_ok);
  EXPECT_EQ(outcome.alpn, "");
  // A server told to offer HTTP/1.1 only never picks h2.
  auto server = make_server_context(*ca_, {.alpn = {"http/1.1"}});
  ASSERT_TRUE(server);
  auto both = client_context({.ca_file = ca_file_});
  EXPECT_EQ(handshake(server->get(), client_for(both.get(), "a.example.com")).alpn, "http/1.1");
}

// The relay offers the sandbox only what the upstream chose: one connection narrowed, the
// context's other connections untouched.
TEST_F(TlsHandshake, OfferAlpnNarrowsOneConnectionOnly) {
  auto both = client_context({.ca_file = ca_file_});
  auto narrow_to = [](std::vector<std::string> protocols) {
    return [protocols](SSL* ssl) { ASSERT_TRUE(offer_alpn(ssl, protocols)); };
  };
  EXPECT_EQ(
      handshake(server_.get(), client_for(both.get(), "a.example.com"), narrow_to({"http/1.1"}))
          .alpn,
      "http/1.1");
  EXPECT_EQ(
      handshake(server_.get(), client_for(both.get(), "a.example.com"), narrow_to({"h2"})).alpn,
      "h2");
  EXPECT_EQ(handshake(server_.get(), client_for(both.get(), "a.example.com")).alpn, "h2");
  // Narrowed to what the client does not offer: no ALPN, the handshake still completes.
  auto http1 = client_context({.ca_file = ca_file_, .alpn = {"http/1.1"}});
  const Outcome outcome =
      handshake(server_.get(), client_for(http1.get(), "a.example.com"), narrow_to({"h2"}));
  EXPECT_TRUE(outcome.client_ok);
  EXPECT_EQ(outcome.alpn, "");
  SslPtr ssl(SSL_new(server_.get()));
  EXPECT_FALSE(offer_alpn(ssl.get(), std::vector<std::string>{""}));
}

TEST_F(TlsHandshake, HelloWithoutSniIsRefused) {
  auto context = client_context({.ca_file = ca_file_});
  SslPtr ssl(SSL_new(context.get()));
  SSL_set1_host(ssl.get(), "api.example.com");  // checked, but not sent
  const Outcome outcome = handshake(server_.get(), std::move(ssl));
  EXPECT_FALSE(outcome.client_ok);
  EXPECT_FALSE(outcome.server_ok);
  EXPECT_EQ(ca_->cached_leaves(), 0u);
}

TEST_F(TlsHandshake, SniTheCaRefusesEndsTheHandshake) {
  auto constrained = SandboxCa::create({.permitted_hosts = {"api.openai.com"}});
  ASSERT_TRUE(constrained);
  auto server = make_server_context(**constrained);
  ASSERT_TRUE(server);
  auto context = client_context({.ca_file = ca_file_});
  for (const char* sni : {"evil.example.com", "1.2.3.4", "bad..name"}) {
    SslPtr ssl(SSL_new(context.get()));
    SSL_set_tlsext_host_name(ssl.get(), sni);
    const Outcome outcome = handshake(server->get(), std::move(ssl));
    EXPECT_FALSE(outcome.client_ok) << sni;
    EXPECT_FALSE(outcome.server_ok) << sni;
  }
  EXPECT_EQ((*constrained)->cached_leaves(), 0u);
}

// The upstream side: a stand-in upstream whose certificates come from a test CA (another
// SandboxCa here), trusted through the explicit CA file.
TEST_F(TlsHandshake, UpstreamVerifiesAgainstATestCa) {
  auto context = client_context({.ca_file = ca_file_});
  const Outcome ok = handshake(server_.get(), client_for(context.get(), "upstream.test"));
  EXPECT_TRUE(ok.client_ok);
  EXPECT_EQ(ok.verify_result, X509_V_OK);
  // The upstream presents a certificate for upstream.test (the SNI); the engine dialled for
  // other.test: the name check fails the handshake.
  SslPtr wrong = client_for(context.get(), "other.test");
  SSL_set_tlsext_host_name(wrong.get(), "upstream.test");
  const Outcome mismatch = handshake(server_.get(), std::move(wrong));
  EXPECT_FALSE(mismatch.client_ok);
  EXPECT_EQ(mismatch.verify_result, X509_V_ERR_HOSTNAME_MISMATCH);
  // A certificate from a CA the client does not trust.
  auto stranger = SandboxCa::create({});
  ASSERT_TRUE(stranger);
  auto stranger_server = make_server_context(**stranger);
  ASSERT_TRUE(stranger_server);
  const Outcome untrusted =
      handshake(stranger_server->get(), client_for(context.get(), "upstream.test"));
  EXPECT_FALSE(untrusted.client_ok);
  EXPECT_NE(untrusted.verify_result, X509_V_OK);
}

TEST_F(TlsHandshake, UpstreamSslSetsSniForNamesOnly) {
  auto context = client_context({.ca_file = ca_file_});
  SslPtr named = client_for(context.get(), "api.example.com");
  EXPECT_STREQ(SSL_get_servername(named.get(), TLSEXT_NAMETYPE_host_name), "api.example.com");
  SslPtr literal = client_for(context.get(), "203.0.113.7");
  EXPECT_EQ(SSL_get_servername(literal.get(), TLSEXT_NAMETYPE_host_name), nullptr);
  SslPtr v6 = client_for(context.get(), "2001:db8::1");
  EXPECT_EQ(SSL_get_servername(v6.get(), TLSEXT_NAMETYPE_host_name), nullptr);
}

TEST_F(TlsHandshake, BadOptionsAreRefused) {
  auto missing = make_upstream_context({.ca_file = dir_.path() + "/missing.pem"});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("missing.pem"), std::string::npos);
  EXPECT_FALSE(make_upstream_context({.alpn = {""}}));
  EXPECT_FALSE(make_upstream_context({.alpn = {std::string(256, 'x')}}));
  EXPECT_FALSE(make_server_context(*ca_, {.alpn = {""}}));
}

// The engine's upstream leg: each next connection to a host resumes a session its server issued,
// though the client side ends without a clean shutdown as relayed connections do (handshake()
// frees the client SSL unshut); a session is offered under its own key only.
TEST_F(TlsHandshake, UpstreamSessionsResumeEachNextConnectionUnderTheirKeyOnly) {
  auto issuing = make_server_context(*ca_, {.session_tickets = true});
  ASSERT_TRUE(issuing) << issuing.error().message();
  auto context = client_context({.ca_file = ca_file_});
  auto sessions = std::make_shared<UpstreamSessions>();
  std::vector<std::optional<std::string>> last_alpns;
  auto connect = [&](const std::string& key) {
    SslPtr ssl = client_for(context.get(), "upstream.test");
    auto last_alpn = resume_upstream_session(ssl.get(), sessions, key);
    EXPECT_TRUE(last_alpn);
    last_alpns.push_back(last_alpn.value_or(std::nullopt));
    return handshake(issuing->get(), std::move(ssl));
  };
  std::vector<bool> resumed;
  for (int i = 0; i < 4; ++i) {
    const Outcome outcome = connect("upstream.test:443 h2");
    EXPECT_TRUE(outcome.client_ok && outcome.server_ok);
    EXPECT_EQ(outcome.verify_result, X509_V_OK);
    EXPECT_EQ(outcome.echoed, "ping");
    resumed.push_back(outcome.resumed);
  }
  EXPECT_EQ(resumed, (std::vector<bool>{false, true, true, true}));
  // Each offered session names the protocol its connection chose (both sides prefer h2).
  EXPECT_EQ(last_alpns, (std::vector<std::optional<std::string>>{std::nullopt, "h2", "h2", "h2"}));
  EXPECT_FALSE(connect("upstream.test:8443 h2").resumed) << "another port's key";
  // A resumed connection's sessions keep the time of the full handshake its chain was verified
  // in: the chain is verified again once that is kVerifiedFor old, however often it resumed.
  const std::string key = "upstream.test:443 h2";
  const std::time_t long_ago = std::time(nullptr) - UpstreamSessions::kVerifiedFor.count() + 30;
  // Each time one session alone is left under the key, with the time under test.
  UpstreamSessions::Cached cached = sessions->take(key);
  ASSERT_TRUE(cached.session);
  sessions->forget(key);
  sessions->put(key, std::move(cached.session), long_ago);
  EXPECT_TRUE(connect(key).resumed);
  cached = sessions->take(key);
  ASSERT_TRUE(cached.session);
  EXPECT_EQ(cached.verified, long_ago) << "inherited, not the resumption's time";
  sessions->forget(key);
  sessions->put(key, std::move(cached.session), long_ago - 60);
  EXPECT_FALSE(connect(key).resumed) << "verified over kVerifiedFor ago: a full handshake";
  cached = sessions->take(key);
  ASSERT_TRUE(cached.session);
  EXPECT_GE(cached.verified, long_ago + 30) << "that full handshake verified it now";
  // The engine's own server issues no tickets: nothing to resume.
  auto quiet = std::make_shared<UpstreamSessions>();
  for (int i = 0; i < 2; ++i) {
    SslPtr ssl = client_for(context.get(), "upstream.test");
    ASSERT_TRUE(resume_upstream_session(ssl.get(), quiet, "k"));
    const Outcome outcome = handshake(server_.get(), std::move(ssl));
    EXPECT_TRUE(outcome.client_ok);
    EXPECT_FALSE(outcome.resumed);
  }
}

// The cache alone: sessions taken once, newest first; at most 4 per key and 256 keys; a session
// that is not resumable or has expired is never offered; a key's sessions forgotten at once.
TEST(UpstreamSessionsCache, TakesEachOnceWithinItsBoundsAndSkipsUnusableOnes) {
  int serial = 0;
  auto session = [&](long age_seconds = 0, bool resumable = true) {
    SslSessionPtr made(SSL_SESSION_new());
    const std::string id = "session-" + std::to_string(++serial);
    if (resumable) {
      EXPECT_EQ(SSL_SESSION_set1_id(made.get(), reinterpret_cast<const unsigned char*>(id.data()),
                                    static_cast<unsigned>(id.size())),
                1);
    }
    SSL_SESSION_set_time(made.get(), std::time(nullptr) - age_seconds);
    SSL_SESSION_set_timeout(made.get(), 300);
    return made;
  };
  const std::time_t now = std::time(nullptr);
  UpstreamSessions cache;
  auto taken = [&](const std::string& key) { return cache.take(key).session.get(); };
  EXPECT_EQ(taken("a"), nullptr);
  std::vector<SSL_SESSION*> put;
  for (int i = 0; i < 5; ++i) {
    SslSessionPtr made = session();
    put.push_back(made.get());
    cache.put("a", std::move(made), now);
  }
  for (int i = 4; i >= 1; --i) EXPECT_EQ(taken("a"), put[i]) << "newest first";
  EXPECT_EQ(taken("a"), nullptr) << "4 kept per key: the oldest went";

  cache.put("b", session(/*age_seconds=*/301), now);
  cache.put("b", session(0, /*resumable=*/false), now);
  EXPECT_EQ(taken("b"), nullptr) << "expired and unresumable are skipped";

  // A live ticket on a chain verified over an hour ago: verified again in a full handshake.
  const auto verified_for = UpstreamSessions::kVerifiedFor.count();
  cache.put("v", session(), now - verified_for - 1);
  EXPECT_EQ(taken("v"), nullptr) << "its verification is too old";
  cache.put("v", session(), now - verified_for + 60);
  const UpstreamSessions::Cached recent = cache.take("v");
  EXPECT_NE(recent.session, nullptr);
  EXPECT_EQ(recent.verified, now - verified_for + 60);

  SslSessionPtr first = session();
  cache.put("key-0", std::move(first), now);
  for (int i = 1; i <= 256; ++i) cache.put("key-" + std::to_string(i), session(), now);
  EXPECT_EQ(taken("key-0"), nullptr) << "256 keys: one made room";
  EXPECT_NE(taken("key-256"), nullptr);

  cache.put("c", session(), now);
  cache.put("c", session(), now);
  cache.put("d", session(), now);
  cache.forget("c");
  EXPECT_EQ(taken("c"), nullptr) << "forget drops every session of the key";
  EXPECT_NE(taken("d"), nullptr) << "and no other key's";
}

// A full handshake with a cached leaf (ECDHE + one ECDSA signature each way), including the
// server thread's start: printed, as the cost a terminated connection adds before any byte.
TEST_F(TlsHandshake, HandshakeCost) {
  auto context = client_context({.ca_file = ca_file_});
  ASSERT_TRUE(ca_->leaf_for("api.example.com"));
  std::vector<double> samples;
  for (int i = 0; i < 51; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Outcome outcome = handshake(server_.get(), client_for(context.get(), "api.example.com"));
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    ASSERT_TRUE(outcome.client_ok);
  }
  std::sort(samples.begin(), samples.end());
  std::printf(
      "TLS 1.3 handshake with the sandbox CA's cached leaf, over a socketpair: %.0f us "
      "(median of %zu)\n",
      samples[samples.size() / 2], samples.size());
}

}  // namespace
}  // namespace hutch::net::tls
