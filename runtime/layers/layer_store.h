// The layer store: content-addressed, read-only overlay lowers under the state dir, shared by
// hutchd and the daemonless CLI.
//
//   <state_dir>/layers/<hex>/tree       the layer's files (an exact copy, see tree_copy.h)
//   <state_dir>/layers/<hex>/layer.erofs  the same tree as an erofs image, for overlayfs
//   <state_dir>/layers/<hex>/manifest   see manifest.h
//   <state_dir>/layers/.incoming-<pid>-<starttime>-<random>/   a layer being written
//   <state_dir>/tags/<name>             "sha256:<hex>\n"
//   <state_dir>/locks/<name>.lock       flock(2) files
//
// A layer's id is layer_digest(tree digest, parents): the same upper directory baked on two
// different bases is two different layers, since it means different root filesystems.
//
// Crash safety: a layer is written under an `.incoming-*` name, synced, and renamed to its final
// name last, so `kill -9` at any point leaves either no layer or a whole one; leftovers are
// ignored by list() and removed by gc() once their creator (pid + start time) is dead. Removal
// renames a layer out of its final name first, for the same reason.
//
// Concurrency between processes: writers (add, adopt, tag, stage) hold a shared flock on
// locks/.store.lock and gc/remove an exclusive one, so gc never sees a half-made reference. A new
// layer stays untagged between add_tree() and tag(); gc spares layers added (or re-added) within
// `grace` to keep that window safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/layers/manifest.h"

namespace hutch::layers {

struct LayerInfo {
  std::string digest;     // "sha256:<hex>"
  std::string tree_path;  // <state_dir>/layers/<hex>/tree
  LayerManifest manifest;
};

inline constexpr std::chrono::seconds kDefaultGcGrace{600};

// The layer id: "sha256:<hex>" over the tree digest and the parents, in order.
Result<std::string> layer_digest(std::string_view tree_digest,
                                 const std::vector<std::string>& parents);

class LayerStore {
 public:
  // Opens the store at `state_dir`, creating it and its subdirectories (0700) as needed.
  static Result<LayerStore> open(const std::string& state_dir);

  // Copies the tree under `src_dir_fd` into the store as a layer. From `manifest` only parents,
  // built_by and cache_key are used; digest, tree_digest, created and size are computed. A layer
  // with the same id already present is reused (and its gc grace restarted).
  Result<LayerInfo> add_tree(int src_dir_fd, const LayerManifest& manifest);
  // Like add_tree, but moves `dir_path` (a bake's upper directory on the store's filesystem) into
  // the store with rename(2) instead of copying it; across filesystems it falls back to a copy.
  // On success `dir_path` is gone, also when the layer already existed; a failure after the move
  // discards the tree with the scratch directory (a bake that fails here is retried from scratch).
  Result<LayerInfo> adopt_tree(const std::string& dir_path, const LayerManifest& manifest);

  // A layer by id ("sha256:<hex>" or bare hex); an Error with err ENOENT when absent.
  Result<LayerInfo> get(std::string_view digest) const;
  // Every complete layer, oldest first.
  Result<std::vector<LayerInfo>> list() const;
  // <state_dir>/layers/<hex>/tree for a digest from get()/list() (not checked).
  std::string tree_path(std::string_view digest) const;
  // <state_dir>/layers/<hex>/layer.erofs: the tree as an erofs image, which is what sandboxes
  // mount (runtime/fs/erofs.h says why), made before the layer gets its final name.
  std::string image_path(std::string_view digest) const;

  // Points tag `name` at layer `digest` (which must exist), replacing any previous target
  // atomically.
  Result<void> tag(std::string_view name, std::string_view digest);
  // The digest `name` points at; nullopt when there is no such tag.
  Result<std::optional<std::string>> resolve_tag(std::string_view name) const;
  // All tags as (name, digest), sorted by name.
  Result<std::vector<std::pair<std::string, std::string>>> tags() const;
  // Removes tag `name`; an Error with err ENOENT when there is none.
  Result<void> untag(std::string_view name);

  // The newest layer built with `key`; nullopt when none (or `key` is empty).
  Result<std::optional<std::string>> find_by_cache_key(std::string_view key) const;

  // An exclusive flock on locks/<name>.lock, held until the fd is closed; blocks until free.
  // Two bakes of one recipe take lock(recipe) so the second finds the first's result.
  Result<UniqueFd> lock(std::string_view name);

  // Removes layers reachable neither from a tag nor from `in_use_digests` (following parents),
  // except those added within `grace`; also abandoned `.incoming-*` leftovers. Returns the removed
  // layers' digests.
  Result<std::vector<std::string>> gc(const std::vector<std::string>& in_use_digests,
                                      std::chrono::seconds grace = kDefaultGcGrace);
  // Removes one layer; refuses (naming the referrer) while it is tagged or another layer's parent.
  Result<void> remove(std::string_view digest);

  const std::string& state_dir() const { return state_dir_; }

 private:
  explicit LayerStore(std::string state_dir) : state_dir_(std::move(state_dir)) {}

  Result<UniqueFd> store_lock(int operation) const;
  // A new `.incoming-*` dir under layers/ (its name and an fd of it); the caller removes it.
  Result<std::pair<std::string, UniqueFd>> make_scratch_dir() const;
  Result<LayerInfo> finish_layer(const std::string& scratch, int scratch_fd,
                                 const std::string& tree_digest, uint64_t size,
                                 const LayerManifest& manifest);
  Result<void> remove_layer(const std::string& hex);
  Result<std::vector<std::string>> collect_garbage(const std::vector<std::string>& in_use,
                                                   std::chrono::seconds grace);
  Result<void> remove_abandoned_scratch(int dir_fd) const;

  std::string state_dir_;
  UniqueFd state_fd_;
  UniqueFd layers_fd_;
  UniqueFd tags_fd_;
  UniqueFd locks_fd_;
};

}  // namespace hutch::layers
