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
  create_.render("hutch_create_seconds", "Sandbox creation latency.", out);
  exec_.render("hutch_exec_seconds", "Buffered and streamed exec latency.", out);
  return out;
}

}  // namespace hutch::daemon
