// Counters and latency histograms served as Prometheus text on GET /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace hutch::daemon {

// A Prometheus histogram with fixed buckets (seconds).
class Histogram {
 public:
  void observe(double seconds);
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  static constexpr std::array<double, 14> kBounds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  mutable std::mutex mutex_;
  std::array<uint64_t, kBounds.size()> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  void count_request() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void count_error(const std::string& code);
  Histogram& create_seconds() { return create_; }
  Histogram& exec_seconds() { return exec_; }
  // One network engine decision (daemon/service/network_service.h).
  void count_network(bool dns, bool allowed, uint64_t bytes_up, uint64_t bytes_down);
  // A connection the upstream proxy refused, failed or did not answer (--net-upstream-proxy).
  void count_network_proxy_failure() {
    net_.proxy_failures.fetch_add(1, std::memory_order_relaxed);
  }
  // A sandbox a restarted hutchd adopted without its egress (its network not re-attached).
  void count_network_reattach_failure() {
    net_.reattach_failures.fetch_add(1, std::memory_order_relaxed);
  }
  // A sandbox CA's rotation step done (sandbox_trust.h: announce, then switch), or one that
  // failed (tried again at the next look).
  void count_ca_rotation(bool announce, bool failed) {
    (failed     ? net_.ca_rotation_failures
     : announce ? net_.ca_announced
                : net_.ca_switched)
        .fetch_add(1, std::memory_order_relaxed);
  }
  std::string render(uint64_t running, uint64_t paused) const;

 private:
  std::atomic<uint64_t> requests_{0};
  mutable std::mutex errors_mutex_;
  std::map<std::string, uint64_t> errors_;
  struct NetCounters {
    std::atomic<uint64_t> allowed{0}, denied{0}, dns{0}, dns_denied{0}, up{0}, down{0};
    std::atomic<uint64_t> reattach_failures{0};
    std::atomic<uint64_t> proxy_failures{0};
    std::atomic<uint64_t> ca_announced{0}, ca_switched{0}, ca_rotation_failures{0};
  } net_;
  Histogram create_;
  Histogram exec_;
};

}  // namespace hutch::daemon
