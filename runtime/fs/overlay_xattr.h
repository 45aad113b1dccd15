// overlayfs's metadata xattrs, as hutch's layers carry them.
//
// Every sandbox's overlay is mounted from the host's user namespace, so overlayfs reads and
// writes trusted.overlay.* (tmpfs stores trusted.* on every kernel; user.* on tmpfs needs Linux
// 6.6, and an overlay mounted inside a user namespace may only use user.*). A sandbox cannot set
// trusted.* (CAP_SYS_ADMIN in the host's user namespace), so a trusted.overlay.* xattr in a
// sandbox's upper layer was written by overlayfs itself.
#pragma once

#include <string_view>

namespace hutch {

// An opaque directory: lower layers' entries of the same path are hidden.
inline constexpr const char* kOverlayOpaqueXattr = "trusted.overlay.opaque";

// Overlay control metadata of either namespace (redirect, metacopy, origin, opaque, ...): never
// taken from outside (archives, another host's layers) nor kept in a layer, except the opaque
// marker that hutch writes itself.
inline bool is_overlay_xattr(std::string_view name) {
  return name.starts_with("trusted.overlay.") || name.starts_with("user.overlay.");
}

}  // namespace hutch
