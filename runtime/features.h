// What the running kernel offers hutch, probed for real (each probe makes the call it names).
#pragma once

#include <string>
#include <vector>

namespace hutch {

struct Feature {
  std::string name;
  bool available = false;
  std::string detail;  // errno text when unavailable, or what was found
};

std::vector<Feature> probe_features();

}  // namespace hutch
