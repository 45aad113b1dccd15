#include "runtime/fs/host_rootfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "runtime/fs/overlay_xattr.h"
#include "runtime/fs/paths.h"

extern const char kHostRootfsList[];

namespace hutch {
namespace {

std::optional<std::vector<std::string>> list_host_dir(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(dir);
  return names;
}

// The embedded rootfs/host.list, parsed once (parse_host_rootfs_list is declared in the header).
const Result<std::vector<HostRootfsRule>>& this_host_rules() {
  static const auto rules = parse_host_rootfs_list(kHostRootfsList);
  return rules;
}

}  // namespace

Result<std::vector<HostRootfsRule>> parse_host_rootfs_list(std::string_view text) {
  std::vector<HostRootfsRule> rules;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::istringstream words(line);
    std::string verb, path, mode, extra;
    words >> verb >> path >> mode >> extra;
    if (verb.empty() || verb[0] == '#') continue;
    const std::string where = "line " + std::to_string(number) + ": ";
    if (!is_normal_absolute(path) || path == "/") {
      return plain_error("host rootfs list",
                         where + "\"" + path + "\" is not a normalized absolute path");
    }
    if (verb == "show" && mode.empty()) {
      rules.push_back({HostRootfsRule::Kind::kShow, path, 0});
    } else if (verb == "empty" && !mode.empty() && extra.empty() &&
               mode.find_first_not_of("01234567") == std::string::npos && mode.size() <= 4) {
      rules.push_back(
          {HostRootfsRule::Kind::kEmpty, path, static_cast<mode_t>(std::stoul(mode, nullptr, 8))});
    } else {
      return plain_error("host rootfs list",
                         where + "expected \"show PATH\" or \"empty PATH MODE\"");
    }
  }
  // A rule inside a shown or emptied directory would silently hide more than it says.
  for (const HostRootfsRule& outer : rules) {
    for (const HostRootfsRule& inner : rules) {
      if (&outer == &inner) continue;
      if (outer.path == inner.path) {
        return plain_error("host rootfs list", "\"" + inner.path + "\" appears twice");
      }
      if (inner.path.starts_with(outer.path + "/")) {
        return plain_error("host rootfs list", "\"" + inner.path + "\" lies inside \"" +
                                                   outer.path + "\", which a rule already covers");
      }
    }
  }
  return rules;
}

std::vector<SkeletonEntry> plan_host_skeleton(const std::vector<HostRootfsRule>& rules,
                                              const ListDir& list_dir) {
  std::map<std::string, const HostRootfsRule*> by_path;
  std::set<std::string> parents;  // directories holding a rule: they get an allowlist
  for (const HostRootfsRule& rule : rules) {
    by_path[rule.path] = &rule;
    for (std::string dir = parent_path(rule.path);; dir = parent_path(dir)) {
      parents.insert(dir);
      if (dir == "/") break;
    }
  }

  std::map<std::string, SkeletonEntry> entries;  // sorted: parents before children
  for (const std::string& parent : parents) {
    if (parent != "/") entries[parent] = {SkeletonEntry::Kind::kDir, parent, 0755};
    for (const std::string& name : list_dir(parent).value_or(std::vector<std::string>{})) {
      const std::string child = join_path(parent, name);
      if (by_path.contains(child) || parents.contains(child)) continue;
      entries[child] = {SkeletonEntry::Kind::kWhiteout, child, 0};
    }
  }
  for (const HostRootfsRule& rule : rules) {
    if (rule.kind == HostRootfsRule::Kind::kEmpty) {
      entries[rule.path] = {SkeletonEntry::Kind::kOpaqueDir, rule.path, rule.mode};
    }
  }
  std::vector<SkeletonEntry> plan;
  for (auto& [path, entry] : entries) plan.push_back(std::move(entry));
  return plan;
}

Result<std::vector<SkeletonEntry>> plan_this_host_skeleton() {
  const auto& rules = this_host_rules();
  if (!rules) return std::unexpected(rules.error());
  return plan_host_skeleton(*rules, list_host_dir);
}

Result<UniqueFd> build_skeleton_mount(const std::vector<SkeletonEntry>& entries, uid_t owner) {
  UniqueFd context(fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!context) return sys_error("fsopen", "tmpfs (skeleton)");
  const std::string id = std::to_string(owner);
  for (auto [key, value] :
       {std::pair{"mode", "0755"}, {"size", "1m"}, {"uid", id.c_str()}, {"gid", id.c_str()}}) {
    if (fsconfig(context.get(), FSCONFIG_SET_STRING, key, value, 0) != 0) {
      return sys_error("fsconfig", std::string("tmpfs ") + key + "=" + value);
    }
  }
  if (fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return sys_error("fsconfig", "FSCONFIG_CMD_CREATE tmpfs (skeleton)");
  }
  UniqueFd root(fsmount(context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!root) return sys_error("fsmount", "tmpfs (skeleton)");

  for (const SkeletonEntry& entry : entries) {
    const char* path = entry.path.c_str() + 1;  // relative to the tmpfs root
    if (entry.kind == SkeletonEntry::Kind::kWhiteout) {
      // Overlayfs reads a 0/0 character device in a lower layer as "deleted here".
      if (mknodat(root.get(), path, S_IFCHR | 0, makedev(0, 0)) != 0)
        return sys_error("mknodat", entry.path);
      continue;
    }
    if (mkdirat(root.get(), path, entry.mode) != 0) return sys_error("mkdirat", entry.path);
    if (fchmodat(root.get(), path, entry.mode, 0) != 0) return sys_error("fchmodat", entry.path);
    if (fchownat(root.get(), path, owner, owner, AT_SYMLINK_NOFOLLOW) != 0)
      return sys_error("fchownat", entry.path);
    if (entry.kind == SkeletonEntry::Kind::kOpaqueDir) {
      UniqueFd dir(openat(root.get(), path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      // trusted.*: the overlay is mounted from the host's user namespace (runtime/fs/overlay.h).
      if (!dir || fsetxattr(dir.get(), kOverlayOpaqueXattr, "y", 1, 0) != 0) {
        return sys_error("fsetxattr", std::string(kOverlayOpaqueXattr) + " on " + entry.path);
      }
    }
  }
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  if (mount_setattr(root.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    return sys_error("mount_setattr", "MOUNT_ATTR_RDONLY on the skeleton");
  }
  return root;
}

// ---- SkeletonCache ----

namespace {

// A directory's mtime this close to now may still change within the same clock tick.
constexpr time_t kStableAfterSeconds = 1;

}  // namespace

bool SkeletonCache::Stamp::operator==(const Stamp& other) const {
  return path == other.path && exists == other.exists && dev == other.dev && ino == other.ino &&
         mtime.tv_sec == other.mtime.tv_sec && mtime.tv_nsec == other.mtime.tv_nsec;
}

SkeletonCache::SkeletonCache(std::vector<HostRootfsRule> rules, std::string root)
    : rules_(std::move(rules)), root_(root == "/" ? "" : std::move(root)) {}

Result<SkeletonCache> SkeletonCache::for_this_host() {
  const auto& rules = this_host_rules();
  if (!rules) return std::unexpected(rules.error());
  return SkeletonCache(*rules);
}

SkeletonCache::Stamp SkeletonCache::stamp(const std::string& path) {
  Stamp out;
  out.path = path;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    out.exists = true;
    out.dev = st.st_dev;
    out.ino = st.st_ino;
    out.mtime = st.st_mtim;
  }
  return out;
}

bool SkeletonCache::fresh(uid_t owner) const {
  if (!skeleton_ || !stable_ || owner != owner_) return false;
  for (const Stamp& before : stamps_) {
    if (!(stamp(before.path) == before)) return false;
  }
  return true;
}

Result<void> SkeletonCache::rebuild(uid_t owner) {
  std::vector<Stamp> stamps;
  // Stamped before listed: a change during the listing shows at the next take.
  auto list = [&](const std::string& dir) {
    stamps.push_back(stamp(root_ + dir));
    return list_host_dir(root_ + dir);
  };
  std::vector<SkeletonEntry> entries = plan_host_skeleton(rules_, list);
  auto built = HUTCH_TRY(build_skeleton_mount(entries, owner));
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  stable_ = std::all_of(stamps.begin(), stamps.end(), [&](const Stamp& s) {
    return !s.exists || now.tv_sec - s.mtime.tv_sec > kStableAfterSeconds;
  });
  skeleton_ = std::move(built);
  stamps_ = std::move(stamps);
  owner_ = owner;
  ++builds_;
  return {};
}

Result<UniqueFd> SkeletonCache::take(uid_t owner) {
  if (clone_unsupported_) return UniqueFd();
  if (!fresh(owner)) {
    HUTCH_TRY(rebuild(owner));
  }
  UniqueFd copy(
      open_tree(skeleton_.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!copy) {
    if (errno != EINVAL) return sys_error("open_tree", "OPEN_TREE_CLONE of the cached skeleton");
    clone_unsupported_ = true;
    skeleton_.reset();
  }
  return copy;
}

}  // namespace hutch
