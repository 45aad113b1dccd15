#include "runtime/recipes/recipe.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "runtime/base/proc_stat.h"
#include "runtime/base/text_file.h"
#include "runtime/fs/erofs.h"
#include "runtime/fs/tree_copy.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/names.h"
#include "runtime/layers/sha256.h"
#include "runtime/layers/tree_digest.h"
#include "runtime/sandbox.h"

extern const char kHostRootfsList[];

namespace hutch::recipes {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRecipePrefix = "recipe:";
constexpr std::string_view kImagePrefix = "image:";
constexpr const char* kRecipeMount = "/tmp/recipe";

// Removes a bake's scratch dir however bake() ends (after adopt_tree() it is already gone).
class ScratchDir {
 public:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Copies of recipe dirs, one per bake (below). 0711 and host root's: a bake's id may traverse it
// to its own copy, nobody may list it. One that another user made, or may write, is refused: they
// could reach or swap the copies.
constexpr const char* kRecipeCopies = "/tmp/hutch-recipes";

Result<UniqueFd> open_recipe_copies() {
  if (mkdir(kRecipeCopies, 0711) != 0 && errno != EEXIST) return sys_error("mkdir", kRecipeCopies);
  UniqueFd dir(open(kRecipeCopies, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return sys_error("open", kRecipeCopies);
  struct stat st;
  if (fstat(dir.get(), &st) != 0) return sys_error("fstat", kRecipeCopies);
  if (st.st_uid != 0 || (st.st_mode & 022) != 0) {
    return plain_error("recipe copy", std::string(kRecipeCopies) + " is owned by uid " +
                                          std::to_string(st.st_uid) +
                                          " or writable by others: "
                                          "refused");
  }
  return dir;
}

// Removes the copies of bakes that died (kill -9): their names carry the owner's pid and start
// time, as the store's scratch dirs do.
Result<void> remove_abandoned_copies(int copies_fd) {
  auto names = HUTCH_TRY(read_dir_names(copies_fd));
  for (const std::string& name : names) {
    auto owner = layers::parse_scratch_name(name);
    if (!owner) continue;
    auto state = read_proc_state(owner->pid);
    if (!state && state.error().err != ENOENT && state.error().err != ESRCH)
      return std::unexpected(state.error());
    const bool dead = !state || state->start_time != owner->start_time || state->state == 'Z' ||
                      state->state == 'X';
    if (!dead) continue;
    if (auto removed = remove_tree(copies_fd, name); !removed) return removed;
  }
  return {};
}

// The recipe dir as the bake reads it: a copy under kRecipeCopies, owned by the sandbox's root.
// The bind is made from inside the sandbox's user namespace, by path, as an unprivileged host id
// that cannot traverse a 0700 directory (root's home, `mktemp -d`); host root reads the caller's
// dir here instead. The copy's outer dir is 0700 and owned by that id, so no other host user can
// read what the recipe holds.
Result<void> copy_recipe_dir(const std::string& source, const ScratchDir& scratch, uid_t owner) {
  UniqueFd src(open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!src) return sys_error("open", "recipe dir " + source);
  UniqueFd dst(open(scratch.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst) return sys_error("open", scratch.path());
  HUTCH_TRY(copy_tree(src.get(), dst.get(), "recipe"));
  std::error_code error;
  // recursive_directory_iterator does not follow symlinks; lchown changes a link, not its target.
  for (fs::recursive_directory_iterator it(scratch.path(), error), end; !error && it != end;
       it.increment(error)) {
    if (lchown(it->path().c_str(), owner, owner) != 0) return sys_error("lchown", it->path());
  }
  if (error) return plain_error("copy recipe", scratch.path() + ": " + error.message());
  if (chown(scratch.path().c_str(), owner, owner) != 0) return sys_error("chown", scratch.path());
  return {};
}

// What the base is, for the cache key: the host rootfs changes with host.list and the host's
// packages; a directory is named by its path; a recipe by its layer.
Result<std::string> base_identity(const ResolvedRootfs& base) {
  if (!base.digests.empty()) return "layer:" + base.digests.front();
  if (!base.lower_dirs.empty()) return "dir:" + base.lower_dirs.front();
  auto hash = HUTCH_TRY(layers::Sha256::create());
  hash.update(kHostRootfsList);
  if (auto status = read_text_file("/var/lib/dpkg/status")) hash.update(*status);
  return "host:" + hash.finish_hex();
}

}  // namespace

Result<ResolvedRootfs> resolve_rootfs(const layers::LayerStore& store, std::string_view rootfs) {
  ResolvedRootfs resolved;
  if (rootfs == "host") {
    resolved.base = "host";
    return resolved;
  }
  if (rootfs.starts_with(kImagePrefix)) {
    // An imported base (hutch image import): a plain rootfs directory kept in the state dir.
    const std::string name(rootfs.substr(kImagePrefix.size()));
    HUTCH_TRY(layers::validate_name(name));
    resolved.base = store.state_dir() + "/images/" + name + "/rootfs";
    struct stat dir;
    if (::stat(resolved.base.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode))
      return plain_error("rootfs", "no image named " + name + " (hutch image import)");
    resolved.lower_dirs = {resolved.base};
    return resolved;
  }
  if (!rootfs.starts_with(kRecipePrefix)) {
    if (!rootfs.starts_with("/")) {
      return plain_error("rootfs", "\"" + std::string(rootfs) +
                                       "\" is not host, an absolute directory, recipe:NAME or "
                                       "image:NAME");
    }
    resolved.base = std::string(rootfs);
    resolved.lower_dirs = {resolved.base};
    return resolved;
  }
  const std::string name(rootfs.substr(kRecipePrefix.size()));
  auto digest = HUTCH_TRY(store.resolve_tag(name));
  if (!digest) return plain_error("rootfs", "no recipe named " + name + " (hutch recipe build)");
  auto top = HUTCH_TRY(store.get(*digest));
  std::vector<std::string> chain = {top.digest};
  chain.insert(chain.end(), top.manifest.parents.begin(), top.manifest.parents.end());
  for (const std::string& layer : chain) {
    auto info = HUTCH_TRY(store.get(layer));
    resolved.layers.push_back(store.image_path(info.digest));
    resolved.digests.push_back(info.digest);
  }
  resolved.base = top.manifest.base.empty() ? "host" : top.manifest.base;
  if (resolved.base != "host") resolved.lower_dirs = {resolved.base};
  return resolved;
}

Result<std::string> recipe_cache_key(const layers::LayerStore& store, const BakeRequest& request) {
  auto base = HUTCH_TRY(resolve_rootfs(store, request.base));
  auto identity = HUTCH_TRY(base_identity(base));
  UniqueFd dir(open(request.recipe_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return sys_error("open", "recipe dir " + request.recipe_dir);
  auto files = HUTCH_TRY(layers::digest_tree(dir.get()));
  auto key = HUTCH_TRY(layers::Sha256::create());
  key.update("hutch-recipe-v1\n" + identity + "\n" + files + "\n");
  return "sha256:" + key.finish_hex();
}

Result<BakeOutcome> bake(layers::LayerStore& store, const BakeRequest& request) {
  HUTCH_TRY(layers::validate_name(request.name));
  struct stat setup;
  if (stat((request.recipe_dir + "/setup.sh").c_str(), &setup) != 0 || !S_ISREG(setup.st_mode))
    return sys_error("stat", request.recipe_dir + "/setup.sh (a recipe needs one)");
  auto lock = HUTCH_TRY(store.lock("recipe-" + request.name));

  auto key = HUTCH_TRY(recipe_cache_key(store, request));
  BakeOutcome outcome;
  if (auto cached = HUTCH_TRY(store.find_by_cache_key(key))) {
    HUTCH_TRY(store.tag(request.name, *cached));
    outcome.digest = *cached;
    outcome.cached = true;
    return outcome;
  }

  auto base = HUTCH_TRY(resolve_rootfs(store, request.base));
  // A scratch name in the store's own dir: if this process dies mid-bake, `layers gc` knows the
  // owner is gone and removes it.
  auto self = HUTCH_TRY(read_proc_state(getpid()));
  uint64_t random = 0;
  if (getrandom(&random, sizeof random, 0) != sizeof random) return sys_error("getrandom", "");
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "bake%016llx", static_cast<unsigned long long>(random));
  ScratchDir scratch(store.state_dir() + "/layers/" +
                     layers::scratch_name({getpid(), self.start_time}, suffix));
  if (mkdir(scratch.path().c_str(), 0700) != 0) return sys_error("mkdir", scratch.path());

  SandboxSpec spec = request.sandbox;
  auto copies = HUTCH_TRY(open_recipe_copies());
  HUTCH_TRY(remove_abandoned_copies(copies.get()));
  ScratchDir recipe_copy(std::string(kRecipeCopies) + "/" +
                         layers::scratch_name({getpid(), self.start_time}, suffix));
  if (mkdir(recipe_copy.path().c_str(), 0700) != 0) return sys_error("mkdir", recipe_copy.path());
  HUTCH_TRY(copy_recipe_dir(request.recipe_dir, recipe_copy, spec.ids.host_base));
  spec.layers = base.layers;
  spec.lower_dirs = base.lower_dirs;
  spec.upper_dir = scratch.path();
  // setup.sh installs software: chown and friends within the sandbox's ids (dpkg needs them).
  spec.capabilities |= kFileOwnershipCapabilities;
  spec.binds = {BindMount{recipe_copy.path() + "/recipe", kRecipeMount, true}};
  spec.workdir = kRecipeMount;
  spec.argv = {"/bin/sh", "-c",
               "if command -v bash >/dev/null 2>&1; then exec bash -e setup.sh; fi; "
               "exec sh -e setup.sh"};
  spec.env.insert(spec.env.end(), request.bake_env.begin(), request.bake_env.end());
  UniqueFd netns;
  if (request.netns_fd >= 0) {
    netns.reset(::fcntl(request.netns_fd, F_DUPFD_CLOEXEC, 0));
    if (!netns) return sys_error("fcntl", "F_DUPFD_CLOEXEC of the bake's network namespace");
  }
  outcome.setup = HUTCH_TRY(run_sandbox(spec, std::move(netns)));
  const RunResult& run = outcome.setup;
  if (run.timed_out) return plain_error("setup.sh", "timed out; " + request.name + " unchanged");
  if (run.exit_code != 0 || run.term_signal != 0) {
    return plain_error("setup.sh",
                       "failed with exit status " +
                           std::to_string(run.term_signal ? 128 + run.term_signal : run.exit_code) +
                           "; " + request.name + " unchanged");
  }

  layers::LayerManifest manifest;
  manifest.parents = base.digests;
  manifest.built_by = "recipe " + request.name + " from " + request.recipe_dir;
  manifest.cache_key = key;
  manifest.base = base.base;
  auto layer = HUTCH_TRY(store.adopt_tree(scratch.path() + "/upper", manifest));
  HUTCH_TRY(store.tag(request.name, layer.digest));
  outcome.digest = layer.digest;
  return outcome;
}

Result<std::vector<std::string>> layers_in_use(const layers::LayerStore& store) {
  auto images = HUTCH_TRY(attached_images());
  auto all = HUTCH_TRY(store.list());
  std::vector<std::string> in_use;
  for (const layers::LayerInfo& layer : all) {
    const std::string image = store.image_path(layer.digest);
    for (const std::string& attached : images) {
      if (attached == image) in_use.push_back(layer.digest);
    }
  }
  return in_use;
}

}  // namespace hutch::recipes
