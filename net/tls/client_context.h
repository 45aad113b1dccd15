// The TLS client the engine dials a terminated host's upstream with: the peer's certificate is
// verified against the host's trust store (OpenSSL's default paths) or, for tests, a CA file
// given explicitly, and its name against the host the sandbox asked for (SSL_set1_host), which
// is also sent as SNI. ALPN upstream is negotiated independently of the sandbox side.
#pragma once

#include <chrono>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/tls/openssl.h"
#include "runtime/base/error.h"

namespace hutch::net::tls {

struct UpstreamOptions {
  // Trust only this PEM file's certificates instead of the host's store (tests' upstreams).
  std::optional<std::string> ca_file{};
  std::vector<std::string> alpn = {"h2", "http/1.1"};
};

// TLS 1.2 at least; SSL_VERIFY_PEER, so a handshake with an unverified peer fails.
Result<SslCtxPtr> make_upstream_context(const UpstreamOptions& options = {});

// An SSL for one upstream connection to `host` (a normalised name, or an IP literal: then the
// certificate must name that address and no SNI is sent, RFC 6066 3), in client mode.
Result<SslPtr> make_upstream_ssl(SSL_CTX* context, std::string_view host);
// The same settings on an SSL made elsewhere (an asio::ssl::stream's).
Result<void> configure_upstream_ssl(SSL* ssl, std::string_view host);

// Upstream sessions to resume, by key (host, port, ALPN offer): a second connection to a host
// resumes its session and skips decoding and verifying the certificate chain, the bulk of a
// full handshake's client cost in OpenSSL 3.0. TLS 1.3 only. A session is offered once (RFC 8446
// C.4: a ticket reused links connections); each connection's server sends fresh ones. Each
// session carries when the certificate chain it rests on was verified: a resumed connection's
// new sessions inherit that time, so however long a chain of resumptions, the chain is verified
// again in a full handshake kVerifiedFor after the last one (a server's ticket may live 7 days).
// Not thread-safe: the engine keeps one per sandbox, on the sandbox's strand, so no sandbox can
// learn from resumption timing which hosts another one visited.
class UpstreamSessions {
 public:
  static constexpr std::chrono::seconds kVerifiedFor{3600};
  struct Cached {
    SslSessionPtr session;
    std::time_t verified = 0;  // the full handshake that verified the certificate chain
  };
  // A usable session for `key` (resumable, not expired, verified less than kVerifiedFor ago),
  // taken out of the cache; a null session if none.
  Cached take(const std::string& key);
  void put(const std::string& key, SslSessionPtr session, std::time_t verified);
  // Drops every session under `key`: its server no longer chooses as they say.
  void forget(const std::string& key) { sessions_.erase(key); }

 private:
  static constexpr size_t kMaxKeys = 256;
  static constexpr size_t kMaxPerKey = 4;
  std::map<std::string, std::deque<Cached>> sessions_;
};

// Offers `ssl` a session of `sessions` under `key`, and files there the sessions its server
// issues (through a context from make_upstream_context). `sessions` is kept alive by `ssl`.
// Returns the ALPN protocol the offered session had negotiated ("" for none), nullopt when no
// session was offered: what the server will most likely choose again, though it may not.
Result<std::optional<std::string>> resume_upstream_session(
    SSL* ssl, std::shared_ptr<UpstreamSessions> sessions, std::string key);

}  // namespace hutch::net::tls
