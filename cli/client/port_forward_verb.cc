// hutch port-forward ID PORT [LOCAL_PORT]: listens on 127.0.0.1:LOCAL_PORT and, for each
// connection, opens a tunnel to the sandbox's port through hutchd (POST
// /v1/sandboxes/{id}/tunnel/{port}, docs/api.md), then relays raw bytes both ways. One thread per
// forwarded connection: a developer's few connections, not a server's thousands.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/client/verbs.h"
#include "runtime/base/socket_relay.h"
#include "runtime/base/unique_fd.h"

namespace hutch::client {
namespace {

constexpr size_t kMaxHead = 64 * 1024;

Result<UniqueFd> connect_unix(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    return plain_error("connect", path + ": socket path too long");
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket", "AF_UNIX");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    return sys_error("connect", path);
  return fd;
}

// http://HOST:PORT ([v6] hosts in brackets).
Result<UniqueFd> connect_url(const std::string& url) {
  std::string rest = url.starts_with("http://") ? url.substr(7) : url;
  rest = rest.substr(0, rest.find('/'));
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size())
    return plain_error("--url", url + ": expected http://HOST:PORT");
  std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return plain_error("getaddrinfo", host + ": " + ::gai_strerror(rc));
  int last_errno = 0;
  for (addrinfo* at = found; at != nullptr; at = at->ai_next) {
    UniqueFd fd(::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol));
    if (fd && ::connect(fd.get(), at->ai_addr, at->ai_addrlen) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    last_errno = errno;
  }
  ::freeaddrinfo(found);
  return sys_error("connect", rest, last_errno);
}

// A tunnel to the sandbox's port: the connection to hutchd once it answered 200, and the bytes
// it read past the head (a server that speaks first, such as ssh, may already have).
struct Tunnel {
  UniqueFd fd;
  std::string early;
};

Result<Tunnel> open_tunnel(const Endpoint& endpoint, const std::string& id, uint16_t port) {
  Tunnel tunnel;
  tunnel.fd = HUTCH_TRY(endpoint.url.empty() ? connect_unix(endpoint.socket_path)
                                             : connect_url(endpoint.url));
  std::string request = "POST /v1/sandboxes/" + id + "/tunnel/" + std::to_string(port) +
                        " HTTP/1.1\r\nHost: hutch\r\nContent-Length: 0\r\n";
  if (!endpoint.token.empty()) request += "Authorization: Bearer " + endpoint.token + "\r\n";
  request += "\r\n";
  if (::send(tunnel.fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return sys_error("send", "the tunnel request to hutchd");
  std::string answer;
  size_t end = std::string::npos;
  size_t want = 0;  // an error answer: its head and Content-Length bytes of JSON
  while (want == 0 || answer.size() < want) {
    char buffer[4096];
    ssize_t n = ::recv(tunnel.fd.get(), buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("recv", "hutchd's answer to the tunnel request");
    if (n == 0) break;
    answer.append(buffer, static_cast<size_t>(n));
    if (end == std::string::npos && (end = answer.find("\r\n\r\n")) != std::string::npos) {
      if (answer.starts_with("HTTP/1.1 200 ")) break;
      size_t length = answer.find("Content-Length: ");
      want = end + 4 + (length < end ? std::stoul(answer.substr(length + 16)) : 0);
    }
    if (end == std::string::npos && answer.size() > kMaxHead)
      return plain_error("port-forward", "hutchd's answer has no end to its head");
  }
  if (end == std::string::npos || !answer.starts_with("HTTP/1.1 200 ")) {
    auto error = nlohmann::json::parse(end == std::string::npos ? "" : answer.substr(end + 4),
                                       nullptr, false);
    if (error.is_object() && error.contains("error") && error["error"].is_object())
      return plain_error("port-forward", error["error"].value("code", "") + ": " +
                                             error["error"].value("message", ""));
    return plain_error("port-forward", "hutchd answered: " + answer.substr(0, answer.find("\r\n")));
  }
  tunnel.early = answer.substr(end + 4);
  return tunnel;
}

void forward(UniqueFd client, const Endpoint& endpoint, const std::string& id, uint16_t port) {
  auto tunnel = open_tunnel(endpoint, id, port);
  if (!tunnel) {
    fail(tunnel.error());
    return;
  }
  if (!tunnel->early.empty() && ::send(client.get(), tunnel->early.data(), tunnel->early.size(),
                                       MSG_NOSIGNAL) != static_cast<ssize_t>(tunnel->early.size()))
    return;
  static const std::atomic<bool> never{false};
  relay_bytes(client.get(), tunnel->fd.get(), never);
}

}  // namespace

int port_forward(const Endpoint& endpoint, const std::string& id, uint16_t port,
                 uint16_t local_port) {
  // The first tunnel is opened before listening: a wrong id or a closed port is told at once.
  auto probe = open_tunnel(endpoint, id, port);
  if (!probe) return fail(probe.error());
  probe->fd.reset();
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener) return fail(sys_error("socket", "AF_INET").error());
  int on = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(local_port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string where = "127.0.0.1:" + std::to_string(local_port);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    return fail(sys_error("bind", where).error());
  if (::listen(listener.get(), 64) != 0) return fail(sys_error("listen", where).error());
  write_all(stdout, "Forwarding " + where + " -> " + id + ":" + std::to_string(port) + "\n");
  while (true) {
    UniqueFd client(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client && errno == EINTR) continue;
    if (!client) return fail(sys_error("accept4", where).error());
    std::thread(forward, std::move(client), endpoint, id, port).detach();
  }
}

}  // namespace hutch::client
