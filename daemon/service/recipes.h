// The recipe service: recipe resolution, bakes, snapshots, forks, checkpoints, rollback and layer
// gc over the layer store under hutchd's state dir (shared with `hutch recipe build`). No HTTP:
// errors are ServiceErrors with the API's codes (docs/api.md); layer_routes.cc decodes, calls
// and encodes. Owned by main, which hands it to the routes and the warm pool.
//
// Tags hutchd makes for itself: `fork-sb-<id>-<random>` (a fork's snapshot) and
// `cp-sb-<id>-<name>` (a checkpoint). Both go when their sandbox is destroyed (drop_tags_of, the
// registry's destroy hook) or, after a crash, at the next gc; clients cannot name recipes so.
//
// Against gc, without making gc wait for them: an operation that is about to mount layers (a
// create, a fork, a rollback, a bake on a recipe base) pins their digests, and one that makes a
// layer and then tags it (a snapshot, a bake) opens a window that spares every layer made since
// it began (the store's grace, stretched; a bake's layer is made by hutchd-bake, so its digest is
// not known before it is tagged). gc runs under the service's mutex, which the others take only
// to pin and unpin: a bake running for an hour delays no gc and no other request.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/json_codec.h"
#include "daemon/service/bake.h"
#include "daemon/service/error.h"
#include "daemon/service/sandbox_registry.h"
#include "runtime/layers/layer_store.h"
#include "runtime/live_sandbox.h"

namespace hutch::daemon::service {

class RecipeService;

// Layers held against gc until destroyed (move-only): pinned digests, and the making window.
class LayerPin {
 public:
  LayerPin() = default;
  LayerPin(LayerPin&& other) noexcept;
  LayerPin& operator=(LayerPin&& other) noexcept;
  LayerPin(const LayerPin&) = delete;
  LayerPin& operator=(const LayerPin&) = delete;
  ~LayerPin();

 private:
  friend class RecipeService;
  void release();
  RecipeService* service_ = nullptr;
  std::vector<std::string> digests_;
  std::optional<std::multiset<int64_t>::iterator> making_;  // the window's start (time_t)
};

struct BakeParams {
  std::string dir;                           // absolute, a directory
  std::string name;                          // the tag: a valid layer name, not hutchd's
  std::optional<std::string> base{};         // default: recipe.json's, else host
  std::map<std::string, std::string> env{};  // for setup.sh only
  uint64_t timeout_seconds = 3600;           // 1..86400
};

// How a bake went: a failed setup.sh is a value (with its log), not a ServiceError.
struct BakeReport {
  std::string name;
  bool ok = false;
  std::string digest;  // when ok
  bool cached = false;
  std::string message;  // when not ok
  std::string log;      // setup.sh's output, at most 1 MiB (and a truncation note)
};

struct Snapshot {
  std::string name;  // as the client named it (a checkpoint's name, not its tag)
  std::string digest;
  SnapshotStats stats;
  double duration_ms = 0;
  // The sandbox's volumes, which it does not include: they are mounts above the upper layer the
  // snapshot copies, not part of it.
  std::vector<std::string> volumes_excluded;
};

struct Forked {
  Snapshot snapshot;
  std::vector<std::shared_ptr<Sandbox>> sandboxes;
};

struct TaggedLayer {
  std::string name;
  std::string digest;
  time_t created = 0;
  uint64_t size = 0;
  std::string base;  // "host" or a directory
};

class RecipeService {
 public:
  // `bake_helper`: the hutchd-bake binary.
  RecipeService(SandboxRegistry& registry, std::string bake_helper);
  RecipeService(const RecipeService&) = delete;
  RecipeService& operator=(const RecipeService&) = delete;

  // Resolves config.recipe (when set) into its layer stack: rootfs, layer_digests, layer_images.
  // Hold the pin until the sandbox runs. bad_request (recipe and rootfs both given), 404
  // recipe_not_found, 409 too_many_layers.
  ServiceResult<LayerPin> resolve(SandboxConfig& config);

  // Bakes through hutchd-bake. bad_request for invalid params; a failed bake is a report.
  ServiceResult<BakeReport> bake(const BakeParams& params);
  // Recipes and snapshots (hutchd's own tags left out), by name.
  ServiceResult<std::vector<TaggedLayer>> list() const;
  // Untags a recipe or snapshot; an unknown name is no error.
  ServiceResult<void> remove(const std::string& name);

  // Captures the sandbox's upper dir as a layer over its stack, tagged `name`.
  ServiceResult<Snapshot> snapshot(Sandbox& sandbox, const std::string& name);
  // A snapshot and `count` (1..16) sandboxes on it, all or none.
  ServiceResult<Forked> fork(Sandbox& source, uint64_t count,
                             std::optional<std::map<std::string, std::string>> labels,
                             const std::string& request_id);
  ServiceResult<Snapshot> checkpoint(Sandbox& sandbox, const std::string& name);
  ServiceResult<std::vector<TaggedLayer>> checkpoints(const Sandbox& sandbox) const;
  // Replaces the sandbox by one on checkpoint `name`: 404 checkpoint_not_found, 409
  // too_many_layers (checked before the sandbox is destroyed).
  ServiceResult<std::shared_ptr<Sandbox>> rollback(const std::shared_ptr<Sandbox>& sandbox,
                                                   const std::string& name,
                                                   const std::string& request_id);

  // Removes layers no tag, sandbox, pin or attached loop device uses, except those made within
  // `grace_seconds` (at most 30 days); drops the internal tags of sandboxes that are gone first.
  ServiceResult<std::vector<std::string>> gc(uint64_t grace_seconds);

  // The registry's destroy hook: drops the sandbox's checkpoint and fork tags (best effort).
  void drop_tags_of(const std::string& sandbox_id);

  // Pins `digests` (and, with `making`, opens a making window) until the pin is destroyed.
  LayerPin pin(std::vector<std::string> digests, bool making);

 private:
  friend class LayerPin;
  LayerPin pin_locked(std::vector<std::string> digests, bool making);  // mutex_ held
  ServiceResult<layers::LayerStore> open_store() const;
  ServiceResult<Snapshot> snapshot_as(Sandbox& sandbox, const std::string& tag,
                                      const std::string& name);
  // Points `config` at the stack of tag `name` (pinned).
  ServiceResult<LayerPin> apply_stack(SandboxConfig& config, const layers::LayerStore& store,
                                      const std::string& name);

  SandboxRegistry& registry_;
  const std::string bake_helper_;
  // gc's critical section, and the pins.
  mutable std::mutex mutex_;
  std::multiset<std::string> pinned_;
  std::multiset<int64_t> making_;  // start times (time_t) of operations making layers
};

// "fork-sb-"/"cp-sb-" tags: hutchd's own, never a client's.
bool internal_tag(std::string_view name);

}  // namespace hutch::daemon::service
