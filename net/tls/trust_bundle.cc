#include "net/tls/trust_bundle.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <array>
#include <mutex>

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

// The certificates `pem` holds, counted up to `enough`.
size_t count_certificates(std::string_view pem, size_t enough) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return 0;
  size_t count = 0;
  while (count < enough) {
    X509Ptr certificate{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)};
    if (!certificate) break;
    ++count;
  }
  ERR_clear_error();  // the read that ends the loop queues "no start line"
  return count;
}

// The host's roots, read and checked once per version of the file, since every filtered create
// builds a bundle. The check parses the first certificate only: parsing all ~150 cost ~20 ms,
// which `hutch run --net` paid on every run. A file replaced or rewritten (ca-certificates
// updated) has another inode, size or mtime and is read again.
Result<std::string> host_roots(const std::string& roots_path) {
  struct Cached {
    std::string path;
    struct stat identity {};
    std::string text;
  };
  static std::mutex mutex;
  static Cached cached;
  struct stat now {};
  if (::stat(roots_path.c_str(), &now) != 0) return sys_error("stat", roots_path);
  std::lock_guard lock(mutex);
  const auto same = [&](const struct stat& a) {
    return a.st_dev == now.st_dev && a.st_ino == now.st_ino && a.st_size == now.st_size &&
           a.st_mtim.tv_sec == now.st_mtim.tv_sec && a.st_mtim.tv_nsec == now.st_mtim.tv_nsec;
  };
  if (cached.path == roots_path && same(cached.identity)) return cached.text;
  std::string text = HUTCH_TRY(read_text_file(roots_path));
  if (count_certificates(text, 1) == 0) {
    return plain_error("trust bundle", roots_path + " holds no certificate");
  }
  cached = {roots_path, now, text};
  return text;
}

}  // namespace

std::span<const std::string_view> sandbox_bundle_paths() { return kBundlePaths; }

Result<std::string> build_trust_bundle(std::string_view ca_pem, const std::string& roots_path) {
  if (count_certificates(ca_pem, 2) != 1) {
    return kind_error(ErrorKind::kInvalid, "trust bundle", "the CA PEM is not one certificate");
  }
  std::string bundle = HUTCH_TRY(host_roots(roots_path));
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
