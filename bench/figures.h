// What the benchmarks print of their samples: medians and p95 in milliseconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace hutch::bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Figures {
  double p50 = 0, p95 = 0;
};

inline Figures figures(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()))];
  };
  return {at(0.5), at(0.95)};
}

}  // namespace hutch::bench
