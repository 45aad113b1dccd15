// `hutch run --net filtered|open` and bakes with such a network, served by hutch-egress
// (cli/egress/main.cc): the network engine runs in this process beside the sandbox, as hutchd's
// runs beside its sandboxes.
#pragma once

#include <string>

#include "cli/verbs.h"

namespace hutch::cli {

// Runs `options` (net filtered or open) with the engine serving the sandbox's egress; its exit
// status is hutch run's. The namespace, the engine's listeners and the sandbox CA's dir are gone
// when it returns.
int run_with_egress(const RunOptions& options, const std::string& state_dir);

// `hutch recipe build` whose recipe.json gives setup.sh a filtered or open network: the bake runs
// with the engine serving it, as hutchd's bakes do (a CA in memory only: the layer holds none).
int recipe_build_with_egress(const RecipeOptions& recipe, const std::string& state_dir);

}  // namespace hutch::cli
