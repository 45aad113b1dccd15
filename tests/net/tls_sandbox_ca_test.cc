// The per-sandbox CA: its certificate's extensions, leaves that verify against it with the
// host name they were minted for, the LRU cache, name constraints, hostile SNI names, and the
// cost of minting (printed).
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "net/tls/sandbox_ca.h"

namespace hutch::net::tls {
namespace {

std::unique_ptr<SandboxCa> make_ca(SandboxCaOptions options = {}) {
  auto ca = SandboxCa::create(options);
  EXPECT_TRUE(ca) << ca.error().message();
  return ca ? std::move(*ca) : nullptr;
}

// X509_verify_cert of `leaf` against a store holding only `ca`, for the TLS server purpose and
// with `host` checked as a TLS client would: the X509_V_* result.
int verify(const SandboxCa& ca, X509* leaf, const std::string& host) {
  std::unique_ptr<X509_STORE, OpenSslFree<X509_STORE, X509_STORE_free>> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.certificate());
  std::unique_ptr<X509_STORE_CTX, OpenSslFree<X509_STORE_CTX, X509_STORE_CTX_free>> context(
      X509_STORE_CTX_new());
  X509_STORE_CTX_init(context.get(), store.get(), leaf, nullptr);
  X509_STORE_CTX_set_purpose(context.get(), X509_PURPOSE_SSL_SERVER);
  X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(context.get()), host.c_str(), 0);
  X509_verify_cert(context.get());
  return X509_STORE_CTX_get_error(context.get());
}

std::string serial_of(X509* certificate) {
  std::unique_ptr<BIGNUM, OpenSslFree<BIGNUM, BN_free>> serial(
      ASN1_INTEGER_to_BN(X509_get0_serialNumber(certificate), nullptr));
  char* hex = BN_bn2hex(serial.get());
  std::string text(hex);
  OPENSSL_free(hex);
  return text;
}

TEST(SandboxCa, CertificateIsAConstrainedP256Ca) {
  auto ca = make_ca({.label = "sbx-1234"});
  ASSERT_TRUE(ca);
  X509* cert = ca->certificate();
  EXPECT_EQ(X509_check_ca(cert), 1);
  EXPECT_EQ(X509_get_pathlen(cert), 0);
  EXPECT_TRUE(X509_get_key_usage(cert) & KU_KEY_CERT_SIGN);
  EXPECT_FALSE(X509_get_key_usage(cert) & KU_DIGITAL_SIGNATURE);
  EXPECT_TRUE(X509_get_extension_flags(cert) & EXFLAG_SS);
  EVP_PKEY* key = X509_get0_pubkey(cert);
  char group[64] = {};
  ASSERT_EQ(EVP_PKEY_get_group_name(key, group, sizeof group, nullptr), 1);
  EXPECT_STREQ(group, "prime256v1");
  EXPECT_EQ(X509_verify(cert, key), 1);
  // Valid from an hour ago (clock skew) for the default week.
  int days = 0, seconds = 0;
  ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert), X509_get0_notAfter(cert));
  EXPECT_EQ(days * 86400 + seconds, 7 * 86400 + 3600);
  char subject[256];
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
  EXPECT_NE(std::string(subject).find("CN=hutch sandbox CA sbx-1234"), std::string::npos);
  EXPECT_EQ(X509_get_ext_d2i(cert, NID_name_constraints, nullptr, nullptr), nullptr);
}

TEST(SandboxCa, PemReadsBackAsTheSameCertificate) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  const std::string& pem = ca->certificate_pem();
  EXPECT_TRUE(pem.starts_with("-----BEGIN CERTIFICATE-----\n"));
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr back(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ASSERT_TRUE(back);
  EXPECT_EQ(X509_cmp(back.get(), ca->certificate()), 0);
  EXPECT_EQ(pem.find("PRIVATE KEY"), std::string::npos);
}

TEST(SandboxCa, EveryCaHasItsOwnKeyAndSerial) {
  auto a = make_ca();
  auto b = make_ca();
  ASSERT_TRUE(a && b);
  EXPECT_NE(serial_of(a->certificate()), serial_of(b->certificate()));
  EXPECT_NE(EVP_PKEY_eq(X509_get0_pubkey(a->certificate()), X509_get0_pubkey(b->certificate())), 1);
}

TEST(SandboxCa, LeafVerifiesForItsNameOnly) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  auto leaf = ca->leaf_for("api.example.com");
  ASSERT_TRUE(leaf) << leaf.error().message();
  X509* cert = (*leaf)->certificate.get();
  EXPECT_EQ(verify(*ca, cert, "api.example.com"), X509_V_OK);
  EXPECT_EQ(verify(*ca, cert, "other.example.com"), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_EQ(X509_check_ca(cert), 0);
  EXPECT_TRUE(X509_get_extended_key_usage(cert) & XKU_SSL_SERVER);
  EXPECT_FALSE(X509_get_extended_key_usage(cert) & XKU_SSL_CLIENT);
  EXPECT_EQ(X509_check_private_key(cert, (*leaf)->key.get()), 1);
  // Not valid beyond the CA.
  EXPECT_EQ(ASN1_TIME_compare(X509_get0_notAfter(cert), X509_get0_notAfter(ca->certificate())), 0);
  // The leaf key is not the CA's.
  EXPECT_NE(EVP_PKEY_eq((*leaf)->key.get(), X509_get0_pubkey(ca->certificate())), 1);
  // Another CA's leaf for the same name does not verify against this one.
  auto other = make_ca();
  auto foreign = other->leaf_for("api.example.com");
  ASSERT_TRUE(foreign);
  EXPECT_NE(verify(*ca, (*foreign)->certificate.get(), "api.example.com"), X509_V_OK);
}

TEST(SandboxCa, LeavesAreCachedByNormalisedName) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  auto first = ca->leaf_for("api.example.com");
  auto again = ca->leaf_for("API.Example.COM.");
  ASSERT_TRUE(first && again);
  EXPECT_EQ(first->get(), again->get());
  EXPECT_EQ((*again)->name, "api.example.com");
  EXPECT_EQ(ca->cached_leaves(), 1u);
}

TEST(SandboxCa, CacheEvictsTheLeastRecentlyUsed) {
  auto ca = make_ca({.leaf_cache_size = 2});
  ASSERT_TRUE(ca);
  auto a = ca->leaf_for("a.example.com");
  auto b = ca->leaf_for("b.example.com");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(ca->leaf_for("a.example.com"));  // a is now the most recent
  ASSERT_TRUE(ca->leaf_for("c.example.com"));  // evicts b
  EXPECT_EQ(ca->cached_leaves(), 2u);
  EXPECT_EQ(ca->leaf_for("a.example.com")->get(), a->get());
  auto b_again = ca->leaf_for("b.example.com");
  ASSERT_TRUE(b_again);
  EXPECT_NE(b_again->get(), b->get());
  // A leaf handed out stays valid after eviction (shared ownership).
  EXPECT_EQ(verify(*ca, (*b)->certificate.get(), "b.example.com"), X509_V_OK);
}

TEST(SandboxCa, HostileNamesAreRefused) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  const std::vector<std::string> hostile = {
      "",
      ".",
      "*.example.com",
      "1.2.3.4",
      "2130706433",
      "127.1",
      "[::1]",
      "::1",
      "a..example.com",
      ".example.com",
      "ex ample.com",
      "example.com/evil",
      "exa\nmple.com",
      std::string("exa\0mple.com", 12),
      "ex\xc3\xa4mple.com",
      "-a.example.com",
      "a-.example.com",
      std::string(64, 'a') + ".com",
      std::string(250, 'a') + ".com",
      "a,DNS:evil.com",
      "a.com, DNS:evil.com",
  };
  for (const std::string& name : hostile) {
    auto leaf = ca->leaf_for(name);
    EXPECT_FALSE(leaf) << "minted a leaf for \"" << name << "\"";
    if (!leaf) {
      EXPECT_EQ(leaf.error().kind, ErrorKind::kInvalid);
    }
  }
  EXPECT_EQ(ca->cached_leaves(), 0u);
}

TEST(SandboxCa, LongestNameHasNoCommonNameAndACriticalSan) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  // 253 characters: four labels of 63 and the dot-separated rest.
  std::string name = std::string(63, 'a') + "." + std::string(63, 'b') + "." +
                     std::string(63, 'c') + "." + std::string(61, 'd');
  ASSERT_EQ(name.size(), 253u);
  auto leaf = ca->leaf_for(name);
  ASSERT_TRUE(leaf) << leaf.error().message();
  X509* cert = (*leaf)->certificate.get();
  EXPECT_EQ(X509_NAME_entry_count(X509_get_subject_name(cert)), 0);
  const int san = X509_get_ext_by_NID(cert, NID_subject_alt_name, -1);
  ASSERT_GE(san, 0);
  EXPECT_EQ(X509_EXTENSION_get_critical(X509_get_ext(cert, san)), 1);
  EXPECT_EQ(verify(*ca, cert, name), X509_V_OK);
}

TEST(SandboxCa, NameConstraintsPermitOnlyTheInjectedHosts) {
  auto ca = make_ca({.permitted_hosts = {"api.openai.com", "*.github.com"}});
  ASSERT_TRUE(ca);
  const int nc = X509_get_ext_by_NID(ca->certificate(), NID_name_constraints, -1);
  ASSERT_GE(nc, 0);
  EXPECT_EQ(X509_EXTENSION_get_critical(X509_get_ext(ca->certificate(), nc)), 1);
  auto openai = ca->leaf_for("api.openai.com");
  ASSERT_TRUE(openai);
  EXPECT_EQ(verify(*ca, (*openai)->certificate.get(), "api.openai.com"), X509_V_OK);
  auto github = ca->leaf_for("raw.github.com");
  ASSERT_TRUE(github);
  EXPECT_EQ(verify(*ca, (*github)->certificate.get(), "raw.github.com"), X509_V_OK);
  for (const char* outside : {"evil.com", "github.com", "openai.com", "x.api.openai.com"}) {
    auto refused = ca->leaf_for(outside);
    ASSERT_FALSE(refused) << outside;
    EXPECT_NE(refused.error().detail.find("outside the CA's hosts"), std::string::npos);
  }
  // A verifier enforces the constraint too: this CA's subtree does not cover another CA's name.
  auto unconstrained = make_ca();
  auto evil = unconstrained->leaf_for("evil.com");
  ASSERT_TRUE(evil);
  EXPECT_NE(verify(*ca, (*evil)->certificate.get(), "evil.com"), X509_V_OK);
}

// The key as write_private_key puts it in a file (a memfd here).
std::string private_key_pem(const SandboxCa& ca) {
  const int fd = ::memfd_create("ca-key", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  auto written = ca.write_private_key(fd);
  EXPECT_TRUE(written) << written.error().message();
  std::string pem(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  EXPECT_EQ(::pread(fd, pem.data(), pem.size(), 0), static_cast<ssize_t>(pem.size()));
  ::close(fd);
  return pem;
}

// What hutchd keeps across a restart: the certificate and the key load back as the same CA,
// whose new leaves verify against the certificate the sandbox already trusts.
TEST(SandboxCa, LoadsBackFromItsCertificateAndKey) {
  auto ca = make_ca({.label = "kept"});
  ASSERT_TRUE(ca);
  const std::string key = private_key_pem(*ca);
  EXPECT_TRUE(key.starts_with("-----BEGIN PRIVATE KEY-----\n")) << "PKCS#8";
  auto loaded = SandboxCa::load(ca->certificate_pem(), key, {});
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ((*loaded)->certificate_pem(), ca->certificate_pem());
  auto leaf = (*loaded)->leaf_for("api.example.com");
  ASSERT_TRUE(leaf) << leaf.error().message();
  EXPECT_EQ(verify(*ca, (*leaf)->certificate.get(), "api.example.com"), X509_V_OK);
  EXPECT_EQ(private_key_pem(**loaded), key);

  // Another CA's key, a key that is not PEM, a certificate that is no CA's: refused.
  auto other = make_ca();
  ASSERT_TRUE(other);
  auto mismatched = SandboxCa::load(ca->certificate_pem(), private_key_pem(*other), {});
  ASSERT_FALSE(mismatched);
  EXPECT_NE(mismatched.error().message().find("X509_check_private_key"), std::string::npos)
      << mismatched.error().message();
  EXPECT_FALSE(SandboxCa::load(ca->certificate_pem(), "not a key", {}));
  EXPECT_FALSE(SandboxCa::load("not a certificate", key, {}));
  BioPtr leaf_key(BIO_new(BIO_s_mem()));
  ASSERT_EQ(PEM_write_bio_PrivateKey(leaf_key.get(), (*leaf)->key.get(), nullptr, nullptr, 0,
                                     nullptr, nullptr),
            1);
  char* data = nullptr;
  const long size = BIO_get_mem_data(leaf_key.get(), &data);
  auto not_ca = SandboxCa::load(certificate_pem((*leaf)->certificate.get()).value(),
                                std::string(data, static_cast<size_t>(size)), {});
  ASSERT_FALSE(not_ca);
  EXPECT_NE(not_ca.error().message().find("not a CA"), std::string::npos)
      << not_ca.error().message();
}

TEST(SandboxCa, BadOptionsAreRefused) {
  for (const char* host : {"10.0.0.0/8", "api.openai.com:443", "*", "", "a..b"}) {
    auto ca = SandboxCa::create({.permitted_hosts = {host}});
    EXPECT_FALSE(ca) << host;
  }
  EXPECT_FALSE(SandboxCa::create({.validity = std::chrono::seconds(0)}));
  EXPECT_FALSE(SandboxCa::create({.leaf_cache_size = 0}));
}

TEST(SandboxCa, LabelIsCutToTheCommonNameLimit) {
  auto ca = make_ca({.label = std::string(200, 'x')});
  ASSERT_TRUE(ca);
  X509_NAME* subject = X509_get_subject_name(ca->certificate());
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  ASSERT_GE(index, 0);
  EXPECT_EQ(ASN1_STRING_length(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index))), 64);
}

// The engine's threads share one CA: minting, hits and evictions race on a small cache.
TEST(SandboxCa, ConcurrentLeavesStayValid) {
  auto ca = make_ca({.leaf_cache_size = 4});
  ASSERT_TRUE(ca);
  std::atomic<int> failures = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const std::string name = "h" + std::to_string((i * 7 + t) % 12) + ".example.com";
        auto leaf = ca->leaf_for(name);
        if (!leaf || (*leaf)->name != name ||
            X509_check_host((*leaf)->certificate.get(), name.c_str(), 0, 0, nullptr) != 1) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, 0);
  EXPECT_LE(ca->cached_leaves(), 4u);
}

double median_microseconds(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

TEST(SandboxCa, MintingCost) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> create, mint, hit;
  std::unique_ptr<SandboxCa> ca;
  for (int i = 0; i < 21; ++i) {
    const auto start = Clock::now();
    ca = make_ca();
    create.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  ASSERT_TRUE(ca);
  for (int i = 0; i < 201; ++i) {
    const std::string name = "host" + std::to_string(i) + ".example.com";
    auto start = Clock::now();
    ASSERT_TRUE(ca->leaf_for(name));
    mint.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    start = Clock::now();
    ASSERT_TRUE(ca->leaf_for(name));
    hit.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::printf("sandbox CA: create %.0f us, mint a leaf %.0f us, cached leaf %.2f us (medians)\n",
              median_microseconds(create), median_microseconds(mint), median_microseconds(hit));
}

}  // namespace
}  // namespace hutch::net::tls
