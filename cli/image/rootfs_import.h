// `hutch image import`: a base rootfs from a plain rootfs tar (docker/podman export), an OCI image
// layout (directory or tar) or a `docker save` tar, flattened into <state>/images/<name>/rootfs,
// with what was imported recorded in <state>/images/<name>/image.json (images.h).
//
// From an OCI index (or a docker manifest list inside an OCI layout), the manifest for
// `platform` is imported, not the first one listed: the host's own by default.
//
// Image layers are applied in order to one tree (`.wh.x` deletes x, `.wh..wh..opq` empties the
// directory). Ownership stays as in the tar: a host-root-owned tree is what `--rootfs DIR`
// id-maps into the sandbox. The tree is built in a `.incoming-*` scratch dir of the layer store
// (so `hutch layers gc` removes a crash's leftover) and renamed into place last, replacing an older
// import of the same name atomically; not while a running sandbox uses the older one (images.h).
#pragma once

#include <string>
#include <string_view>

#include "runtime/base/error.h"
#include "runtime/layers/layer_store.h"

namespace hutch::image {

// An image platform as OCI indexes name it: os "linux", architecture "amd64", variant "v7".
struct Platform {
  std::string os;
  std::string architecture;
  std::string variant;  // empty: any variant
  std::string to_string() const;
  bool operator==(const Platform&) const = default;
};

// "os/arch[/variant]", as `--platform` takes it.
Result<Platform> parse_platform(std::string_view text);
// The platform of this host (uname(2)'s machine in OCI/Go terms: x86_64 is amd64, aarch64 arm64,
// armv7l arm/v7), os linux.
Result<Platform> host_platform();
// Whether an index entry's platform serves `wanted`: same os and architecture, and the same
// variant unless `wanted` leaves it open (arm64 without a variant is arm64/v8).
bool platform_matches(const Platform& wanted, const Platform& entry);

// Imports `source` (a file or a directory) as image `name`, taking `platform`'s manifest from an
// index; returns the rootfs path.
Result<std::string> import_rootfs(layers::LayerStore& store, const std::string& source,
                                  const std::string& name, const Platform& platform);

}  // namespace hutch::image
