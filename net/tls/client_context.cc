#include "net/tls/client_context.h"

#include <openssl/x509v3.h>

#include <ctime>

#include "net/address.h"

namespace hutch::net::tls {

namespace {

// Where an upstream SSL files the sessions its server issues: in its ex_data, freed with it.
struct SessionSlot {
  std::shared_ptr<UpstreamSessions> sessions;
  std::string key;
  std::time_t offered_verified = 0;  // of the session offered, if any
};

void free_session_slot(void*, void* slot, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<SessionSlot*>(slot);
}

int session_slot_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_session_slot);
  return index;
}

// OpenSSL's new-session callback: TLS 1.3 tickets only, each filed as a copy. The session OpenSSL
// hands over is also the connection's own, which it marks not resumable when the SSL is freed
// without a clean shutdown, as the relay's upstream connections always are; RFC 8446 ties a
// ticket to nothing but its lifetime. A TLS 1.2 session is the connection's only one and that
// mark guards it against truncation, so it is not kept. Returns 0: OpenSSL keeps its reference.
int file_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* slot = static_cast<SessionSlot*>(SSL_get_ex_data(ssl, session_slot_index()));
  if (!slot || SSL_SESSION_get_protocol_version(session) != TLS1_3_VERSION ||
      !SSL_SESSION_is_resumable(session))
    return 0;
  // A resumed connection verified nothing: its sessions rest on the chain the offered one did.
  const std::time_t verified =
      SSL_session_reused(ssl) ? slot->offered_verified : std::time(nullptr);
  if (SslSessionPtr copy(SSL_SESSION_dup(session)); copy)
    slot->sessions->put(slot->key, std::move(copy), verified);
  return 0;
}

bool usable(const UpstreamSessions::Cached& cached) {
  SSL_SESSION* session = cached.session.get();
  const std::time_t now = std::time(nullptr);
  return SSL_SESSION_is_resumable(session) == 1 &&
         SSL_SESSION_get_time(session) + SSL_SESSION_get_timeout(session) > now &&
         cached.verified + UpstreamSessions::kVerifiedFor.count() > now;
}

}  // namespace

UpstreamSessions::Cached UpstreamSessions::take(const std::string& key) {
  auto found = sessions_.find(key);
  if (found == sessions_.end()) return {};
  std::deque<Cached>& queue = found->second;
  Cached cached;
  while (!queue.empty() && !cached.session) {
    cached = std::move(queue.back());  // the newest: the longest left to live
    queue.pop_back();
    if (!usable(cached)) cached = {};
  }
  if (queue.empty()) sessions_.erase(found);
  return cached;
}

void UpstreamSessions::put(const std::string& key, SslSessionPtr session, std::time_t verified) {
  if (!sessions_.contains(key) && sessions_.size() >= kMaxKeys) sessions_.erase(sessions_.begin());
  std::deque<Cached>& queue = sessions_[key];
  queue.push_back({std::move(session), verified});
  if (queue.size() > kMaxPerKey) queue.pop_front();
}

Result<std::optional<std::string>> resume_upstream_session(
    SSL* ssl, std::shared_ptr<UpstreamSessions> sessions, std::string key) {
  std::optional<std::string> alpn;
  UpstreamSessions::Cached offered = sessions->take(key);
  if (offered.session) {
    if (SSL_set_session(ssl, offered.session.get()) != 1)
      return openssl_error("SSL_set_session", key);
    const unsigned char* protocol = nullptr;
    size_t size = 0;
    SSL_SESSION_get0_alpn_selected(offered.session.get(), &protocol, &size);
    alpn.emplace(size > 0 ? std::string(reinterpret_cast<const char*>(protocol), size) : "");
  }
  auto slot = std::make_unique<SessionSlot>(
      SessionSlot{std::move(sessions), std::move(key), offered.verified});
  if (SSL_set_ex_data(ssl, session_slot_index(), slot.get()) != 1) {
    return openssl_error("SSL_set_ex_data", slot->key);
  }
  slot.release();  // the SSL's now: free_session_slot
  return alpn;
}

Result<SslCtxPtr> make_upstream_context(const UpstreamOptions& options) {
  std::string alpn;
  for (const std::string& protocol : options.alpn) {
    if (protocol.empty() || protocol.size() > 255) {
      return kind_error(ErrorKind::kInvalid, "TLS upstream",
                        "ALPN protocol names are 1..255 bytes");
    }
    alpn += static_cast<char>(protocol.size());
    alpn += protocol;
  }
  SslCtxPtr context(SSL_CTX_new(TLS_client_method()));
  if (!context) return openssl_error("SSL_CTX_new", "TLS upstream");
  if (SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION) != 1) {
    return openssl_error("SSL_CTX_set_min_proto_version", "TLS upstream");
  }
  if (options.ca_file) {
    if (SSL_CTX_load_verify_file(context.get(), options.ca_file->c_str()) != 1) {
      return openssl_error("SSL_CTX_load_verify_file", *options.ca_file);
    }
  } else if (SSL_CTX_set_default_verify_paths(context.get()) != 1) {
    return openssl_error("SSL_CTX_set_default_verify_paths", "host trust store");
  }
  // SSL_CTX_set_alpn_protos returns 0 on success, unlike the rest of the API.
  if (!alpn.empty() &&
      SSL_CTX_set_alpn_protos(context.get(), reinterpret_cast<const unsigned char*>(alpn.data()),
                              static_cast<unsigned>(alpn.size())) != 0) {
    return openssl_error("SSL_CTX_set_alpn_protos", "TLS upstream");
  }
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  // Sessions are kept by the caller (UpstreamSessions), never in the context shared by sandboxes.
  SSL_CTX_set_session_cache_mode(context.get(),
                                 SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(context.get(), file_new_session);
  return context;
}

Result<SslPtr> make_upstream_ssl(SSL_CTX* context, std::string_view host) {
  SslPtr ssl(SSL_new(context));
  if (!ssl) return openssl_error("SSL_new", std::string(host));
  HUTCH_TRY(configure_upstream_ssl(ssl.get(), host));
  return ssl;
}

Result<void> configure_upstream_ssl(SSL* ssl, std::string_view host) {
  const std::string name(host);
  SSL_set_connect_state(ssl);
  // Partial wildcards ("a*.example.com") are not accepted as a match.
  SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (Address::parse(name)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
      return openssl_error("X509_VERIFY_PARAM_set1_ip_asc", name);
    }
    return {};
  }
  if (SSL_set1_host(ssl, name.c_str()) != 1 || SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    return openssl_error("SSL_set1_host", name);
  }
  return {};
}

}  // namespace hutch::net::tls
