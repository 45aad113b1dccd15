// A sandbox's own certificate authority, for terminating TLS to the hosts that have an injection
// rule: an ECDSA P-256 key (a signature costs a tenth of RSA-2048's, NETWORK.md), a self-signed
// certificate with CA:TRUE, pathlen:0 and keyCertSign, a random serial, a short validity and,
// when hosts are given, name constraints that permit only those hosts (and exclude every IP
// address), so a client that honours RFC 5280 constraints trusts it for nothing else.
//
// The private key leaves the object only through write_private_key, to a file its owner opened
// (hutchd: in its state dir, mode 0600, so that a restarted hutchd loads the same CA for a
// sandbox that already trusts it); only the certificate (PEM) goes into the sandbox's trust.
//
// Leaves are minted on demand for a host name (leaf_for) and kept in a bounded LRU cache. All
// leaves of one CA share one P-256 key made with the CA: minting is then one signature, and the
// key can impersonate only names this CA signed, for as long as the sandbox trusts the CA.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "net/policy.h"
#include "net/tls/openssl.h"
#include "runtime/base/error.h"

namespace hutch::net::tls {

struct SandboxCaOptions {
  std::string label{};  // in the subject's CN, e.g. the sandbox id (cut to fit CN's 64 characters)
  std::chrono::seconds validity = std::chrono::hours(24 * 7);
  // Name rules as in policy.h ("api.openai.com", "*.githubusercontent.com"; no ports, no
  // addresses). Empty: unconstrained. Else the certificate's permitted subtrees, and leaf_for
  // refuses any other name.
  std::vector<std::string> permitted_hosts{};
  size_t leaf_cache_size = 256;
};

// A leaf certificate for one host name: SAN dNSName, EKU serverAuth, CA:FALSE, valid until the
// CA's own notAfter. `key` is the CA's shared leaf key.
struct Leaf {
  std::string name;
  X509Ptr certificate;
  EvpPkeyPtr key;
};

class SandboxCa {
 public:
  static Result<std::unique_ptr<SandboxCa>> create(const SandboxCaOptions& options);
  // A CA create() made before, from its certificate and write_private_key's PEM: the key must be
  // the certificate's, the certificate a CA's. options.permitted_hosts and leaf_cache_size
  // apply (give the hosts it was made with); label and validity are the certificate's. Leaves
  // get a new shared key.
  static Result<std::unique_ptr<SandboxCa>> load(std::string_view certificate_pem,
                                                 std::string_view key_pem,
                                                 const SandboxCaOptions& options);

  SandboxCa(const SandboxCa&) = delete;
  SandboxCa& operator=(const SandboxCa&) = delete;

  // The certificate in PEM, for the sandbox's trust bundle and NODE_EXTRA_CA_CERTS.
  const std::string& certificate_pem() const { return certificate_pem_; }
  X509* certificate() const { return certificate_.get(); }
  // When the certificate, and every leaf it signed, stops being valid.
  std::chrono::system_clock::time_point not_after() const;
  // The CA's private key as unencrypted PKCS#8 PEM, written to `fd` (its owner chose where, and
  // who may read it). Nothing else exports it.
  Result<void> write_private_key(int fd) const;

  // The leaf for `sni` (normalised as policy.h's normalize_name; IP literals, wildcards, empty
  // and over-long names refused, and names outside permitted_hosts when given), from the cache
  // or minted now. Thread-safe.
  Result<std::shared_ptr<const Leaf>> leaf_for(std::string_view sni);

  size_t cached_leaves() const;

 private:
  SandboxCa() = default;
  Result<void> set_options(const SandboxCaOptions& options);
  Result<std::shared_ptr<const Leaf>> mint(const std::string& name) const;

  EvpPkeyPtr key_;
  EvpPkeyPtr leaf_key_;
  X509Ptr certificate_;
  std::string certificate_pem_;
  std::vector<Rule> permitted_;
  size_t cache_size_ = 0;

  mutable std::mutex mutex_;
  // Most recently used first; the map points into the list.
  std::list<std::shared_ptr<const Leaf>> lru_;
  std::unordered_map<std::string, std::list<std::shared_ptr<const Leaf>>::iterator> cache_;
};

}  // namespace hutch::net::tls
