// The certificate of a test's TLS upstream in U (a python3 server given PEM files): a leaf for
// one host from a new CA of the test's own, the CA being what hutchd is told to trust
// (--net-upstream-ca), so no test depends on the host's roots.
#pragma once

#include <string>

namespace hutch::testing {

struct UpstreamCertificate {
  std::string ca;    // DIR/upstream-ca.pem
  std::string cert;  // DIR/STEM.pem, the leaf
  std::string key;   // DIR/STEM.key, its private key
};

// Writes the three PEM files into `dir`; fails the calling test (gtest assertions: call it under
// ASSERT_NO_FATAL_FAILURE) when the CA, the leaf or a file cannot be made.
void write_upstream_certificate(const std::string& dir, const std::string& stem,
                                const std::string& ca_label, const std::string& host,
                                UpstreamCertificate& out);

}  // namespace hutch::testing
