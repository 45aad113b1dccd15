// A layer's manifest: a small line-based `key=value` file beside its tree (no JSON in runtime/).
//
//   version=1
//   digest=sha256:<hex>          the layer's id (see layer_store.h: tree digest + parents)
//   tree_digest=sha256:<hex>     digest_tree() of the tree alone
//   parent=sha256:<hex>          repeated, topmost first
//   created=<unix seconds>
//   size=<bytes of file data>
//   built_by=<text>
//   cache_key=<text>
//   base=<text>                  the rootfs under the whole stack: "host" or a directory
//
// Values escape '\\' as "\\\\" and a newline as "\\n", so any text survives one line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch::layers {

struct LayerManifest {
  std::string digest;                // "sha256:<hex>", the layer's id
  std::string tree_digest;           // "sha256:<hex>", digest_tree() of its tree
  std::vector<std::string> parents;  // the layers below it, topmost first
  int64_t created = 0;               // unix seconds
  uint64_t size = 0;                 // bytes of regular-file data in the tree
  std::string built_by;              // free text: "recipe foo", "snapshot of sandbox 12"
  std::string cache_key;             // a bake's cache key; empty when none
  std::string base;                  // the rootfs below the stack: "host" or a directory

  bool operator==(const LayerManifest&) const = default;
};

std::string format_manifest(const LayerManifest& manifest);
// Unknown keys are ignored (a newer writer may add some); a missing digest or a bad number is an
// error.
Result<LayerManifest> parse_manifest(std::string_view text);

}  // namespace hutch::layers
