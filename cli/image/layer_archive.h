// `hutch image export` / `hutch image load`: a layer and its parents as one tar stream, so a
// recipe moves between machines.
//
// The stream (optionally zstd-compressed) is a tar of, in this order:
//   hutch-export          "hutch-export=1", "tag=<name>" and one "layer=<hex>" per layer,
//                         bottom first (key=value lines, like a layer manifest)
//   <hex>.manifest        per layer, bottom first: its manifest (runtime/layers/manifest.h)
//   <hex>.tar             followed by its tree as an OCI layer tar (cli/image/tar_tree.h)
// Load rebuilds every tree in a scratch dir of the store, checks its tree digest and layer id
// against the manifests, and only when all match adopts them: a tampered stream adds nothing.
#pragma once

#include <string>

#include "runtime/base/error.h"
#include "runtime/layers/layer_store.h"

namespace hutch::image {

// Writes layer `ref` (a tag or "sha256:<hex>") and its parents to `out_fd`.
Result<void> export_layer(const layers::LayerStore& store, const std::string& ref, int out_fd,
                          bool zstd);

// Reads a stream from `in_fd` (any compression libarchive knows), adds its layers and tags the top
// one `name` (empty: the tag recorded in the stream, if any). Returns the top layer's digest.
Result<std::string> load_layers(layers::LayerStore& store, int in_fd, const std::string& name);

}  // namespace hutch::image
