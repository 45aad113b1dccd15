// The HTTP face of the recipe service (daemon/service/recipes.h): recipes, snapshots, forks,
// checkpoints and layer gc. Each route decodes its request, calls the service, encodes the answer.
#pragma once

#include "daemon/server.h"
#include "daemon/service/recipes.h"

namespace hutch::daemon {

void add_layer_routes(Routes& routes, SandboxRegistry& registry, service::RecipeService& recipes);

}  // namespace hutch::daemon
