#include "daemon/service/sandbox_trust.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "runtime/base/text_file.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon::service {
namespace {

constexpr const char* kKeyFile = "key.pem";
constexpr const char* kCurrentFile = "current.pem";
constexpr const char* kNextFile = "next.pem";
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

Result<SandboxTrust> make_trust_dir(const std::string& path, const std::string& roots_path,
                                    std::chrono::seconds validity) {
  SandboxTrust trust;
  // Unconstrained by names: rules can change at runtime; the engine mints leaves only for hosts
  // a rule names. No sandbox id in its name: it may be made before the sandbox is.
  trust.ca = HUTCH_TRY(net::tls::SandboxCa::create({.validity = validity}));
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

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// A CA from a file holding its key and its certificate (current.pem, next.pem).
Result<std::shared_ptr<net::tls::SandboxCa>> load_ca_file(const std::string& path) {
  std::string text = HUTCH_TRY(read_text_file(path));
  auto ca = net::tls::SandboxCa::load(text, text, {});
  OPENSSL_cleanse(text.data(), text.size());
  if (!ca) return std::unexpected(ca.error());
  return std::shared_ptr<net::tls::SandboxCa>(std::move(*ca));
}

// `certificate` (PEM) at the end of the public file `path` unless it holds it already: one
// write with O_APPEND, so a reader sees the file as it was or with the whole certificate.
Result<void> append_trusted(const std::string& path, const std::string& certificate) {
  const std::string text = HUTCH_TRY(read_text_file(path));
  if (text.find(certificate) != std::string::npos) return {};
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("open", path + " (O_APPEND)");
  const std::string out = (text.empty() || text.back() == '\n' ? "" : "\n") + certificate;
  const ssize_t n = ::write(fd.get(), out.data(), out.size());
  if (n < 0) return sys_error("write", path);
  if (static_cast<size_t>(n) != out.size())
    return plain_error("sandbox CA", "short append to " + path);
  return {};
}

Result<void> trust_inside(const std::string& dir, const std::string& certificate) {
  const std::string public_dir = dir + "/" + kPublicDir;
  HUTCH_TRY(append_trusted(public_dir + "/" + kCaFile, certificate));
  return append_trusted(public_dir + "/" + kBundleFile, certificate);
}

}  // namespace

Result<SandboxTrust> load_trust(const std::string& sandbox_dir) {
  const std::string dir = trust_dir_of(sandbox_dir);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return kind_error(ErrorKind::kNotFound, "sandbox CA", "no " + dir + " (kept CA)");
    return sys_error("lstat", dir);
  }
  SandboxTrust trust;
  if (const std::string current = dir + "/" + kCurrentFile; exists(current)) {
    trust.ca = HUTCH_TRY(load_ca_file(current));
  } else {
    // The first CA: its certificate is the public file's first.
    const std::string certificate =
        HUTCH_TRY(read_text_file(dir + "/" + kPublicDir + "/" + kCaFile));
    std::string key = HUTCH_TRY(read_text_file(dir + "/" + kKeyFile));
    auto ca = net::tls::SandboxCa::load(certificate, key, {});
    OPENSSL_cleanse(key.data(), key.size());
    if (!ca) return std::unexpected(ca.error());
    trust.ca = std::move(*ca);
  }
  if (const std::string next = dir + "/" + kNextFile; exists(next)) {
    trust.next = HUTCH_TRY(load_ca_file(next));
    HUTCH_TRY(trust_inside(dir, trust.next->certificate_pem()));
  }
  std::string placeholder = HUTCH_TRY(read_text_file(dir + "/" + kPlaceholderKeyFile));
  if (placeholder.size() != trust.placeholder_key.size()) {
    OPENSSL_cleanse(placeholder.data(), placeholder.size());
    return plain_error("sandbox CA", dir + "/" + kPlaceholderKeyFile + " is not " +
                                         std::to_string(trust.placeholder_key.size()) + " bytes");
  }
  std::copy(placeholder.begin(), placeholder.end(), trust.placeholder_key.begin());
  OPENSSL_cleanse(placeholder.data(), placeholder.size());
  return trust;
}

RotationStep rotation_step(std::chrono::system_clock::time_point not_after, bool announced,
                           std::chrono::system_clock::time_point now, const CaRotation& rotation) {
  const auto left = not_after - now;
  if (!announced)
    return left <= rotation.announce_before() ? RotationStep::kAnnounce : RotationStep::kNone;
  return left <= rotation.switch_before() ? RotationStep::kSwitch : RotationStep::kNone;
}

Result<std::shared_ptr<net::tls::SandboxCa>> announce_next_ca(const std::string& sandbox_dir,
                                                              std::chrono::seconds validity) {
  const std::string dir = trust_dir_of(sandbox_dir);
  // A subject of its own (with its date), beside the CAs before it in the same bundle.
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  char made[32];
  std::strftime(made, sizeof made, "%Y-%m-%dT%H:%M:%SZ", ::gmtime_r(&now, &utc));
  std::shared_ptr<net::tls::SandboxCa> next = HUTCH_TRY(
      net::tls::SandboxCa::create({.label = std::string("from ") + made, .validity = validity}));
  const std::string path = dir + "/" + kNextFile;
  const std::string partial = path + ".partial";
  ::unlink(partial.c_str());  // a crash's
  {
    RemoveUnlessKept cleanup(partial);
    auto fd = HUTCH_TRY(create_file(partial, 0600));
    HUTCH_TRY(next->write_private_key(fd.get()));
    HUTCH_TRY(write_all(fd.get(), next->certificate_pem(), partial));
    if (::fsync(fd.get()) != 0) return sys_error("fsync", partial);
    if (::rename(partial.c_str(), path.c_str()) != 0)
      return sys_error("rename", partial + " to " + path);
    cleanup.keep();
  }
  HUTCH_TRY(trust_inside(dir, next->certificate_pem()));
  return next;
}

Result<void> switch_to_next_ca(const std::string& sandbox_dir) {
  const std::string dir = trust_dir_of(sandbox_dir);
  const std::string next = dir + "/" + kNextFile, current = dir + "/" + kCurrentFile;
  if (::rename(next.c_str(), current.c_str()) != 0)
    return sys_error("rename", next + " to " + current);
  const std::string first = dir + "/" + kKeyFile;
  if (::unlink(first.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", first);
  return {};
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

TrustPool::TrustPool(std::string dir, size_t size, std::vector<std::string> empty_files,
                     std::chrono::seconds validity)
    : dir_(fresh_pool_dir(std::move(dir))),
      empty_files_(std::move(empty_files)),
      validity_(validity),
      ahead_(
          dir_.empty() ? 0 : size, [this] { return make_one(); }, "sandbox CAs ahead") {}

Result<AheadTrust> TrustPool::make_one() {
  const std::string path = dir_ + "/" + std::to_string(made_.fetch_add(1));
  auto trust = HUTCH_TRY(make_trust_dir(path, std::string(net::tls::kHostRootsPath), validity_));
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
  return make_trust_dir(trust_dir_of(sandbox_dir), std::string(net::tls::kHostRootsPath),
                        validity_);
}

}  // namespace hutch::daemon::service
