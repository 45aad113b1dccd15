#include "cli/image/images.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "runtime/base/proc_stat.h"
#include "runtime/base/unique_fd.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/names.h"
#include "runtime/layers/tree_digest.h"

namespace hutch::image {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
constexpr const char* kRecordFile = "image.json";
constexpr std::string_view kRemovingPrefix = ".removing-";
// Files of an image compared with what a sandbox sees: enough that a sandbox replacing some of
// them in its upper is still recognised, few enough for a quick scan of every process.
constexpr size_t kSampleFiles = 16;

struct SampleFile {
  std::string path;  // relative to the rootfs
  ino_t ino;
  off_t size;
  timespec mtime;
};

// Up to kSampleFiles non-empty regular files of the tree under `root_fd`, shallowest first
// (/bin, /etc and /usr hold the files every sandbox keeps).
Result<std::vector<SampleFile>> sample_files(int root_fd) {
  std::vector<SampleFile> samples;
  std::deque<std::pair<UniqueFd, std::string>> dirs;
  dirs.emplace_back(UniqueFd(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0)), "");
  while (!dirs.empty() && samples.size() < kSampleFiles) {
    auto [dir, rel] = std::move(dirs.front());
    dirs.pop_front();
    if (!dir) return sys_error("openat", rel.empty() ? "." : rel);
    auto names = read_dir_names(dir.get());
    if (!names) return std::unexpected(names.error());
    for (const std::string& name : *names) {
      const std::string path = rel.empty() ? name : rel + "/" + name;
      struct stat st;
      if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return sys_error("fstatat", path);
      if (S_ISDIR(st.st_mode)) {
        dirs.emplace_back(UniqueFd(openat(dir.get(), name.c_str(), kDirFlags)), path);
      } else if (S_ISREG(st.st_mode) && st.st_size > 0 && samples.size() < kSampleFiles) {
        samples.push_back({path, st.st_ino, st.st_size, st.st_mtim});
      }
    }
  }
  return samples;
}

// Whether the root filesystem of process `pid` shows one of `samples` as that very file.
bool shows_sample(pid_t pid, const std::vector<SampleFile>& samples) {
  const std::string root = "/proc/" + std::to_string(pid) + "/root/";
  for (const SampleFile& sample : samples) {
    struct stat st;
    if (lstat((root + sample.path).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_ino == sample.ino && st.st_size == sample.size &&
        st.st_mtim.tv_sec == sample.mtime.tv_sec && st.st_mtim.tv_nsec == sample.mtime.tv_nsec) {
      return true;
    }
  }
  return false;
}

Result<ImageRecord> read_record(int images_fd, const std::string& name, const std::string& images) {
  ImageRecord record;
  record.name = name;
  UniqueFd image(openat(images_fd, name.c_str(), kDirFlags));
  if (!image) return sys_error("openat", images + "/" + name);
  auto text = read_small_file(image.get(), kRecordFile);
  if (text) {
    try {
      const auto json = nlohmann::json::parse(*text);
      record.digest = json.at("digest").get<std::string>();
      record.size = json.at("size").get<uint64_t>();
      record.created = json.at("created").get<int64_t>();
      record.platform = json.value("platform", "");
      record.source = json.value("source", "");
      return record;
    } catch (const nlohmann::json::exception& e) {
      return plain_error("image ls", images + "/" + name + "/" + kRecordFile + ": " + e.what());
    }
  }
  if (text.error().err != ENOENT) return std::unexpected(text.error());
  // Imported before image.json existed.
  UniqueFd rootfs(openat(image.get(), "rootfs", kDirFlags));
  if (!rootfs) return sys_error("openat", images + "/" + name + "/rootfs");
  auto digest = layers::digest_tree_with_size(rootfs.get());
  if (!digest) return std::unexpected(digest.error());
  struct stat st;
  if (fstat(rootfs.get(), &st) != 0) return sys_error("fstat", images + "/" + name + "/rootfs");
  record.digest = digest->digest;
  record.size = digest->bytes;
  record.created = st.st_mtim.tv_sec;
  return record;
}

// The recipes (tags) whose top layer was baked on `rootfs`.
Result<std::vector<std::string>> recipes_on(const layers::LayerStore& store,
                                            const std::string& rootfs) {
  auto tags = store.tags();
  if (!tags) return std::unexpected(tags.error());
  std::vector<std::string> names;
  for (const auto& [tag, digest] : *tags) {
    auto layer = store.get(digest);
    if (layer && layer->manifest.base == rootfs) names.push_back(tag);
  }
  return names;
}

// Finishes the removals of `.removing-<name>-<pid>` dirs whose remover died (no such pid, or a
// zombie), unless a sandbox still runs on one: it was renamed away before the check that would
// have put it back.
Result<void> finish_abandoned_removals(int images_fd) {
  auto names = read_dir_names(images_fd);
  if (!names) return std::unexpected(names.error());
  for (const std::string& name : *names) {
    if (!name.starts_with(kRemovingPrefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + name.rfind('-') + 1, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    auto owner = read_proc_state(static_cast<pid_t>(pid));
    if (!owner && owner.error().err != ENOENT && owner.error().err != ESRCH)
      return std::unexpected(owner.error());
    if (owner && owner->state != 'Z' && owner->state != 'X') continue;
    UniqueFd rootfs(openat(images_fd, (name + "/rootfs").c_str(), kDirFlags));
    if (rootfs) {
      auto user = sandbox_on(rootfs.get());
      if (!user) return std::unexpected(user.error());
      if (*user) continue;
    }
    if (auto removed = remove_tree(images_fd, name); !removed) return removed;
  }
  return {};
}

}  // namespace

// One process per mount namespace is looked at; processes whose root is the host's are skipped
// (they see the image at its own path, not at the sandbox's).
Result<std::optional<pid_t>> sandbox_on(int rootfs_fd) {
  auto samples = sample_files(rootfs_fd);
  if (!samples) return std::unexpected(samples.error());
  if (samples->empty()) return std::nullopt;
  struct stat host_root;
  if (stat("/", &host_root) != 0) return sys_error("stat", "/");
  std::unique_ptr<DIR, int (*)(DIR*)> proc(opendir("/proc"), closedir);
  if (!proc) return sys_error("opendir", "/proc");
  std::set<std::pair<dev_t, ino_t>> namespaces;
  while (dirent* entry = readdir(proc.get())) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == getpid()) continue;
    const std::string dir = "/proc/" + std::string(entry->d_name);
    struct stat ns, root;
    // A process gone in between, or a kernel thread, has neither: not a sandbox.
    if (stat((dir + "/ns/mnt").c_str(), &ns) != 0 || stat((dir + "/root").c_str(), &root) != 0)
      continue;
    if (root.st_dev == host_root.st_dev && root.st_ino == host_root.st_ino) continue;
    if (!namespaces.insert({ns.st_dev, ns.st_ino}).second) continue;
    if (shows_sample(static_cast<pid_t>(pid), *samples)) return static_cast<pid_t>(pid);
  }
  return std::nullopt;
}

std::string format_image_record(const ImageRecord& record) {
  return nlohmann::json{{"digest", record.digest},
                        {"size", record.size},
                        {"created", record.created},
                        {"platform", record.platform},
                        {"source", record.source}}
             .dump() +
         "\n";
}

Result<std::vector<ImageRecord>> list_images(const layers::LayerStore& store) {
  const std::string images = store.state_dir() + "/images";
  UniqueFd images_fd(::open(images.c_str(), kDirFlags));
  if (!images_fd) {
    if (errno == ENOENT) return std::vector<ImageRecord>{};
    return sys_error("open", images);
  }
  auto names = read_dir_names(images_fd.get());
  if (!names) return std::unexpected(names.error());
  std::vector<ImageRecord> records;
  for (const std::string& name : *names) {
    if (name.starts_with('.')) continue;  // being removed
    auto record = read_record(images_fd.get(), name, images);
    if (!record) return std::unexpected(record.error());
    records.push_back(std::move(*record));
  }
  return records;
}

Result<std::vector<std::string>> remove_image(layers::LayerStore& store, const std::string& name) {
  if (auto valid = layers::validate_name(name); !valid) return std::unexpected(valid.error());
  auto lock = store.lock("image-" + name);  // no import of the same name meanwhile
  if (!lock) return std::unexpected(lock.error());
  const std::string images = store.state_dir() + "/images";
  const std::string rootfs = images + "/" + name + "/rootfs";
  UniqueFd images_fd(::open(images.c_str(), kDirFlags));
  if (!images_fd && errno != ENOENT) return sys_error("open", images);
  struct stat st;
  if (!images_fd || fstatat(images_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return std::unexpected(Error{"image rm", "no image named " + name, ENOENT});
  }
  // Out of its name first: a sandbox starting from now on cannot open it, so the check below
  // cannot be overtaken.
  if (auto finished = finish_abandoned_removals(images_fd.get()); !finished)
    return std::unexpected(finished.error());
  const std::string removing = std::string(kRemovingPrefix) + name + "-" + std::to_string(getpid());
  if (renameat(images_fd.get(), name.c_str(), images_fd.get(), removing.c_str()) != 0)
    return sys_error("renameat", images + "/" + name + " to " + removing);
  auto restore = [&](Error error) -> std::unexpected<Error> {
    if (renameat(images_fd.get(), removing.c_str(), images_fd.get(), name.c_str()) != 0)
      return sys_error("renameat", images + "/" + removing + " back to " + name);
    return std::unexpected(std::move(error));
  };
  UniqueFd moved(openat(images_fd.get(), (removing + "/rootfs").c_str(), kDirFlags));
  if (!moved) return restore(sys_error("openat", images + "/" + removing + "/rootfs").error());
  auto pid = sandbox_on(moved.get());
  if (!pid) return restore(pid.error());
  if (*pid) {
    return restore(
        Error{"image rm",
              name + " is in use by a running sandbox (pid " + std::to_string(**pid) + ")", EBUSY});
  }
  auto recipes = recipes_on(store, rootfs);
  if (!recipes) return restore(recipes.error());
  if (auto removed = remove_tree(images_fd.get(), removing); !removed)
    return std::unexpected(removed.error());
  return recipes;
}

}  // namespace hutch::image
