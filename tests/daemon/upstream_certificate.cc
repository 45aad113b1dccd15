#include "tests/daemon/upstream_certificate.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "net/tls/sandbox_ca.h"

namespace hutch::testing {

void write_upstream_certificate(const std::string& dir, const std::string& stem,
                                const std::string& ca_label, const std::string& host,
                                UpstreamCertificate& out) {
  auto ca = net::tls::SandboxCa::create({.label = ca_label});
  ASSERT_TRUE(ca) << ca.error().message();
  auto leaf = (*ca)->leaf_for(host);
  ASSERT_TRUE(leaf) << leaf.error().message();
  out.ca = dir + "/upstream-ca.pem";
  out.cert = dir + "/" + stem + ".pem";
  out.key = dir + "/" + stem + ".key";
  std::ofstream(out.ca) << (*ca)->certificate_pem();
  std::unique_ptr<FILE, int (*)(FILE*)> cert_file(std::fopen(out.cert.c_str(), "w"), std::fclose);
  std::unique_ptr<FILE, int (*)(FILE*)> key_file(std::fopen(out.key.c_str(), "w"), std::fclose);
  ASSERT_TRUE(cert_file && key_file);
  ASSERT_EQ(PEM_write_X509(cert_file.get(), (*leaf)->certificate.get()), 1);
  ASSERT_EQ(PEM_write_PrivateKey(key_file.get(), (*leaf)->key.get(), nullptr, nullptr, 0, nullptr,
                                 nullptr),
            1);
}

}  // namespace hutch::testing
