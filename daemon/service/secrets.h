// The secrets hutchd holds for credential injection (issue #12): name → value, loaded from a
// secrets file, from named variables of hutchd's environment (`--secret-from-env NAME`), or set
// through the write-only `PUT /v1/secrets/{name}`. Nothing here returns a value to a client:
// list() gives names and metadata; value() is for the engine, which puts it into a request
// head it sends upstream over TLS. Values are zeroed (OPENSSL_cleanse) when replaced, removed
// or destroyed; copies made before they reach the store (a request body) are the caller's.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch::daemon::service {

// A string zeroed when it dies or is overwritten. Move-only, so no copy escapes the zeroing.
class SecretValue {
 public:
  SecretValue() = default;
  explicit SecretValue(std::string value) : value_(std::move(value)) {}
  SecretValue(SecretValue&& other) noexcept;
  SecretValue& operator=(SecretValue&& other) noexcept;
  SecretValue(const SecretValue&) = delete;
  SecretValue& operator=(const SecretValue&) = delete;
  ~SecretValue();

  std::string_view view() const { return value_; }

 private:
  void wipe();
  std::string value_;
};

enum class SecretSource : uint8_t { kFile, kEnvironment, kApi };
std::string_view secret_source_name(SecretSource source);  // "file", "environment", "api"

struct SecretInfo {
  std::string name;
  SecretSource source = SecretSource::kApi;
  std::chrono::system_clock::time_point updated;
};

// Values: 1..16384 bytes without CR, LF, NUL or other control characters but tab (they go into
// header fields). Names: net/inject.h's is_valid_secret_name. Errors name the secret, never the
// value. Thread-safe: the API sets while the engine reads.
class SecretStore {
 public:
  // A file of `NAME=value` lines (the value is the rest of the line, taken as is: no quotes, no
  // escapes; blank lines and lines starting with '#' are skipped). Refused unless it is a regular
  // file owned by hutchd's user with no group or other permission bits (0600 or 0400), opened
  // without following a symlink; a duplicate name or a bad line refuses the whole file.
  Result<void> load_file(const std::string& path);

  // The variable `name` of this process's environment. Its text is zeroed in place and the
  // variable removed, so that neither /proc/<hutchd>/environ nor any child hutchd starts has it.
  // Call at startup, before threads (getenv/unsetenv are not thread-safe).
  Result<void> load_environment(const std::string& name);

  Result<void> set(std::string_view name, std::string value, SecretSource source);
  Result<void> remove(std::string_view name);  // kNotFound when there is none

  // A secret hutchd itself uses (the upstream proxy's credentials): no inject rule may name it,
  // so no policy can send it to a host of its choosing. `purpose` says which use, for errors.
  void reserve(std::string name, std::string purpose);
  std::optional<std::string> reserved_for(std::string_view name) const;

  std::vector<SecretInfo> list() const;  // sorted by name
  bool contains(std::string_view name) const;
  // For the engine only: a copy of the value, zeroed when the caller drops it.
  std::optional<SecretValue> value(std::string_view name) const;

 private:
  struct Entry {
    SecretValue value;
    SecretInfo info;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, std::string, std::less<>> reserved_;
};

// --secrets-file FILE (none when "") and then each --secret-from-env NAME into `store`, as
// hutchd and hutch-egress take them; an error names the option. Before threads, as
// load_environment.
Result<void> load_secret_options(SecretStore& store, const std::string& file,
                                 const std::vector<std::string>& from_env);

}  // namespace hutch::daemon::service
