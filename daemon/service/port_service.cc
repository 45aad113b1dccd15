#include "daemon/service/port_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/egress_path.h"

namespace hutch::daemon::service {
namespace {

constexpr size_t kIdBytes = 8;
constexpr size_t kSecretBytes = 16;  // 128 bits
constexpr std::string_view kTokenPrefix = "hpt_";

// connect(2) to loopback:port; the errno, 0 when connected. SO_SNDTIMEO bounds a connect that
// waits (a full accept queue): it then fails with EINPROGRESS (socket(7)).
int connect_loopback(int fd, int domain, uint16_t port, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) return errno;
  int rc;
  if (domain == AF_INET) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_port = htons(port);
    addr.sin6_addr = in6addr_loopback;
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  if (rc != 0) return errno;
  // Then each write to the sandbox's server waits at most a minute (a server that stops
  // reading): as long as hutchd's writes to its clients do by default.
  tv = timeval{60, 0};
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) return errno;
  return 0;
}

Result<std::string> random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("getrandom", std::to_string(bytes) + " bytes");
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

ServiceResult<UniqueFd> connect_to_port(const LiveSandbox& sandbox, uint16_t port,
                                        std::chrono::milliseconds timeout) {
  auto netns = sandbox.open_netns();
  if (!netns) return std::unexpected(from_runtime(netns.error()));
  int errors[2] = {0, 0};
  int domains[2] = {AF_INET, AF_INET6};
  for (int i = 0; i < 2; ++i) {
    auto fd = net::socket_in_netns(netns->get(), domains[i], SOCK_STREAM);
    if (!fd) return std::unexpected(from_runtime(fd.error()));
    errors[i] = connect_loopback(fd->get(), domains[i], port, timeout);
    if (errors[i] == 0) return std::move(*fd);
  }
  std::string p = std::to_string(port);
  return service_error(ErrorKind::kFailure, "port_unreachable",
                       "nothing answers on port " + p + " inside the sandbox: connect(127.0.0.1:" +
                           p + "): " + std::strerror(errors[0]) + "; connect([::1]:" + p +
                           "): " + std::strerror(errors[1]));
}

ServiceResult<PortTokens::Issued> PortTokens::issue(const std::string& sandbox, uint16_t port,
                                                    std::chrono::seconds ttl) {
  if (ttl.count() < 1 || ttl > kMaxTtl)
    return service_error(ErrorKind::kInvalid, "bad_request",
                         "ttl_seconds must be 1.." + std::to_string(kMaxTtl.count()));
  auto id = random_hex(kIdBytes);
  if (!id) return std::unexpected(from_runtime(id.error()));
  auto secret = random_hex(kSecretBytes);
  if (!secret) return std::unexpected(from_runtime(secret.error()));
  std::lock_guard lock(mutex_);
  sweep_locked();
  size_t held = std::ranges::count_if(tokens_, [&](const auto& kv) {
    return kv.second.info.sandbox == sandbox && kv.second.info.port == port;
  });
  if (held >= kMaxTokensPerPort)
    return service_error(ErrorKind::kConflict, "too_many_tokens",
                         "port " + std::to_string(port) + " already has " +
                             std::to_string(kMaxTokensPerPort) + " live tokens; revoke some");
  Entry entry{{*id, sandbox, port, std::chrono::system_clock::now() + ttl}, *secret};
  Issued issued{entry.info, std::string(kTokenPrefix) + *id + "_" + *secret};
  tokens_.emplace(*id, std::move(entry));
  return issued;
}

std::vector<PortTokenInfo> PortTokens::list(const std::string& sandbox, uint16_t port) {
  std::lock_guard lock(mutex_);
  sweep_locked();
  std::vector<PortTokenInfo> out;
  for (const auto& [id, entry] : tokens_) {
    if (entry.info.sandbox == sandbox && entry.info.port == port) out.push_back(entry.info);
  }
  return out;
}

bool PortTokens::revoke(const std::string& sandbox, uint16_t port, const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = tokens_.find(id);
  if (it == tokens_.end() || it->second.info.sandbox != sandbox || it->second.info.port != port)
    return false;
  tokens_.erase(it);
  return true;
}

bool PortTokens::accepts(const std::string& sandbox, uint16_t port, std::string_view token) {
  if (!token.starts_with(kTokenPrefix)) return false;
  token.remove_prefix(kTokenPrefix.size());
  size_t sep = token.find('_');
  if (sep == std::string_view::npos) return false;
  std::string id(token.substr(0, sep));
  std::string_view secret = token.substr(sep + 1);
  std::lock_guard lock(mutex_);
  auto it = tokens_.find(id);
  if (it == tokens_.end()) return false;
  const Entry& entry = it->second;
  bool secret_ok =
      secret.size() == entry.secret.size() && constant_time_equal(secret, entry.secret);
  bool live =
      std::chrono::system_clock::now() < entry.info.expires_at && alive_(entry.info.sandbox);
  if (!live) {
    tokens_.erase(it);
    return false;
  }
  return secret_ok && entry.info.sandbox == sandbox && entry.info.port == port;
}

void PortTokens::sweep_locked() {
  auto now = std::chrono::system_clock::now();
  std::erase_if(tokens_, [&](const auto& kv) {
    return now >= kv.second.info.expires_at || !alive_(kv.second.info.sandbox);
  });
}

}  // namespace hutch::daemon::service
