// Recipes: a base rootfs plus a setup.sh that runs once; its upper directory becomes a read-only
// layer (an erofs image in the layer store) that any number of sandboxes start from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/layers/layer_store.h"
#include "runtime/spec.h"

namespace hutch::recipes {

// What a rootfs name stands for, ready for a SandboxSpec.
struct ResolvedRootfs {
  std::vector<std::string> layers;      // erofs images, topmost first (SandboxSpec::layers)
  std::vector<std::string> lower_dirs;  // SandboxSpec::lower_dirs: empty means the host rootfs
  std::vector<std::string> digests;     // the layers' ids, topmost first
  std::string base;                     // "host" or the base rootfs directory
};

// "host", an absolute rootfs directory, "recipe:NAME" (a tag of the store) or "image:NAME" (a
// rootfs imported to <state_dir>/images/NAME/rootfs by `hutch image import`).
Result<ResolvedRootfs> resolve_rootfs(const layers::LayerStore& store, std::string_view rootfs);

struct BakeRequest {
  std::string name;        // the tag to point at the result
  std::string recipe_dir;  // holds setup.sh and whatever it needs (bound read-only at /tmp/recipe)
  std::string base = "host";          // as resolve_rootfs takes it
  std::vector<std::string> bake_env;  // "K=V" for setup.sh only: never in the layer or cache key
  // Limits, seccomp, ids, timeout and net of the bake; argv, env, binds, workdir, layers,
  // lower_dirs and upper_dir are set by bake().
  SandboxSpec sandbox;
  // >= 0 (sandbox.net kHostOwned): the network namespace setup.sh runs in (borrowed), one hutchd
  // made with its egress path for the recipe's bake policy.
  int netns_fd = -1;
};

struct BakeOutcome {
  std::string digest;   // the layer `name` now points at
  bool cached = false;  // nothing ran: a layer with the same cache key existed
  RunResult setup;      // setup.sh's run, when it ran
};

// The cache key: the base's identity, and the digest of every file in the recipe dir (names,
// contents, modes). Bake-time env is left out on purpose: it may hold secrets.
Result<std::string> recipe_cache_key(const layers::LayerStore& store, const BakeRequest& request);

// Bakes (or finds cached) the recipe and tags it. Two bakes of one name serialize on a lock; the
// second finds the first's layer. A failing setup.sh is an Error naming its exit status, and the
// previous layer of `name` keeps serving. setup.sh runs as `bash -e setup.sh` (`sh -e` where the
// base has no bash) in /tmp/recipe, with the caller's stdout and stderr, keeping the namespaced
// kFileOwnershipCapabilities (package managers chown); sandboxes made from the recipe keep none.
Result<BakeOutcome> bake(layers::LayerStore& store, const BakeRequest& request);

// Layers whose image a loop device holds right now: a running sandbox uses them, so neither
// `layers rm` nor `layers gc` may remove them.
Result<std::vector<std::string>> layers_in_use(const layers::LayerStore& store);

}  // namespace hutch::recipes
