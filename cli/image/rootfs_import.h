// `hutch image import`: a base rootfs from a plain rootfs tar (docker/podman export), an OCI image
// layout (directory or tar) or a `docker save` tar, flattened into <state>/images/<name>/rootfs.
//
// Image layers are applied in order to one tree (`.wh.x` deletes x, `.wh..wh..opq` empties the
// directory). Ownership stays as in the tar: a host-root-owned tree is what `--rootfs DIR`
// id-maps into the sandbox. The tree is built in a `.incoming-*` scratch dir of the layer store
// (so `hutch layers gc` removes a crash's leftover) and renamed into place last, replacing an older
// import of the same name atomically.
#pragma once

#include <string>

#include "runtime/error.h"
#include "runtime/layers/layer_store.h"

namespace hutch::image {

// Imports `source` (a file or a directory) as image `name`; returns the rootfs path.
Result<std::string> import_rootfs(layers::LayerStore& store, const std::string& source,
                                  const std::string& name);

}  // namespace hutch::image
