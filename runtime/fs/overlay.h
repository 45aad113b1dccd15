// The sandbox's root overlay, mounted by the parent (host root, the host's user namespace).
//
// Why not inside the sandbox's user namespace: an overlay mounted there may only use user.*
// xattrs ("userxattr"), which tmpfs stores only from Linux 6.6, so on Debian 12's 6.1 neither the
// skeleton's opaque directories nor an upper layer on tmpfs could work. Mounted by host root, the
// overlay uses trusted.overlay.* (kOverlayOpaqueXattr), which tmpfs has on every kernel, and the
// sandbox can neither read nor forge it (trusted.* needs CAP_SYS_ADMIN in the host's user
// namespace). Permission checks still run against the caller's credentials on the overlay's
// inodes; overlayfs uses the mounter's only for its own work (copy-up, whiteouts), as Docker's
// rootful overlays do. Lower layers are idmapped mounts (overlay over idmapped layers: 5.19).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

// A detached tmpfs (size `bytes`: the sandbox's disk cap) holding the overlay's `upper` and
// `work` directories, owned by `owner` (the sandbox root's host id), so that the sandbox's root
// owns its "/" and whatever it creates is charged to this tmpfs.
Result<UniqueFd> make_upper_tmpfs(uint64_t bytes, uid_t owner);

// The helper process of mount_overlay, reaped when this goes: its mount namespace's teardown
// (umounts, then an RCU grace period: ~0.1-0.2 ms) runs meanwhile, off the start path.
class OverlayHelper {
 public:
  OverlayHelper() = default;
  explicit OverlayHelper(pid_t pid) : pid_(pid) {}
  OverlayHelper(OverlayHelper&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  OverlayHelper& operator=(OverlayHelper&& other) noexcept;
  ~OverlayHelper() { reap(); }

 private:
  void reap();
  pid_t pid_ = -1;
};

struct MountedOverlay {
  UniqueFd mount;
  OverlayHelper helper;
};

// The overlay as a detached mount (nosuid, nodev): `lowers` are mount fds, topmost first;
// `upper_fs` is a mount fd of a tree holding `upper` and `work` (make_upper_tmpfs, or a host
// directory's tree). Newer kernels take the detached mounts as layers through /proc/self/fd.
// Linux 6.1's overlayfs takes them only from mounts attached in the mounter's mount namespace
// (clone_private_mount: EINVAL), so there, learnt once per process, a short-lived helper sharing
// this process's memory and fd table, in a mount namespace of its own, attaches them on a private
// tmpfs and makes the overlay there; the overlay keeps private clones of its layers, and the
// helper's namespace goes with it (MountedOverlay::helper).
Result<MountedOverlay> mount_overlay(std::span<const int> lowers, int upper_fs);

}  // namespace hutch
