// Named persistent volumes: a filesystem of fixed size per volume that outlives the sandboxes it
// is mounted in. Each is an ext4 image file, <dir>/<name>/volume.ext4, made sparse by mkfs.ext4
// (Debian's e2fsprogs) and mounted through a loop device: the image's size is the quota, exact
// and enforced by the filesystem (a write past it fails with ENOSPC), and nothing but hutchd's
// state dir is needed to keep it across restarts. Files are stored owned by uid/gid 0; a
// sandbox's launch idmaps the mount through its user namespace (runtime/launch.cc), so they are
// its root's inside, whatever its host ids.
//
// No HTTP, no JSON, no attachment bookkeeping here: which sandbox may mount which volume is the
// caller's policy (daemon/service/volume_service.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

inline constexpr uint64_t kMinVolumeBytes = uint64_t{16} << 20;  // mkfs.ext4's own overhead fits
inline constexpr uint64_t kMaxVolumeBytes = uint64_t{1} << 40;
inline constexpr size_t kMaxVolumeNameLength = 63;

struct VolumeInfo {
  std::string name;
  uint64_t size_bytes = 0;
  std::chrono::system_clock::time_point created;
};

// What the volume's filesystem holds now, as statfs counts it.
struct VolumeUsage {
  uint64_t used_bytes = 0;
  uint64_t available_bytes = 0;
};

// 1 to 63 characters of [A-Za-z0-9_.-], the first a letter or digit: a single path component that
// is never "." or "..". Errors are ErrorKind::kInvalid.
Result<void> check_volume_name(const std::string& name);
// kMinVolumeBytes..kMaxVolumeBytes, a multiple of 4096. Errors are ErrorKind::kInvalid.
Result<void> check_volume_size(uint64_t size_bytes);

// Thread-safe.
class VolumeStore {
 public:
  // The store in `dir` (created 0700 if missing); leftovers of creates and removes a crash
  // interrupted are removed.
  static Result<std::unique_ptr<VolumeStore>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }

  // Errors: kInvalid (name, size), kConflict (a volume of that name exists), kFailure (mkfs).
  Result<VolumeInfo> create(const std::string& name, uint64_t size_bytes);
  Result<std::vector<VolumeInfo>> list() const;
  // Errors: kInvalid (name), kNotFound.
  Result<VolumeInfo> get(const std::string& name) const;
  // Mounted somewhere: statfs of a mount sharing its superblock. Else read from the image's
  // superblock, which the last unmount wrote (no mount needed).
  Result<VolumeUsage> usage(const std::string& name) const;
  // Removes the volume and its files. The caller checks that no sandbox has it mounted; a mount
  // left somewhere keeps the (unlinked) image until it goes. Errors: kInvalid, kNotFound.
  Result<void> remove(const std::string& name);

  // A detached mount (fsmount(2)) of the volume's filesystem: nosuid, nodev, read-only when
  // `read_only`, not idmapped yet (MOUNT_ATTR_IDMAP is set once, by whoever knows the user
  // namespace: runtime/launch.cc). Every mount of a volume shares one loop device and one
  // superblock, so concurrent mounts (read-only ones beside a writer) see one coherent
  // filesystem; the superblock is read-write, the read-only-ness is the mount's. Closing the fd
  // before it is attached anywhere unmounts it. Errors: kInvalid, kNotFound, kFailure.
  Result<UniqueFd> open_mount(const std::string& name, bool read_only) const;

  std::string image_path(const std::string& name) const;

 private:
  explicit VolumeStore(std::string dir) : dir_(std::move(dir)) {}
  Result<UniqueFd> mount_locked(const std::string& name, bool read_only) const;

  std::string dir_;
  // Serializes finding or binding a volume's loop device and mounting it: two binds of one
  // image would be two superblocks writing one filesystem.
  mutable std::mutex mount_mutex_;
};

}  // namespace hutch
