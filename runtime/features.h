// What the running kernel offers hutch, probed for real (each probe makes the call it names).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hutch {

struct Feature {
  std::string name;
  bool available = false;
  std::string detail;      // errno text when unavailable, or what was found
  std::string needed_for;  // what hutch cannot do without it (and since which kernel it exists)
};

// The oldest kernel hutch is tested on (Debian 12's): scripts/test-vm.sh runs the suite there.
inline constexpr int kMinimumKernel[2] = {6, 1};

// "kernel" first (the running release against kMinimumKernel), then every facility.
std::vector<Feature> probe_features();

// {major, minor} of a release string such as "6.1.0-27-cloud-amd64", or {0, 0}.
std::pair<int, int> kernel_version(const std::string& release);

}  // namespace hutch
