// The sandbox's trust bundle: the host's roots plus the sandbox CA (with the CA alone, hosts
// that are not intercepted would stop verifying), the distro paths and the environment.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <fstream>

#include "net/tls/sandbox_ca.h"
#include "net/tls/trust_bundle.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::net::tls {
namespace {

std::vector<X509Ptr> read_certificates(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<X509Ptr> certificates;
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(certificate);
  }
  ERR_clear_error();
  return certificates;
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TrustBundle, RootsThenTheSandboxCa) {
  testing::TempDir dir;
  auto roots_ca = SandboxCa::create({.label = "stand-in root"});
  auto ca = SandboxCa::create({.label = "sandbox"});
  ASSERT_TRUE(roots_ca && ca);
  const std::string roots = dir.path() + "/roots.pem";
  // Without its final newline: the CA must still start on a line of its own.
  std::string roots_pem = (*roots_ca)->certificate_pem();
  roots_pem.pop_back();
  write_file(roots, roots_pem);
  auto bundle = build_trust_bundle((*ca)->certificate_pem(), roots);
  ASSERT_TRUE(bundle) << bundle.error().message();
  auto certificates = read_certificates(*bundle);
  ASSERT_EQ(certificates.size(), 2u);
  EXPECT_EQ(X509_cmp(certificates[0].get(), (*roots_ca)->certificate()), 0);
  EXPECT_EQ(X509_cmp(certificates[1].get(), (*ca)->certificate()), 0);
}

TEST(TrustBundle, HostRootsAreKept) {
  HUTCH_REQUIRE(access(std::string(kHostRootsPath).c_str(), R_OK) == 0,
                std::string(kHostRootsPath) + " is missing (ca-certificates not installed)");
  auto ca = SandboxCa::create({});
  ASSERT_TRUE(ca);
  auto bundle = build_trust_bundle((*ca)->certificate_pem());
  ASSERT_TRUE(bundle) << bundle.error().message();
  auto certificates = read_certificates(*bundle);
  EXPECT_GT(certificates.size(), 50u);
  EXPECT_EQ(X509_cmp(certificates.back().get(), (*ca)->certificate()), 0);
}

TEST(TrustBundle, BrokenInputsAreRefused) {
  testing::TempDir dir;
  auto ca = SandboxCa::create({});
  ASSERT_TRUE(ca);
  const std::string pem = (*ca)->certificate_pem();
  auto missing = build_trust_bundle(pem, dir.path() + "/missing.pem");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().step, "stat");
  EXPECT_EQ(missing.error().err, ENOENT);
  write_file(dir.path() + "/empty.pem", "not a certificate\n");
  auto empty = build_trust_bundle(pem, dir.path() + "/empty.pem");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().detail.find("holds no certificate"), std::string::npos);
  write_file(dir.path() + "/roots.pem", pem);
  EXPECT_FALSE(build_trust_bundle("garbage", dir.path() + "/roots.pem"));
  EXPECT_FALSE(build_trust_bundle(pem + pem, dir.path() + "/roots.pem"));
}

// The roots are cached per version of the file: a rewritten file is read again.
TEST(TrustBundle, ARewrittenRootsFileIsReadAgain) {
  testing::TempDir dir;
  auto ca = SandboxCa::create({});
  auto other = SandboxCa::create({});
  ASSERT_TRUE(ca && other);
  const std::string pem = (*ca)->certificate_pem();
  const std::string other_pem = (*other)->certificate_pem();
  const std::string roots = dir.path() + "/roots.pem";
  write_file(roots, other_pem);
  auto first = build_trust_bundle(pem, roots);
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(*first, other_pem + "# hutch sandbox CA\n" + pem);
  write_file(roots, other_pem + other_pem);
  auto second = build_trust_bundle(pem, roots);
  ASSERT_TRUE(second) << second.error().message();
  EXPECT_EQ(*second, other_pem + other_pem + "# hutch sandbox CA\n" + pem);
}

TEST(TrustBundle, DistroPathsAndEnvironment) {
  const auto paths = sandbox_bundle_paths();
  const std::vector<std::string_view> expected = {"/etc/ssl/certs/ca-certificates.crt",
                                                  "/etc/pki/tls/certs/ca-bundle.crt",
                                                  "/etc/ssl/cert.pem"};
  EXPECT_EQ(std::vector<std::string_view>(paths.begin(), paths.end()), expected);
  const auto environment = trust_environment("/etc/ssl/certs/ca-certificates.crt", "/run/ca.pem");
  std::map<std::string, std::string> variables;
  for (const EnvEntry& entry : environment) variables[entry.name] = entry.value;
  EXPECT_EQ(variables.size(), environment.size());
  EXPECT_EQ(variables["NODE_EXTRA_CA_CERTS"], "/run/ca.pem");
  for (const char* name : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                           "GIT_SSL_CAINFO", "PIP_CERT", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO"}) {
    EXPECT_EQ(variables[name], "/etc/ssl/certs/ca-certificates.crt") << name;
  }
}

}  // namespace
}  // namespace hutch::net::tls
