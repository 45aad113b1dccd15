#include "daemon/service/secrets.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "net/inject.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon::service {

namespace {

constexpr size_t kMaxValue = 16 * 1024;
constexpr off_t kMaxFile = 1024 * 1024;

std::unexpected<Error> invalid(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "secret", std::move(detail));
}

Result<void> check_name(std::string_view name) {
  if (!net::is_valid_secret_name(name)) {
    return invalid("\"" + std::string(name) +
                   "\" is not a secret name ([A-Za-z_][A-Za-z0-9_]*, at most 128)");
  }
  return {};
}

Result<void> check_value(std::string_view name, std::string_view value) {
  if (value.empty() || value.size() > kMaxValue) {
    return invalid("\"" + std::string(name) + "\": the value must be 1.." +
                   std::to_string(kMaxValue) + " bytes");
  }
  const bool clean = std::all_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == '\t' || (u >= 0x20 && u != 0x7f);
  });
  if (!clean) return invalid("\"" + std::string(name) + "\": the value has control characters");
  return {};
}

// The file's bytes in a buffer of its final size (no reallocation leaves a copy behind), wiped
// by the caller.
Result<void> read_secrets_file(const std::string& path, SecretValue& out) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return sys_error("open", path);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return sys_error("fstat", path);
  if (!S_ISREG(st.st_mode)) return invalid(path + " is not a regular file");
  if (st.st_uid != geteuid()) {
    return invalid(path + " is owned by uid " + std::to_string(st.st_uid) + ", not hutchd's " +
                   std::to_string(geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalid(path + " has mode " + mode + ": group and others must have no access (0600)");
  }
  if (st.st_size > kMaxFile) return invalid(path + " is over 1 MiB");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      OPENSSL_cleanse(text.data(), text.size());
      return sys_error("read", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  out = SecretValue(std::move(text));
  return {};
}

}  // namespace

SecretValue::SecretValue(SecretValue&& other) noexcept : value_(std::move(other.value_)) {
  other.wipe();
}

SecretValue& SecretValue::operator=(SecretValue&& other) noexcept {
  if (this != &other) {
    wipe();
    value_ = std::move(other.value_);
    other.wipe();
  }
  return *this;
}

SecretValue::~SecretValue() { wipe(); }

// A moved-from short string keeps its bytes in the object (SSO): they are wiped too.
void SecretValue::wipe() {
  OPENSSL_cleanse(value_.data(), value_.size());
  value_.clear();
}

std::string_view secret_source_name(SecretSource source) {
  switch (source) {
    case SecretSource::kFile:
      return "file";
    case SecretSource::kEnvironment:
      return "environment";
    case SecretSource::kApi:
      return "api";
  }
  return "api";
}

Result<void> SecretStore::load_file(const std::string& path) {
  SecretValue file;
  HUTCH_TRY(read_secrets_file(path, file));
  std::vector<std::pair<std::string, SecretValue>> parsed;
  std::string_view text = file.view();
  for (size_t line_number = 1; !text.empty(); ++line_number) {
    const size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || line.starts_with('#')) continue;
    const std::string where = path + ":" + std::to_string(line_number);
    const size_t equals = line.find('=');
    if (equals == std::string_view::npos) return invalid(where + ": not NAME=value");
    const std::string_view name = line.substr(0, equals);
    const std::string_view value = line.substr(equals + 1);
    if (auto ok = check_name(name); !ok) return invalid(where + ": " + ok.error().detail);
    if (auto ok = check_value(name, value); !ok) return invalid(where + ": " + ok.error().detail);
    if (std::any_of(parsed.begin(), parsed.end(), [&](const auto& p) { return p.first == name; })) {
      return invalid(where + ": \"" + std::string(name) + "\" is set twice");
    }
    parsed.emplace_back(std::string(name), SecretValue(std::string(value)));
  }
  const auto now = std::chrono::system_clock::now();
  std::lock_guard lock(mutex_);
  for (auto& [name, value] : parsed) {
    entries_.insert_or_assign(name, Entry{std::move(value), {name, SecretSource::kFile, now}});
  }
  return {};
}

Result<void> SecretStore::load_environment(const std::string& name) {
  HUTCH_TRY(check_name(name));
  char* text = std::getenv(name.c_str());
  if (text == nullptr) {
    return kind_error(ErrorKind::kNotFound, "secret",
                      "environment variable " + name + " is not set");
  }
  const std::string_view value(text);
  HUTCH_TRY(check_value(name, value));
  HUTCH_TRY(set(name, std::string(value), SecretSource::kEnvironment));
  // The initial environment lives on the process's stack, which /proc/<pid>/environ shows.
  OPENSSL_cleanse(text, value.size());
  if (unsetenv(name.c_str()) != 0) return sys_error("unsetenv", name);
  return {};
}

Result<void> SecretStore::set(std::string_view name, std::string value, SecretSource source) {
  SecretValue secret(std::move(value));
  HUTCH_TRY(check_name(name));
  HUTCH_TRY(check_value(name, secret.view()));
  const std::string key(name);
  std::lock_guard lock(mutex_);
  entries_.insert_or_assign(
      key, Entry{std::move(secret), {key, source, std::chrono::system_clock::now()}});
  return {};
}

Result<void> SecretStore::remove(std::string_view name) {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(name);
  if (found == entries_.end()) {
    return kind_error(ErrorKind::kNotFound, "secret", "no secret \"" + std::string(name) + "\"");
  }
  entries_.erase(found);
  return {};
}

std::vector<SecretInfo> SecretStore::list() const {
  std::lock_guard lock(mutex_);
  std::vector<SecretInfo> infos;
  for (const auto& [name, entry] : entries_) infos.push_back(entry.info);
  return infos;
}

void SecretStore::reserve(std::string name, std::string purpose) {
  std::lock_guard lock(mutex_);
  reserved_[std::move(name)] = std::move(purpose);
}

std::optional<std::string> SecretStore::reserved_for(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = reserved_.find(name);
  if (it == reserved_.end()) return std::nullopt;
  return it->second;
}

bool SecretStore::contains(std::string_view name) const {
  std::lock_guard lock(mutex_);
  return entries_.find(name) != entries_.end();
}

std::optional<SecretValue> SecretStore::value(std::string_view name) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(name);
  if (found == entries_.end()) return std::nullopt;
  return SecretValue(std::string(found->second.value.view()));
}

Result<void> load_secret_options(SecretStore& store, const std::string& file,
                                 const std::vector<std::string>& from_env) {
  if (!file.empty()) {
    if (auto loaded = store.load_file(file); !loaded)
      return plain_error("--secrets-file", loaded.error().message());
  }
  for (const std::string& name : from_env) {
    if (auto loaded = store.load_environment(name); !loaded)
      return plain_error("--secret-from-env", loaded.error().message());
  }
  return {};
}

}  // namespace hutch::daemon::service
