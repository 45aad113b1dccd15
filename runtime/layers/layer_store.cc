#include "runtime/layers/layer_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <deque>
#include <filesystem>
#include <map>
#include <set>

#include "runtime/base/proc_stat.h"
#include "runtime/fs/erofs.h"
#include "runtime/fs/tree_copy.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/names.h"
#include "runtime/layers/sha256.h"
#include "runtime/layers/tree_digest.h"

namespace hutch::layers {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
constexpr char kStoreLock[] = ".store.lock";

bool is_layer_name(const std::string& name) {
  return !name.starts_with('.') && digest_hex(name).has_value();
}

// mkdir -p: the missing components are created with `mode`; existing ones are left as they are.
Result<void> make_dirs(const std::string& path, mode_t mode) {
  for (size_t end = 1; end <= path.size(); ++end) {
    if (end != path.size() && path[end] != '/') continue;
    const std::string prefix = path.substr(0, end);
    if (mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return sys_error("mkdir", prefix);
  }
  return {};
}

Result<UniqueFd> open_subdir(int parent_fd, const char* name, const std::string& shown) {
  if (mkdirat(parent_fd, name, 0700) != 0 && errno != EEXIST) return sys_error("mkdirat", shown);
  UniqueFd fd(openat(parent_fd, name, kDirFlags));
  if (!fd) return sys_error("openat", shown);
  return fd;
}

// A fresh `.incoming-<pid>-<starttime>-<random>` name owned by this process. Read per call, not
// cached: the store may be used from a forked child.
Result<std::string> new_scratch_name() {
  auto self = HUTCH_TRY(read_proc_state(getpid()));
  unsigned char random[8];
  if (getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return sys_error("getrandom", "scratch name");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string suffix;
  for (unsigned char byte : random) {
    suffix.push_back(kHex[byte >> 4]);
    suffix.push_back(kHex[byte & 0xf]);
  }
  return scratch_name(ScratchOwner{getpid(), self.start_time}, suffix);
}

// Whether the process that named `name` is gone: no such pid, a pid reused by a process with
// another start time, or a zombie.
bool scratch_abandoned(std::string_view name) {
  auto owner = parse_scratch_name(name);
  if (!owner) return false;  // not one of ours: leave it alone
  auto state = read_proc_state(owner->pid);
  if (!state) return state.error().err == ENOENT || state.error().err == ESRCH;
  return state->start_time != owner->start_time || state->state == 'Z' || state->state == 'X';
}

// Removes a scratch directory on every early return unless released.
class ScratchGuard {
 public:
  ScratchGuard(int dir_fd, std::string name) : dir_fd_(dir_fd), name_(std::move(name)) {}
  ScratchGuard(const ScratchGuard&) = delete;
  ScratchGuard& operator=(const ScratchGuard&) = delete;
  ~ScratchGuard() {
    if (!name_.empty()) (void)remove_tree(dir_fd_, name_);
  }
  void release() { name_.clear(); }

 private:
  int dir_fd_;
  std::string name_;
};

Result<void> fsync_dir(int dir_fd, const std::string& shown) {
  if (fsync(dir_fd) != 0) return sys_error("fsync", shown);
  return {};
}

}  // namespace

Result<std::string> layer_digest(std::string_view tree_digest,
                                 const std::vector<std::string>& parents) {
  std::string text = "hutch-layer-v1\ntree=" + std::string(tree_digest) + "\n";
  for (const std::string& parent : parents) text += "parent=" + parent + "\n";
  return sha256_digest(text);
}

Result<LayerStore> LayerStore::open(const std::string& state_dir) {
  HUTCH_TRY(make_dirs(state_dir, 0700));
  LayerStore store(state_dir);
  store.state_fd_ = UniqueFd(::open(state_dir.c_str(), kDirFlags));
  if (!store.state_fd_) return sys_error("open", state_dir);
  auto layers = HUTCH_TRY(open_subdir(store.state_fd_.get(), "layers", state_dir + "/layers"));
  auto tags = HUTCH_TRY(open_subdir(store.state_fd_.get(), "tags", state_dir + "/tags"));
  auto locks = HUTCH_TRY(open_subdir(store.state_fd_.get(), "locks", state_dir + "/locks"));
  store.layers_fd_ = std::move(layers);
  store.tags_fd_ = std::move(tags);
  store.locks_fd_ = std::move(locks);
  return store;
}

Result<UniqueFd> LayerStore::store_lock(int operation) const {
  UniqueFd fd(openat(locks_fd_.get(), kStoreLock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_error("openat", state_dir_ + "/locks/" + kStoreLock);
  while (flock(fd.get(), operation) != 0) {
    if (errno != EINTR) return sys_error("flock", state_dir_ + "/locks/" + kStoreLock);
  }
  return fd;
}

Result<std::pair<std::string, UniqueFd>> LayerStore::make_scratch_dir() const {
  auto scratch = HUTCH_TRY(new_scratch_name());
  if (mkdirat(layers_fd_.get(), scratch.c_str(), 0700) != 0) {
    return sys_error("mkdirat", state_dir_ + "/layers/" + scratch);
  }
  UniqueFd fd(openat(layers_fd_.get(), scratch.c_str(), kDirFlags));
  if (!fd) {
    Error error = sys_error("openat", state_dir_ + "/layers/" + scratch).error();
    (void)remove_tree(layers_fd_.get(), scratch);
    return std::unexpected(error);
  }
  return std::pair{std::move(scratch), std::move(fd)};
}

Result<LayerInfo> LayerStore::add_tree(int src_dir_fd, const LayerManifest& manifest) {
  auto guard = HUTCH_TRY(store_lock(LOCK_SH));
  auto scratch = HUTCH_TRY(make_scratch_dir());
  ScratchGuard cleanup(layers_fd_.get(), scratch.first);
  UniqueFd& scratch_fd = scratch.second;

  auto copied = HUTCH_TRY(copy_tree(src_dir_fd, scratch_fd.get(), "tree"));
  // The digest is taken from the copy, the bytes that will actually serve.
  UniqueFd tree(openat(scratch_fd.get(), "tree", kDirFlags));
  if (!tree) return sys_error("openat", state_dir_ + "/layers/" + scratch.first + "/tree");
  auto digest = HUTCH_TRY(digest_tree(tree.get()));
  auto info = finish_layer(scratch.first, scratch_fd.get(), digest, copied.bytes, manifest);
  if (info) cleanup.release();
  return info;
}

Result<LayerInfo> LayerStore::adopt_tree(const std::string& dir_path,
                                         const LayerManifest& manifest) {
  auto guard = HUTCH_TRY(store_lock(LOCK_SH));
  UniqueFd source(::open(dir_path.c_str(), kDirFlags));
  if (!source) return sys_error("open", dir_path);
  auto digest = HUTCH_TRY(digest_tree_with_size(source.get()));

  auto scratch = HUTCH_TRY(make_scratch_dir());
  ScratchGuard cleanup(layers_fd_.get(), scratch.first);
  UniqueFd& scratch_fd = scratch.second;
  if (renameat(AT_FDCWD, dir_path.c_str(), scratch_fd.get(), "tree") != 0) {
    if (errno != EXDEV) return sys_error("rename", dir_path + " into " + state_dir_ + "/layers");
    // Another filesystem: copy, then remove the original so the contract (dir_path consumed)
    // holds either way.
    HUTCH_TRY(copy_tree(source.get(), scratch_fd.get(), "tree"));
    std::filesystem::path path = std::filesystem::path(dir_path).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "a/b/" normalizes to "a/b/"
    const std::string parent = path.has_parent_path() ? path.parent_path().string() : ".";
    UniqueFd parent_fd(::open(parent.c_str(), kDirFlags));
    if (!parent_fd) return sys_error("open", parent);
    HUTCH_TRY(remove_tree(parent_fd.get(), path.filename().string()));
  } else {
    // Moved, not copied: overlayfs's bookkeeping in the upper (origin, impure, ...) is removed
    // here, as the copy would have left it out (tree_copy.h).
    UniqueFd tree(openat(scratch_fd.get(), "tree", kDirFlags));
    if (!tree) return sys_error("openat", state_dir_ + "/layers/" + scratch.first + "/tree");
    HUTCH_TRY(strip_overlay_xattrs(tree.get()));
  }
  auto info = finish_layer(scratch.first, scratch_fd.get(), digest.digest, digest.bytes, manifest);
  if (info) cleanup.release();
  return info;
}

Result<LayerInfo> LayerStore::finish_layer(const std::string& scratch, int scratch_fd,
                                           const std::string& tree_digest, uint64_t size,
                                           const LayerManifest& manifest) {
  LayerManifest written;
  for (const std::string& parent : manifest.parents) {
    auto hex = HUTCH_TRY(digest_hex(parent));
    written.parents.push_back("sha256:" + hex);
  }
  auto digest = HUTCH_TRY(layer_digest(tree_digest, written.parents));
  written.digest = digest;
  written.tree_digest = tree_digest;
  written.created = static_cast<int64_t>(std::time(nullptr));
  written.size = size;
  written.built_by = manifest.built_by;
  written.cache_key = manifest.cache_key;
  written.base = manifest.base;
  const std::string hex = digest.substr(7);
  const std::string final_path = state_dir_ + "/layers/" + hex;

  const std::string scratch_path = state_dir_ + "/layers/" + scratch;
  HUTCH_TRY(hutch::make_erofs_image(scratch_path + "/tree", scratch_path + "/layer.erofs"));
  HUTCH_TRY(write_new_file(scratch_fd, "manifest", format_manifest(written)));
  // One syncfs instead of an fsync per file: the tree must be durable before its final name is.
  if (syncfs(scratch_fd) != 0) return sys_error("syncfs", state_dir_ + "/layers/" + scratch);
  if (renameat(layers_fd_.get(), scratch.c_str(), layers_fd_.get(), hex.c_str()) != 0) {
    if (errno != EEXIST && errno != ENOTEMPTY) return sys_error("rename", final_path);
    // Same content, same parents: the layer is already here. Restart its gc grace, since the
    // caller is about to reference it.
    HUTCH_TRY(remove_tree(layers_fd_.get(), scratch));
    if (utimensat(layers_fd_.get(), hex.c_str(), nullptr, 0) != 0) {
      return sys_error("utimensat", final_path);
    }
    return get(written.digest);
  }
  HUTCH_TRY(fsync_dir(layers_fd_.get(), state_dir_ + "/layers"));
  return LayerInfo{written.digest, final_path + "/tree", written};
}

Result<LayerInfo> LayerStore::get(std::string_view digest) const {
  auto hex = HUTCH_TRY(digest_hex(digest));
  auto text = read_small_file(layers_fd_.get(), hex + "/manifest");
  if (!text) {
    if (text.error().err == ENOENT) return sys_error("layer", "sha256:" + hex, ENOENT);
    return std::unexpected(text.error());
  }
  auto manifest = parse_manifest(*text);
  if (!manifest) {
    manifest.error().detail =
        state_dir_ + "/layers/" + hex + "/manifest: " + manifest.error().detail;
    return std::unexpected(manifest.error());
  }
  if (manifest->digest != "sha256:" + hex) {
    return plain_error("layer",
                       state_dir_ + "/layers/" + hex + " has manifest digest " + manifest->digest);
  }
  return LayerInfo{manifest->digest, tree_path(hex), std::move(*manifest)};
}

Result<std::vector<LayerInfo>> LayerStore::list() const {
  auto names = HUTCH_TRY(read_dir_names(layers_fd_.get()));
  std::vector<LayerInfo> layers;
  for (const std::string& name : names) {
    if (!is_layer_name(name)) continue;  // .incoming-* and strays
    auto info = get(name);
    if (!info) {
      if (info.error().err == ENOENT) continue;  // removed since the listing
      return std::unexpected(info.error());
    }
    layers.push_back(std::move(*info));
  }
  std::stable_sort(layers.begin(), layers.end(), [](const LayerInfo& a, const LayerInfo& b) {
    return a.manifest.created < b.manifest.created;
  });
  return layers;
}

std::string LayerStore::image_path(std::string_view digest) const {
  auto hex = digest_hex(digest);
  return state_dir_ + "/layers/" + (hex ? *hex : std::string(digest)) + "/layer.erofs";
}

std::string LayerStore::tree_path(std::string_view digest) const {
  if (digest.starts_with("sha256:")) digest.remove_prefix(7);
  return state_dir_ + "/layers/" + std::string(digest) + "/tree";
}

Result<void> LayerStore::tag(std::string_view name, std::string_view digest) {
  HUTCH_TRY(validate_name(name));
  auto hex = HUTCH_TRY(digest_hex(digest));
  auto guard = HUTCH_TRY(store_lock(LOCK_SH));
  HUTCH_TRY(get(hex));
  auto temp = HUTCH_TRY(new_scratch_name());
  if (auto wrote = write_new_file(tags_fd_.get(), temp, "sha256:" + hex + "\n"); !wrote) {
    (void)unlinkat(tags_fd_.get(), temp.c_str(), 0);
    return wrote;
  }
  const std::string tag_name(name);
  if (renameat(tags_fd_.get(), temp.c_str(), tags_fd_.get(), tag_name.c_str()) != 0) {
    int err = errno;
    (void)unlinkat(tags_fd_.get(), temp.c_str(), 0);
    return sys_error("rename", state_dir_ + "/tags/" + tag_name, err);
  }
  return fsync_dir(tags_fd_.get(), state_dir_ + "/tags");
}

Result<std::optional<std::string>> LayerStore::resolve_tag(std::string_view name) const {
  HUTCH_TRY(validate_name(name));
  auto text = read_small_file(tags_fd_.get(), std::string(name));
  if (!text) {
    if (text.error().err == ENOENT) return std::nullopt;
    return std::unexpected(text.error());
  }
  while (!text->empty() && text->back() == '\n') text->pop_back();
  auto hex = digest_hex(*text);
  if (!hex) {
    return plain_error("tag",
                       state_dir_ + "/tags/" + std::string(name) + " holds \"" + *text + "\"");
  }
  return "sha256:" + *hex;
}

Result<std::vector<std::pair<std::string, std::string>>> LayerStore::tags() const {
  auto names = HUTCH_TRY(read_dir_names(tags_fd_.get()));
  std::vector<std::pair<std::string, std::string>> tags;
  for (const std::string& name : names) {
    if (!validate_name(name)) continue;  // temp files and strays
    auto digest = HUTCH_TRY(resolve_tag(name));
    if (digest) tags.emplace_back(name, *digest);
  }
  return tags;
}

Result<void> LayerStore::untag(std::string_view name) {
  HUTCH_TRY(validate_name(name));
  const std::string tag_name(name);
  if (unlinkat(tags_fd_.get(), tag_name.c_str(), 0) != 0) {
    return sys_error("unlink", state_dir_ + "/tags/" + tag_name);
  }
  return fsync_dir(tags_fd_.get(), state_dir_ + "/tags");
}

Result<std::optional<std::string>> LayerStore::find_by_cache_key(std::string_view key) const {
  if (key.empty()) return std::nullopt;
  auto layers = HUTCH_TRY(list());
  // list() is oldest first: the last match is the newest.
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (it->manifest.cache_key == key) return it->digest;
  }
  return std::nullopt;
}

Result<UniqueFd> LayerStore::lock(std::string_view name) {
  HUTCH_TRY(validate_name(name));
  const std::string file = std::string(name) + ".lock";
  UniqueFd fd(
      openat(locks_fd_.get(), file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_error("openat", state_dir_ + "/locks/" + file);
  while (flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return sys_error("flock", state_dir_ + "/locks/" + file);
  }
  return fd;
}

Result<std::vector<std::string>> LayerStore::gc(const std::vector<std::string>& in_use_digests,
                                                std::chrono::seconds grace) {
  auto guard = HUTCH_TRY(store_lock(LOCK_EX));
  return collect_garbage(in_use_digests, grace);
}

Result<std::vector<std::string>> LayerStore::collect_garbage(const std::vector<std::string>& in_use,
                                                             std::chrono::seconds grace) {
  auto layers = HUTCH_TRY(list());
  std::map<std::string, const LayerInfo*> by_digest;
  for (const LayerInfo& layer : layers) by_digest.emplace(layer.digest, &layer);

  std::deque<std::string> pending;
  for (const std::string& digest : in_use) {
    auto hex = HUTCH_TRY(digest_hex(digest));
    pending.push_back("sha256:" + hex);
  }
  auto tags = HUTCH_TRY(this->tags());
  for (const auto& [name, digest] : tags) pending.push_back(digest);
  std::set<std::string> reachable;
  while (!pending.empty()) {
    std::string digest = std::move(pending.front());
    pending.pop_front();
    if (!reachable.insert(digest).second) continue;
    auto layer = by_digest.find(digest);
    if (layer == by_digest.end()) continue;  // a parent outside the store
    for (const std::string& parent : layer->second->manifest.parents) pending.push_back(parent);
  }

  const time_t cutoff = std::time(nullptr) - static_cast<time_t>(grace.count());
  std::vector<std::string> removed;
  for (const LayerInfo& layer : layers) {
    if (reachable.contains(layer.digest)) continue;
    const std::string hex = layer.digest.substr(7);
    struct stat st;
    if (fstatat(layers_fd_.get(), hex.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_mtime > cutoff) continue;  // just added: its tag may be on the way
    HUTCH_TRY(remove_layer(hex));
    removed.push_back(layer.digest);
  }

  HUTCH_TRY(remove_abandoned_scratch(layers_fd_.get()));
  HUTCH_TRY(remove_abandoned_scratch(tags_fd_.get()));
  return removed;
}

Result<void> LayerStore::remove_abandoned_scratch(int dir_fd) const {
  auto names = HUTCH_TRY(read_dir_names(dir_fd));
  for (const std::string& name : names) {
    if (!name.starts_with(kScratchPrefix) || !scratch_abandoned(name)) continue;
    HUTCH_TRY(remove_tree(dir_fd, name));
  }
  return {};
}

Result<void> LayerStore::remove_layer(const std::string& hex) {
  // Out of its final name first, so a crash mid-removal leaves an `.incoming-*` leftover for the
  // next gc rather than a half layer.
  auto scratch = HUTCH_TRY(new_scratch_name());
  if (renameat(layers_fd_.get(), hex.c_str(), layers_fd_.get(), scratch.c_str()) != 0) {
    if (errno == ENOENT) return {};
    return sys_error("rename", state_dir_ + "/layers/" + hex);
  }
  HUTCH_TRY(fsync_dir(layers_fd_.get(), state_dir_ + "/layers"));
  return remove_tree(layers_fd_.get(), scratch);
}

Result<void> LayerStore::remove(std::string_view digest) {
  auto hex = HUTCH_TRY(digest_hex(digest));
  const std::string full = "sha256:" + hex;
  auto guard = HUTCH_TRY(store_lock(LOCK_EX));
  HUTCH_TRY(get(full));
  auto tags = HUTCH_TRY(this->tags());
  for (const auto& [name, target] : tags) {
    if (target == full) return plain_error("remove layer", full + " is tagged as " + name);
  }
  auto layers = HUTCH_TRY(list());
  for (const LayerInfo& layer : layers) {
    const auto& parents = layer.manifest.parents;
    if (std::find(parents.begin(), parents.end(), full) != parents.end()) {
      return plain_error("remove layer", full + " is a parent of " + layer.digest);
    }
  }
  return remove_layer(hex);
}

}  // namespace hutch::layers
