#include "daemon/service/sandbox_trust.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/base/text_file.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon::service {
namespace {

constexpr const char* kKeyFile = "key.pem";
constexpr const char* kPlaceholderKeyFile = "placeholder.key";
constexpr const char* kPublicDir = "public";
constexpr const char* kBundleFile = "ca-bundle.pem";
constexpr const char* kCaFile = "sandbox-ca.pem";

void remove_tree(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

// mkdir, then chmod: the mode is exact whatever hutchd's umask.
Result<void> make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) return sys_error("mkdir", path);
  if (::chmod(path.c_str(), mode) != 0) return sys_error("chmod", path);
  return {};
}

// A new file (never through a symlink, never over one that exists) with exactly `mode`.
Result<UniqueFd> create_file(const std::string& path, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return sys_error("open", path + " (O_CREAT|O_EXCL)");
  if (::fchmod(fd.get(), mode) != 0) return sys_error("fchmod", path);
  return fd;
}

Result<void> write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<void> write_file(const std::string& path, std::string_view data, mode_t mode) {
  auto fd = HUTCH_TRY(create_file(path, mode));
  return write_all(fd.get(), data, path);
}

// Removes `path` when the trust dir it is making fails halfway.
class RemoveUnlessKept {
 public:
  explicit RemoveUnlessKept(std::string path) : path_(std::move(path)) {}
  RemoveUnlessKept(const RemoveUnlessKept&) = delete;
  RemoveUnlessKept& operator=(const RemoveUnlessKept&) = delete;
  ~RemoveUnlessKept() {
    if (!kept_) remove_tree(path_);
  }
  void keep() { kept_ = true; }

 private:
  std::string path_;
  bool kept_ = false;
};

std::string trust_dir_of(const std::string& sandbox_dir) {
  return sandbox_dir + "/" + std::string(kTrustDir);
}

}  // namespace

Result<SandboxTrust> make_trust_dir(const std::string& path, const std::string& roots_path) {
  SandboxTrust trust;
  // Unconstrained by names: rules can change at runtime; the engine mints leaves only for hosts
  // a rule names. No sandbox id in its name: it may be made before the sandbox is.
  trust.ca = HUTCH_TRY(net::tls::SandboxCa::create({}));
  trust.placeholder_key = HUTCH_TRY(net::new_placeholder_key());
  const std::string bundle =
      HUTCH_TRY(net::tls::build_trust_bundle(trust.ca->certificate_pem(), roots_path));
  HUTCH_TRY(make_dir(path, 0700));
  RemoveUnlessKept cleanup(path);
  {
    const std::string key_path = path + "/" + kKeyFile;
    auto key = HUTCH_TRY(create_file(key_path, 0600));
    HUTCH_TRY(trust.ca->write_private_key(key.get()));
  }
  const auto& placeholder = trust.placeholder_key;
  HUTCH_TRY(write_file(
      path + "/" + kPlaceholderKeyFile,
      std::string_view(reinterpret_cast<const char*>(placeholder.data()), placeholder.size()),
      0600));
  // Readable by the sandbox's ids through the bind (host root owns them: the sandbox can neither
  // write nor chmod them).
  const std::string public_dir = path + "/" + kPublicDir;
  HUTCH_TRY(make_dir(public_dir, 0755));
  HUTCH_TRY(write_file(public_dir + "/" + kCaFile, trust.ca->certificate_pem(), 0644));
  HUTCH_TRY(write_file(public_dir + "/" + kBundleFile, bundle, 0644));
  cleanup.keep();
  return trust;
}

Result<SandboxTrust> load_trust(const std::string& sandbox_dir) {
  const std::string dir = trust_dir_of(sandbox_dir);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return kind_error(ErrorKind::kNotFound, "sandbox CA", "no " + dir + " (kept CA)");
    return sys_error("lstat", dir);
  }
  const std::string certificate = HUTCH_TRY(read_text_file(dir + "/" + kPublicDir + "/" + kCaFile));
  std::string key = HUTCH_TRY(read_text_file(dir + "/" + kKeyFile));
  auto ca = net::tls::SandboxCa::load(certificate, key, {});
  OPENSSL_cleanse(key.data(), key.size());
  if (!ca) return std::unexpected(ca.error());
  std::string placeholder = HUTCH_TRY(read_text_file(dir + "/" + kPlaceholderKeyFile));
  SandboxTrust trust;
  if (placeholder.size() != trust.placeholder_key.size()) {
    OPENSSL_cleanse(placeholder.data(), placeholder.size());
    return plain_error("sandbox CA", dir + "/" + kPlaceholderKeyFile + " is not " +
                                         std::to_string(trust.placeholder_key.size()) + " bytes");
  }
  std::copy(placeholder.begin(), placeholder.end(), trust.placeholder_key.begin());
  OPENSSL_cleanse(placeholder.data(), placeholder.size());
  trust.ca = std::move(*ca);
  return trust;
}

std::vector<BindMount> trust_binds(const std::string& sandbox_dir) {
  std::vector<BindMount> binds;
  binds.push_back({trust_dir_of(sandbox_dir) + "/" + kPublicDir, std::string(kTrustMount), true,
                   BindFrom::kLauncher});
  for (std::string_view path : net::tls::sandbox_bundle_paths())
    binds.push_back(
        {std::string(kTrustBundlePath), std::string(path), true, BindFrom::kSandbox, true});
  return binds;
}

AheadTrust::~AheadTrust() {
  if (!path_.empty()) remove_tree(path_);
  for (const auto& [path, name] : files_) ::unlink(path.c_str());
}

Result<void> AheadTrust::add_empty_file(std::string path, std::string name) {
  HUTCH_TRY(create_file(path, 0600));
  files_.emplace_back(std::move(path), std::move(name));
  return {};
}

Result<SandboxTrust> AheadTrust::place(const std::string& sandbox_dir) {
  const std::string target = trust_dir_of(sandbox_dir);
  if (::rename(path_.c_str(), target.c_str()) != 0)
    return sys_error("rename", path_ + " to " + target);
  path_.clear();
  while (!files_.empty()) {
    const auto& [path, name] = files_.back();
    const std::string file = sandbox_dir + "/" + name;
    if (::rename(path.c_str(), file.c_str()) != 0) return sys_error("rename", path + " to " + file);
    files_.pop_back();
  }
  return std::move(trust_);
}

namespace {

// The pool's dir, emptied: what a previous hutchd made ahead was never handed out.
std::string fresh_pool_dir(std::string dir) {
  if (dir.empty()) return dir;
  remove_tree(dir);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    spdlog::error("mkdir {}: {}: sandbox CAs are not made ahead", dir, std::strerror(errno));
    return "";
  }
  return dir;
}

}  // namespace

TrustPool::TrustPool(std::string dir, size_t size, std::vector<std::string> empty_files)
    : dir_(fresh_pool_dir(std::move(dir))),
      empty_files_(std::move(empty_files)),
      ahead_(
          dir_.empty() ? 0 : size, [this] { return make_one(); }, "sandbox CAs ahead") {}

Result<AheadTrust> TrustPool::make_one() {
  const std::string path = dir_ + "/" + std::to_string(made_.fetch_add(1));
  auto trust = HUTCH_TRY(make_trust_dir(path));
  AheadTrust ahead(path, std::move(trust), {});
  for (const std::string& name : empty_files_)
    HUTCH_TRY(ahead.add_empty_file(path + "." + name, name));
  return ahead;
}

Result<SandboxTrust> TrustPool::provision(const std::string& sandbox_dir) {
  if (auto ahead = ahead_.take()) {
    // A failed rename (another filesystem under the sandboxes' dir) falls back to a new one.
    auto placed = ahead->place(sandbox_dir);
    if (placed) return placed;
    spdlog::warn("a sandbox CA made ahead: {}; making one now", placed.error().message());
  }
  return make_trust_dir(trust_dir_of(sandbox_dir));
}

}  // namespace hutch::daemon::service
