// The embedded default rootfs "host": the host's own /usr and libraries plus harmless parts of
// /etc, read-only, with everything else hidden. A small "skeleton" lower layer of whiteouts and
// opaque directories sits above the host's root in the overlay. The parent builds it on a
// detached tmpfs while the child sets up its namespaces: overlayfs refuses a lower layer inside
// another (so it cannot live on the host's root filesystem), and a detached mount leaves
// nothing on the host.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

struct HostRootfsRule {
  enum class Kind { kShow, kEmpty };
  Kind kind = Kind::kShow;
  std::string path;  // absolute, normalized
  mode_t mode = 0;   // kEmpty only
};

// Parses rootfs/host.list (see the comments in that file).
Result<std::vector<HostRootfsRule>> parse_host_rootfs_list(std::string_view text);

struct SkeletonEntry {
  enum class Kind { kDir, kOpaqueDir, kWhiteout };
  Kind kind = Kind::kDir;
  std::string path;  // absolute inside the rootfs
  mode_t mode = 0755;
  bool operator==(const SkeletonEntry&) const = default;
};

// Names in a host directory, or nullopt when it does not exist.
using ListDir = std::function<std::optional<std::vector<std::string>>(const std::string&)>;

// Pure: the skeleton's entries, parents before children, for the host as `list_dir` shows it.
std::vector<SkeletonEntry> plan_host_skeleton(const std::vector<HostRootfsRule>& rules,
                                              const ListDir& list_dir);

// The skeleton for this host as it is now, from the embedded rootfs/host.list.
Result<std::vector<SkeletonEntry>> plan_this_host_skeleton();

// A detached, read-only tmpfs holding `entries`, its directories owned by `owner` (the host id
// of the sandbox's root). Opaque directories need user xattrs on tmpfs (Linux 6.6).
Result<UniqueFd> build_skeleton_mount(const std::vector<SkeletonEntry>& entries, uid_t owner);

// The skeleton built once and handed out as clones, for a long-lived process that starts many
// sandboxes (hutchd's zygote): planning and building it cost ~0.6 ms per sandbox. It is planned
// and built again whenever a host directory it lists changed since: each take() compares their
// inode and mtime with what they were before the listing. A directory modified less than a
// second before it was listed is not trusted to be stable (mtime has jiffy granularity): such a
// build serves one take only. Not thread-safe.
class SkeletonCache {
 public:
  // `root` prefixes the host paths of `rules` ("/" for this host; a test tree in tests).
  SkeletonCache(std::vector<HostRootfsRule> rules, std::string root = "/");
  // This host, with the embedded rootfs/host.list.
  static Result<SkeletonCache> for_this_host();

  // A detached read-only copy of the skeleton for a sandbox whose root is host id `owner`. An
  // empty fd when this kernel cannot clone a detached mount (open_tree: Linux 6.15): callers
  // then build their own, as without a cache.
  Result<UniqueFd> take(uid_t owner);
  // How many times the skeleton was planned and built (for tests and logs).
  size_t builds() const { return builds_; }

 private:
  struct Stamp {
    std::string path;
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    timespec mtime{};
    bool operator==(const Stamp& other) const;
  };
  static Stamp stamp(const std::string& path);
  bool fresh(uid_t owner) const;
  Result<void> rebuild(uid_t owner);

  std::vector<HostRootfsRule> rules_;
  std::string root_;
  UniqueFd skeleton_;
  uid_t owner_ = 0;
  std::vector<Stamp> stamps_;
  bool stable_ = false;
  bool clone_unsupported_ = false;
  size_t builds_ = 0;
};

}  // namespace hutch
