#include "net/tls/trust_bundle.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <array>

#include "net/tls/openssl.h"
#include "runtime/base/text_file.h"

namespace hutch::net::tls {

namespace {

constexpr std::array<std::string_view, 3> kBundlePaths = {
    "/etc/ssl/certs/ca-certificates.crt",  // Debian, Ubuntu
    "/etc/pki/tls/certs/ca-bundle.crt",    // RHEL, Fedora, CentOS
    "/etc/ssl/cert.pem",                   // Alpine, openSUSE
};

constexpr std::array<std::string_view, 7> kBundleVariables = {
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",    "GIT_SSL_CAINFO",
    "PIP_CERT",      "AWS_CA_BUNDLE",      "CARGO_HTTP_CAINFO",
};

size_t count_certificates(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return 0;
  size_t count = 0;
  while (X509Ptr certificate{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) ++count;
  ERR_clear_error();  // the read that ends the loop queues "no start line"
  return count;
}

}  // namespace

std::span<const std::string_view> sandbox_bundle_paths() { return kBundlePaths; }

Result<std::string> build_trust_bundle(std::string_view ca_pem, const std::string& roots_path) {
  if (count_certificates(ca_pem) != 1) {
    return kind_error(ErrorKind::kInvalid, "trust bundle", "the CA PEM is not one certificate");
  }
  std::string bundle = HUTCH_TRY(read_text_file(roots_path));
  if (count_certificates(bundle) == 0) {
    return plain_error("trust bundle", roots_path + " holds no certificate");
  }
  if (!bundle.ends_with('\n')) bundle += '\n';
  bundle += "# hutch sandbox CA\n";
  bundle += ca_pem;
  return bundle;
}

std::vector<EnvEntry> trust_environment(std::string_view bundle_path, std::string_view ca_path) {
  std::vector<EnvEntry> entries;
  for (std::string_view name : kBundleVariables) {
    entries.push_back({std::string(name), std::string(bundle_path)});
  }
  entries.push_back({"NODE_EXTRA_CA_CERTS", std::string(ca_path)});
  return entries;
}

}  // namespace hutch::net::tls
