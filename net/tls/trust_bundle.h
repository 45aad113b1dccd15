// What puts a sandbox CA into a sandbox's trust: the bundle file (the host's normal roots plus
// the CA, so that hosts the engine does not intercept still verify: with the CA alone curl
// fails on every one of them, NETWORK.md), the distro paths it is bind-mounted over, and the
// environment variables that tools read instead of those paths. The engine writes the files
// outside the sandbox and bind-mounts them, so they are in no snapshot, layer or fork.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch::net::tls {

// The host's bundle (Debian's update-ca-certificates output).
inline constexpr std::string_view kHostRootsPath = "/etc/ssl/certs/ca-certificates.crt";

// Where distros keep the bundle their TLS libraries read: Debian and Ubuntu, RHEL and Fedora,
// Alpine (also openSUSE's compatibility link). Each one the sandbox's image has is covered.
std::span<const std::string_view> sandbox_bundle_paths();

// The roots file's certificates followed by `ca_pem`. Fails when either holds no certificate
// that OpenSSL reads, so a broken host bundle does not become a sandbox that trusts only its CA.
Result<std::string> build_trust_bundle(std::string_view ca_pem,
                                       const std::string& roots_path = std::string(kHostRootsPath));

struct EnvEntry {
  std::string name;
  std::string value;
  friend bool operator==(const EnvEntry&, const EnvEntry&) = default;
};

// SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT, AWS_CA_BUNDLE,
// CARGO_HTTP_CAINFO name the whole bundle (each replaces the default roots);
// NODE_EXTRA_CA_CERTS names the CA alone (Node adds it to its built-in roots). Paths are as the
// sandbox sees them.
std::vector<EnvEntry> trust_environment(std::string_view bundle_path, std::string_view ca_path);

}  // namespace hutch::net::tls
