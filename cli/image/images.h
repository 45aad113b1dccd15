// The imported base images of a state dir, for `hutch image ls|rm`:
//
//   <state_dir>/images/<name>/rootfs      the tree sandboxes start from (rootfs_import.h)
//   <state_dir>/images/<name>/image.json  what import recorded: {"digest", "size", "created",
//                                          "platform", "source"}
//   <state_dir>/images/.removing-<name>-<pid>  an image being removed (renamed out of its name
//                                          first, so no new sandbox can start from it); the next
//                                          `image rm` finishes one whose remover died
//
// An image is in use while a running sandbox's root filesystem is built on it. The sandbox's
// overlay holds its lower through a detached mount that no mount table lists, so use is seen
// from the sandboxes themselves: overlayfs reports a lower file's own inode number (lowers on one
// filesystem, Documentation/filesystems/overlayfs.rst "Inode properties"), and a sandbox whose
// /proc/<pid>/root shows one of the image's files at its path with that inode, size and mtime
// runs on the image (a recipe's sandbox too: the image is its bottom lower).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/layers/layer_store.h"

namespace hutch::image {

struct ImageRecord {
  std::string name;
  std::string digest;    // layers::digest_tree of the rootfs, "sha256:<hex>"
  uint64_t size = 0;     // file data, each inode once
  int64_t created = 0;   // unix seconds of the import
  std::string platform;  // os/arch[/variant] taken from an index; empty for a plain rootfs
  std::string source;    // what was imported (a path)
};

// image.json's text for `record` (its name is the directory's).
std::string format_image_record(const ImageRecord& record);

// Every image, sorted by name. One imported before image.json existed is digested on the spot,
// with its rootfs's mtime as `created`.
Result<std::vector<ImageRecord>> list_images(const layers::LayerStore& store);

// A pid of a running sandbox whose root is built on the rootfs tree `rootfs_fd`; nullopt when
// none.
Result<std::optional<pid_t>> sandbox_on(int rootfs_fd);

// Removes image `name`. Refuses (the image stays) while a running sandbox uses it, naming a pid;
// an Error with err ENOENT when there is no such image. Returns the recipes built on the image
// (they cannot run until an image of that name is imported again).
Result<std::vector<std::string>> remove_image(layers::LayerStore& store, const std::string& name);

}  // namespace hutch::image
