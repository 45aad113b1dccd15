// `hutch info`: the kernel features hutch uses, and what is missing without each.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/verbs.h"
#include "runtime/features.h"

namespace hutch::cli {

int info(bool json) {
  std::vector<Feature> features = probe_features();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Feature& f : features) {
      out.push_back({{"name", f.name},
                     {"available", f.available},
                     {"detail", f.detail},
                     {"needed_for", f.needed_for}});
    }
    std::printf("%s\n", nlohmann::json{{"features", out}}.dump(2).c_str());
  } else {
    for (const Feature& f : features) {
      std::printf("%-36s %-4s %s\n", f.name.c_str(), f.available ? "yes" : "no", f.detail.c_str());
      if (!f.available) std::printf("%-36s      without it: %s\n", "", f.needed_for.c_str());
    }
  }
  bool all = std::ranges::all_of(features, [](const Feature& f) { return f.available; });
  return all ? 0 : 1;
}

}  // namespace hutch::cli
