#include "net/tls/sandbox_ca.h"

#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <ctime>

namespace hutch::net::tls {

namespace {

constexpr size_t kMaxCommonName = 64;  // RFC 5280 ub-common-name
// Clocks inside the sandbox and on the host may differ slightly.
constexpr long kBackdateSeconds = 3600;

std::unexpected<Error> invalid(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "sandbox CA", std::move(detail));
}

Result<EvpPkeyPtr> generate_p256() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return openssl_error("EVP_EC_gen", "P-256");
  return key;
}

// 127 random bits: positive, non-zero in practice, within RFC 5280's 20 octets.
Result<void> set_random_serial(X509* certificate) {
  std::unique_ptr<BIGNUM, OpenSslFree<BIGNUM, BN_free>> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
    return openssl_error("BN_rand", "certificate serial");
  }
  ASN1_INTEGER* integer = BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate));
  if (integer == nullptr) return openssl_error("BN_to_ASN1_INTEGER", "certificate serial");
  return {};
}

Result<void> add_extension(X509* certificate, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509ExtensionPtr extension(X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str()));
  if (!extension || X509_add_ext(certificate, extension.get(), -1) != 1) {
    return openssl_error("X509V3_EXT_conf_nid", std::string(OBJ_nid2sn(nid)) + " " + value);
  }
  return {};
}

Result<void> set_subject(X509* certificate, std::string_view organization,
                         std::string_view common_name) {
  X509_NAME* name = X509_get_subject_name(certificate);
  const auto add = [&](const char* field, std::string_view text) -> Result<void> {
    if (X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(text.data()),
                                   static_cast<int>(text.size()), -1, 0) != 1) {
      return openssl_error("X509_NAME_add_entry_by_txt", std::string(field));
    }
    return {};
  };
  if (!organization.empty()) HUTCH_TRY(add("O", organization));
  if (!common_name.empty()) HUTCH_TRY(add("CN", common_name));
  return {};
}

// "permitted;DNS:api.openai.com,permitted;DNS:github.com,excluded;IP:0.0.0.0/0.0.0.0,...".
// A dNSName subtree covers the name and its subdomains (RFC 5280 4.2.1.10), so "*.github.com"
// becomes "github.com": the certificate then permits the apex too, leaf_for still refuses it.
// Every IP address is excluded: leaves name hosts only.
std::string name_constraints(const std::vector<Rule>& permitted) {
  std::string value = "critical";
  for (const Rule& rule : permitted) value += ",permitted;DNS:" + rule.name;
  value += ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0";
  return value;
}

}  // namespace

Result<void> SandboxCa::set_options(const SandboxCaOptions& options) {
  if (options.leaf_cache_size == 0) return invalid("leaf_cache_size must be at least 1");
  for (const std::string& text : options.permitted_hosts) {
    auto rule = parse_rule(text);
    if (!rule) return invalid("permitted host \"" + text + "\": " + rule.error().detail);
    if (rule->kind == RuleKind::kCidr || rule->port) {
      return invalid("permitted host \"" + text + "\": a name or *.suffix without a port");
    }
    permitted_.push_back(std::move(*rule));
  }
  cache_size_ = options.leaf_cache_size;
  return {};
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::create(const SandboxCaOptions& options) {
  if (options.validity <= std::chrono::seconds(0)) return invalid("validity must be positive");
  std::unique_ptr<SandboxCa> ca(new SandboxCa());
  HUTCH_TRY(ca->set_options(options));
  ca->key_ = HUTCH_TRY(generate_p256());
  ca->leaf_key_ = HUTCH_TRY(generate_p256());

  X509Ptr certificate(X509_new());
  if (!certificate) return openssl_error("X509_new", "sandbox CA");
  X509* cert = certificate.get();
  const long validity = static_cast<long>(options.validity.count());
  if (X509_set_version(cert, X509_VERSION_3) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert), validity) == nullptr ||
      X509_set_pubkey(cert, ca->key_.get()) != 1) {
    return openssl_error("X509_set", "sandbox CA version, validity and key");
  }
  HUTCH_TRY(set_random_serial(cert));
  std::string common_name = "hutch sandbox CA";
  if (!options.label.empty()) common_name += " " + options.label;
  common_name.resize(std::min(common_name.size(), kMaxCommonName));
  HUTCH_TRY(set_subject(cert, "hutch", common_name));
  if (X509_set_issuer_name(cert, X509_get_subject_name(cert)) != 1) {
    return openssl_error("X509_set_issuer_name", "sandbox CA");
  }
  HUTCH_TRY(add_extension(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  HUTCH_TRY(add_extension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign"));
  HUTCH_TRY(add_extension(cert, cert, NID_subject_key_identifier, "hash"));
  HUTCH_TRY(add_extension(cert, cert, NID_authority_key_identifier, "keyid:always"));
  if (!ca->permitted_.empty()) {
    HUTCH_TRY(add_extension(cert, cert, NID_name_constraints, name_constraints(ca->permitted_)));
  }
  if (X509_sign(cert, ca->key_.get(), EVP_sha256()) == 0) {
    return openssl_error("X509_sign", "sandbox CA");
  }
  ca->certificate_pem_ = HUTCH_TRY(tls::certificate_pem(cert));
  ca->certificate_ = std::move(certificate);
  return ca;
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::load(std::string_view certificate_pem,
                                                   std::string_view key_pem,
                                                   const SandboxCaOptions& options) {
  std::unique_ptr<SandboxCa> ca(new SandboxCa());
  HUTCH_TRY(ca->set_options(options));
  BioPtr certificate_bio(
      BIO_new_mem_buf(certificate_pem.data(), static_cast<int>(certificate_pem.size())));
  if (!certificate_bio) return openssl_error("BIO_new_mem_buf", "sandbox CA certificate");
  ca->certificate_.reset(PEM_read_bio_X509(certificate_bio.get(), nullptr, nullptr, nullptr));
  if (!ca->certificate_) return openssl_error("PEM_read_bio_X509", "sandbox CA certificate");
  BioPtr key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  if (!key_bio) return openssl_error("BIO_new_mem_buf", "sandbox CA key");
  ca->key_.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!ca->key_) return openssl_error("PEM_read_bio_PrivateKey", "sandbox CA key");
  if (X509_check_private_key(ca->certificate_.get(), ca->key_.get()) != 1)
    return openssl_error("X509_check_private_key", "the key is not the sandbox CA's");
  if (X509_check_ca(ca->certificate_.get()) == 0)
    return invalid("the certificate is not a CA's (basicConstraints CA:TRUE, keyCertSign)");
  ca->leaf_key_ = HUTCH_TRY(generate_p256());
  ca->certificate_pem_ = HUTCH_TRY(tls::certificate_pem(ca->certificate_.get()));
  return ca;
}

std::chrono::system_clock::time_point SandboxCa::not_after() const {
  std::tm when{};
  // A certificate this class made or loaded has a valid notAfter: create() set it.
  ASN1_TIME_to_tm(X509_get0_notAfter(certificate_.get()), &when);
  return std::chrono::system_clock::from_time_t(timegm(&when));
}

Result<void> SandboxCa::write_private_key(int fd) const {
  BioPtr bio(BIO_new_fd(fd, BIO_NOCLOSE));
  if (!bio) return openssl_error("BIO_new_fd", "sandbox CA key");
  if (PEM_write_bio_PrivateKey(bio.get(), key_.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      BIO_flush(bio.get()) != 1)
    return openssl_error("PEM_write_bio_PrivateKey", "sandbox CA key");
  return {};
}

Result<std::shared_ptr<const Leaf>> SandboxCa::leaf_for(std::string_view sni) {
  auto name = normalize_name(sni);
  if (!name) return invalid("leaf name: " + name.error().detail);
  if (!permitted_.empty()) {
    bool permitted = false;
    for (const Rule& rule : permitted_) permitted = permitted || name_matches(rule, *name);
    if (!permitted) return invalid("leaf name \"" + *name + "\" is outside the CA's hosts");
  }
  {
    std::lock_guard lock(mutex_);
    if (auto hit = cache_.find(*name); hit != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, hit->second);
      return *hit->second;
    }
  }
  // Minted outside the lock: a signature takes tens of microseconds. Two threads minting the
  // same name both succeed; the second insert finds the first and keeps it.
  auto leaf = HUTCH_TRY(mint(*name));
  std::lock_guard lock(mutex_);
  if (auto hit = cache_.find(*name); hit != cache_.end()) return *hit->second;
  lru_.push_front(leaf);
  cache_.emplace(*name, lru_.begin());
  if (lru_.size() > cache_size_) {
    cache_.erase(lru_.back()->name);
    lru_.pop_back();
  }
  return leaf;
}

size_t SandboxCa::cached_leaves() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

Result<std::shared_ptr<const Leaf>> SandboxCa::mint(const std::string& name) const {
  X509Ptr certificate(X509_new());
  if (!certificate) return openssl_error("X509_new", "leaf " + name);
  X509* cert = certificate.get();
  if (X509_set_version(cert, X509_VERSION_3) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert), -kBackdateSeconds) == nullptr ||
      X509_set1_notAfter(cert, X509_get0_notAfter(certificate_.get())) != 1 ||
      X509_set_pubkey(cert, leaf_key_.get()) != 1 ||
      X509_set_issuer_name(cert, X509_get_subject_name(certificate_.get())) != 1) {
    return openssl_error("X509_set", "leaf " + name + " version, validity, key and issuer");
  }
  HUTCH_TRY(set_random_serial(cert));
  // A CN is at most 64 characters; a longer name has an empty subject and then, as RFC 5280
  // 4.2.1.6 requires, a critical SAN.
  const bool has_cn = name.size() <= kMaxCommonName;
  HUTCH_TRY(set_subject(cert, "", has_cn ? name : ""));
  HUTCH_TRY(add_extension(cert, certificate_.get(), NID_basic_constraints, "critical,CA:FALSE"));
  HUTCH_TRY(add_extension(cert, certificate_.get(), NID_key_usage, "critical,digitalSignature"));
  HUTCH_TRY(add_extension(cert, certificate_.get(), NID_ext_key_usage, "serverAuth"));
  HUTCH_TRY(add_extension(cert, certificate_.get(), NID_subject_alt_name,
                          std::string(has_cn ? "" : "critical,") + "DNS:" + name));
  HUTCH_TRY(add_extension(cert, certificate_.get(), NID_subject_key_identifier, "hash"));
  HUTCH_TRY(add_extension(cert, certificate_.get(), NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert, key_.get(), EVP_sha256()) == 0) {
    return openssl_error("X509_sign", "leaf " + name);
  }
  if (EVP_PKEY_up_ref(leaf_key_.get()) != 1) return openssl_error("EVP_PKEY_up_ref", "leaf key");
  auto leaf = std::make_shared<Leaf>();
  leaf->name = name;
  leaf->certificate = std::move(certificate);
  leaf->key = EvpPkeyPtr(leaf_key_.get());
  return std::shared_ptr<const Leaf>(std::move(leaf));
}

}  // namespace hutch::net::tls
