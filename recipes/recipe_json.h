// recipe.json, the optional settings file of a recipe directory (`hutch recipe build`,
// `POST /v1/recipes`): {"base": "...", "env": {"K": "V"}, "limits": {"memory": "512M",
// "pids": 256, "cpus": 1.0}, "timeout": "10m", "network": ...}. Pure parsing
// (fuzz/recipe_json_fuzzer.cc), beside the runtime rather than in either face: the CLI and
// hutchd-bake both apply what their own options did not set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch::recipes {

struct RecipeJson {
  std::optional<std::string> base;
  std::vector<std::string> env;  // "K=V", in the file's order
  std::optional<std::string> timeout;
  std::optional<std::string> memory;
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
  // The bake's network (setup.sh's only, never the recipe's sandboxes'), as create's `network`:
  // kept as JSON text for hutchd to parse with its policy codec (this file knows no policies).
  std::optional<std::string> network;
};

// An Error of step "recipe.json" for malformed JSON, an unknown key or limit, or a value of the
// wrong type.
Result<RecipeJson> parse_recipe_json(std::string_view text);

}  // namespace hutch::recipes
