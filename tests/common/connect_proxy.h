// P: a CONNECT proxy for the upstream-proxy tests (net/upstream_proxy.h), listening on an address
// of a network namespace the test made and dialling, from there, only the names its table
// holds (or IP literals), so no packet leaves the machine. It records every request head it got
// and answers as the test says: tunnel (200, then splices both ways), refuse with a status, or
// never answer.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/unique_fd.h"

namespace hutch::testing {

class ConnectProxy {
 public:
  enum class Mode : uint8_t { kTunnel, kRefuse, kSilent };

  // Listens on `address`:`port` (IPv4) inside `netns`; `names`: CONNECT host -> IPv4 address.
  ConnectProxy(int netns, const std::string& address, uint16_t port,
               std::map<std::string, std::string> names);
  ~ConnectProxy();  // stops accepting, ends every connection, joins its threads
  ConnectProxy(const ConnectProxy&) = delete;
  ConnectProxy& operator=(const ConnectProxy&) = delete;

  bool ok() const { return static_cast<bool>(listener_); }
  // kRefuse answers `status` with a small body; kSilent reads the request and says nothing.
  void set_mode(Mode mode, int status = 407) {
    mode_ = mode;
    status_ = status;
  }
  int accepted() const { return accepted_; }
  std::vector<std::string> heads() const;  // every request head, in order

 private:
  void run();
  void serve(UniqueFd client);

  UniqueFd listener_;
  std::map<std::string, std::string> names_;
  std::atomic<Mode> mode_{Mode::kTunnel};
  std::atomic<int> status_{407};
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<std::string> heads_;
  std::vector<std::thread> connections_;
};

}  // namespace hutch::testing
