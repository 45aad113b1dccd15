#include "daemon/metrics.h"

#include <cstdio>

namespace hutch::daemon {

void Histogram::observe(double seconds) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) ++counts_[i];
  }
  ++count_;
  sum_ += seconds;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard lock(mutex_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  char line[160];
  for (size_t i = 0; i < kBounds.size(); ++i) {
    std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), kBounds[i],
                  static_cast<unsigned long long>(counts_[i]));
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n",
                name.c_str(), static_cast<unsigned long long>(count_), name.c_str(), sum_,
                name.c_str(), static_cast<unsigned long long>(count_));
  out += line;
}

void Metrics::count_error(const std::string& code) {
  std::lock_guard lock(errors_mutex_);
  ++errors_[code];
}

void Metrics::count_network(bool dns, bool allowed, uint64_t bytes_up, uint64_t bytes_down) {
  if (dns) {
    net_.dns.fetch_add(1, std::memory_order_relaxed);
    if (!allowed) net_.dns_denied.fetch_add(1, std::memory_order_relaxed);
  } else {
    (allowed ? net_.allowed : net_.denied).fetch_add(1, std::memory_order_relaxed);
  }
  net_.up.fetch_add(bytes_up, std::memory_order_relaxed);
  net_.down.fetch_add(bytes_down, std::memory_order_relaxed);
}

std::string Metrics::render(uint64_t running, uint64_t paused) const {
  std::string out;
  out += "# HELP hutch_sandboxes Live sandboxes by state.\n# TYPE hutch_sandboxes gauge\n";
  out += "hutch_sandboxes{state=\"running\"} " + std::to_string(running) + "\n";
  out += "hutch_sandboxes{state=\"paused\"} " + std::to_string(paused) + "\n";
  out += "# HELP hutch_requests_total HTTP requests served.\n# TYPE hutch_requests_total counter\n";
  out += "hutch_requests_total " + std::to_string(requests_.load()) + "\n";
  out += "# HELP hutch_errors_total Error responses by code.\n# TYPE hutch_errors_total counter\n";
  {
    std::lock_guard lock(errors_mutex_);
    for (const auto& [code, count] : errors_)
      out += "hutch_errors_total{code=\"" + code + "\"} " + std::to_string(count) + "\n";
  }
  auto counter = [&out](const char* name, const char* help, const std::string& series) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + series;
  };
  auto value = [](const std::atomic<uint64_t>& v) { return std::to_string(v.load()) + "\n"; };
  counter("hutch_net_connections_total", "Egress connections decided, by outcome.",
          "hutch_net_connections_total{outcome=\"allowed\"} " + value(net_.allowed) +
              "hutch_net_connections_total{outcome=\"denied\"} " + value(net_.denied));
  counter("hutch_net_dns_queries_total", "DNS queries the engine answered.",
          "hutch_net_dns_queries_total " + value(net_.dns));
  counter("hutch_net_dns_denied_total", "DNS queries answered NXDOMAIN by policy.",
          "hutch_net_dns_denied_total " + value(net_.dns_denied));
  counter("hutch_net_bytes_total", "Bytes relayed, by direction.",
          "hutch_net_bytes_total{direction=\"up\"} " + value(net_.up) +
              "hutch_net_bytes_total{direction=\"down\"} " + value(net_.down));
  counter("hutch_net_reattach_failures_total",
          "Sandboxes adopted after a restart whose egress could not be re-attached (closed).",
          "hutch_net_reattach_failures_total " + value(net_.reattach_failures));
  counter("hutch_net_proxy_failures_total",
          "Egress connections the upstream proxy refused, failed or did not answer in time.",
          "hutch_net_proxy_failures_total " + value(net_.proxy_failures));
  counter(
      "hutch_net_ca_rotations_total",
      "Sandbox CA rotation steps: the next CA trusted inside (announce), then signing (switch).",
      "hutch_net_ca_rotations_total{step=\"announce\"} " + value(net_.ca_announced) +
          "hutch_net_ca_rotations_total{step=\"switch\"} " + value(net_.ca_switched));
  counter("hutch_net_ca_rotation_failures_total",
          "Sandbox CA rotation steps that failed (logged; tried again a check interval later).",
          "hutch_net_ca_rotation_failures_total " + value(net_.ca_rotation_failures));
  create_.render("hutch_create_seconds", "Sandbox creation latency.", out);
  exec_.render("hutch_exec_seconds", "Buffered and streamed exec latency.", out);
  return out;
}

}  // namespace hutch::daemon
