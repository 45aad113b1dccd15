#include "cli/image/rootfs_import.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli/image/images.h"
#include "cli/image/scratch.h"
#include "cli/image/tar_tree.h"
#include "runtime/base/unique_fd.h"
#include "runtime/fs/tree_copy.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/names.h"
#include "runtime/layers/sha256.h"
#include "runtime/layers/tree_digest.h"

namespace hutch::image {
namespace {

struct ReadDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ReadArchive = std::unique_ptr<archive, ReadDeleter>;

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;

Result<ReadArchive> open_tar(const std::string& path) {
  ReadArchive in(archive_read_new());
  archive_read_support_filter_all(in.get());
  archive_read_support_format_tar(in.get());
  if (archive_read_open_filename(in.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_read_open_filename", in.get(), path));
  return in;
}

Result<void> extract_file(const std::string& path, int root_fd, Whiteouts whiteouts) {
  auto in = open_tar(path);
  if (!in) return std::unexpected(in.error());
  return extract_tree(in->get(), root_fd, whiteouts, path);
}

// Whether the tar at `path` is an image archive (OCI layout or docker save) rather than a rootfs.
Result<bool> is_image_archive(const std::string& path) {
  auto in = open_tar(path);
  if (!in) return std::unexpected(in.error());
  archive_entry* entry;
  while (true) {
    int r = archive_read_next_header(in->get(), &entry);
    if (r == ARCHIVE_EOF) return false;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
      return std::unexpected(archive_error("archive_read_next_header", in->get(), path));
    std::string name = archive_entry_pathname(entry);
    if (name.starts_with("./")) name = name.substr(2);
    if (name == "index.json" || name == "manifest.json" || name == "oci-layout") return true;
  }
}

Result<nlohmann::json> read_json(const std::string& path) {
  std::ifstream file(path);
  if (!file) return sys_error("open", path);
  std::stringstream text;
  text << file.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return plain_error("import", path + ": " + e.what());
  }
}

// An image file named by the image itself (a manifest's layer path, a blob), opened beneath the
// image's directory: symlinks in an unpacked archive (docker save links duplicate layers) may
// point within it, never out of it, so no host file can pass for a layer. Kept open, and read
// through /proc/self/fd, so what was checked is what is read.
struct ImageFile {
  UniqueFd fd;
  std::string path;  // /proc/self/fd/N
};

Result<ImageFile> open_image_file(const std::string& dir, const std::string& relative) {
  UniqueFd dir_fd(::open(dir.c_str(), kDirFlags));
  if (!dir_fd) return sys_error("open", dir);
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(
      static_cast<int>(syscall(SYS_openat2, dir_fd.get(), relative.c_str(), &how, sizeof how)));
  if (!fd) {
    if (errno == EXDEV)
      return plain_error("import", "image file " + relative + " refused: it leads out of " + dir);
    return sys_error("openat2", dir + "/" + relative + " (RESOLVE_BENEATH)");
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd.get());
  return ImageFile{std::move(fd), std::move(path)};
}

// blobs/sha256/<hex>, after checking that the blob's content has that digest.
Result<ImageFile> open_blob(const std::string& dir, const std::string& digest) {
  if (!digest.starts_with("sha256:")) return plain_error("import", "unsupported digest " + digest);
  auto hex = layers::digest_hex(digest);  // 64 hex: no path tricks
  if (!hex) return std::unexpected(hex.error());
  auto blob = open_image_file(dir, "blobs/sha256/" + *hex);
  if (!blob) return std::unexpected(blob.error());
  const std::string path = dir + "/blobs/sha256/" + *hex;
  const UniqueFd& fd = blob->fd;
  auto hasher = layers::Sha256::create();
  if (!hasher) return std::unexpected(hasher.error());
  std::vector<char> buffer(1 << 16);
  while (true) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read", path);
    if (n == 0) break;
    hasher->update(std::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  if (std::string actual = hasher->finish_hex(); actual != *hex) {
    return plain_error("import", "blob " + digest + " has content digest sha256:" + actual +
                                     " (corrupt or tampered image)");
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return sys_error("lseek", path);
  return blob;
}

Platform entry_platform(const nlohmann::json& entry) {
  Platform platform;
  if (!entry.contains("platform") || !entry["platform"].is_object()) return platform;
  const nlohmann::json& p = entry["platform"];
  platform.os = p.value("os", "");
  platform.architecture = p.value("architecture", "");
  platform.variant = p.value("variant", "");
  return platform;
}

struct IndexEntry {
  std::string digest;
  std::string platform;  // as the index names it; empty for an entry without one
};

// The entry for `wanted` among an index's `manifests`. An index of one entry that names no
// platform (an OCI layout's top index.json pointing at the image's own index or manifest) is that
// entry.
Result<IndexEntry> pick_manifest(const nlohmann::json& manifests, const Platform& wanted,
                                 const std::string& dir) {
  if (!manifests.is_array() || manifests.empty())
    return plain_error("import", dir + ": empty index");
  if (manifests.size() == 1 && !manifests[0].contains("platform"))
    return IndexEntry{manifests[0]["digest"].get<std::string>(), ""};
  std::string listed;
  for (const auto& entry : manifests) {
    const Platform platform = entry_platform(entry);
    if (platform_matches(wanted, platform))
      return IndexEntry{entry["digest"].get<std::string>(), platform.to_string()};
    if (!platform.architecture.empty())
      listed += (listed.empty() ? "" : ", ") + platform.to_string();
  }
  return plain_error("import", dir + ": the index has no image for " + wanted.to_string() +
                                   " (it lists " + (listed.empty() ? "no platforms" : listed) +
                                   "; choose one with --platform os/arch[/variant])");
}

struct ImageLayers {
  std::vector<ImageFile> files;  // layer tars, bottom first
  std::string platform;          // the platform an index named for the manifest taken
};

// The layers of an image directory: OCI (index.json, through nested indexes to the manifest for
// `platform`) or docker save (manifest.json's Layers).
Result<ImageLayers> image_layers(const std::string& dir, const Platform& platform) {
  ImageLayers image;
  try {
    if (::access((dir + "/index.json").c_str(), F_OK) == 0) {
      auto index_file = open_image_file(dir, "index.json");
      if (!index_file) return std::unexpected(index_file.error());
      auto index = read_json(index_file->path);
      if (!index) return std::unexpected(index.error());
      nlohmann::json current = *index;
      for (int depth = 0; depth < 4; ++depth) {
        if (!current.contains("manifests")) break;
        auto entry = pick_manifest(current["manifests"], platform, dir);
        if (!entry) return std::unexpected(entry.error());
        if (!entry->platform.empty()) image.platform = entry->platform;
        auto blob = open_blob(dir, entry->digest);
        if (!blob) return std::unexpected(blob.error());
        auto next = read_json(blob->path);
        if (!next) return std::unexpected(next.error());
        current = *next;
      }
      if (!current.contains("layers")) return plain_error("import", dir + ": no image manifest");
      for (const auto& layer : current["layers"]) {
        auto blob = open_blob(dir, layer["digest"].get<std::string>());
        if (!blob) return std::unexpected(blob.error());
        image.files.push_back(std::move(*blob));
      }
      return image;
    }
    auto manifest_file = open_image_file(dir, "manifest.json");
    if (!manifest_file) return std::unexpected(manifest_file.error());
    auto manifest = read_json(manifest_file->path);
    if (!manifest) return std::unexpected(manifest.error());
    if (!manifest->is_array() || manifest->empty())
      return plain_error("import", dir + "/manifest.json: no image");
    for (const auto& layer : (*manifest)[0]["Layers"]) {
      std::string relative = layer.get<std::string>();
      if (relative.starts_with("/") || relative.find("..") != std::string::npos)
        return plain_error("import", "layer path " + relative + " refused");
      auto file = open_image_file(dir, relative);
      if (!file) return std::unexpected(file.error());
      image.files.push_back(std::move(*file));
    }
    return image;
  } catch (const nlohmann::json::exception& e) {
    return plain_error("import", dir + ": " + e.what());
  }
}

// Applies the image's layers under `root_fd`; returns the platform an index named for it.
Result<std::string> apply_layers(const std::string& dir, int root_fd, const Platform& platform) {
  auto image = image_layers(dir, platform);
  if (!image) return std::unexpected(image.error());
  for (const ImageFile& layer : image->files) {
    if (auto done = extract_file(layer.path, root_fd, Whiteouts::kApply); !done)
      return std::unexpected(done.error());
  }
  return image->platform;
}

}  // namespace

std::string Platform::to_string() const {
  return os + "/" + architecture + (variant.empty() ? "" : "/" + variant);
}

Result<Platform> parse_platform(std::string_view text) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('/', start);
    if (end == std::string_view::npos) end = text.size();
    parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (parts.size() < 2 || parts.size() > 3 || std::ranges::any_of(parts, &std::string::empty))
    return plain_error("platform", "\"" + std::string(text) + "\" is not os/arch[/variant]");
  return Platform{parts[0], parts[1], parts.size() == 3 ? parts[2] : ""};
}

Result<Platform> host_platform() {
  struct utsname host;
  if (uname(&host) != 0) return sys_error("uname", "host platform");
  const std::string_view machine = host.machine;
  // uname's machine names in the GOARCH terms OCI uses (image-spec config.md: architecture).
  static constexpr std::pair<std::string_view, std::string_view> kArchitectures[] = {
      {"x86_64", "amd64"},    {"aarch64", "arm64"},       {"i686", "386"},
      {"i386", "386"},        {"ppc64le", "ppc64le"},     {"s390x", "s390x"},
      {"riscv64", "riscv64"}, {"loongarch64", "loong64"},
  };
  for (const auto& [uname_machine, architecture] : kArchitectures) {
    if (machine == uname_machine) return Platform{"linux", std::string(architecture), ""};
  }
  if (machine.starts_with("armv7")) return Platform{"linux", "arm", "v7"};
  if (machine.starts_with("armv6")) return Platform{"linux", "arm", "v6"};
  return Platform{"linux", std::string(machine), ""};
}

bool platform_matches(const Platform& wanted, const Platform& entry) {
  if (entry.os != wanted.os || entry.architecture != wanted.architecture) return false;
  if (wanted.variant.empty()) return true;
  const bool implied_v8 = entry.architecture == "arm64" && entry.variant.empty();
  return entry.variant == wanted.variant || (implied_v8 && wanted.variant == "v8");
}

Result<std::string> import_rootfs(layers::LayerStore& store, const std::string& source,
                                  const std::string& name, const Platform& platform) {
  if (auto valid = layers::validate_name(name); !valid) return std::unexpected(valid.error());
  auto lock = store.lock("image-" + name);
  if (!lock) return std::unexpected(lock.error());
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) return sys_error("stat", source);

  auto scratch = Scratch::create(store.state_dir());
  if (!scratch) return std::unexpected(scratch.error());
  UniqueFd scratch_fd(::open(scratch->path().c_str(), kDirFlags));
  if (!scratch_fd) return sys_error("open", scratch->path());
  const std::string rootfs = scratch->path() + "/rootfs";
  ImageRecord record;
  record.source = std::filesystem::absolute(source).lexically_normal().string();
  record.created = time(nullptr);
  const bool image_dir =
      S_ISDIR(st.st_mode) && (::access((source + "/index.json").c_str(), F_OK) == 0 ||
                              ::access((source + "/manifest.json").c_str(), F_OK) == 0);
  if (S_ISDIR(st.st_mode) && !image_dir) {
    // A plain rootfs directory: an exact copy, but for overlay control xattrs (from outside).
    UniqueFd src(::open(source.c_str(), kDirFlags));
    if (!src) return sys_error("open", source);
    if (auto copied = copy_tree(src.get(), scratch_fd.get(), "rootfs", OverlayXattrs::kNone);
        !copied)
      return std::unexpected(copied.error());
  } else {
    if (mkdir(rootfs.c_str(), 0755) != 0) return sys_error("mkdir", rootfs);
    UniqueFd root_fd(::open(rootfs.c_str(), kDirFlags));
    if (!root_fd) return sys_error("open", rootfs);
    if (image_dir) {
      auto applied = apply_layers(source, root_fd.get(), platform);
      if (!applied) return std::unexpected(applied.error());
      record.platform = *applied;
    } else {
      auto image = is_image_archive(source);
      if (!image) return std::unexpected(image.error());
      if (!*image) {
        if (auto done = extract_file(source, root_fd.get(), Whiteouts::kAsFiles); !done)
          return std::unexpected(done.error());
      } else {
        const std::string unpacked = scratch->path() + "/archive";
        if (mkdir(unpacked.c_str(), 0700) != 0) return sys_error("mkdir", unpacked);
        UniqueFd unpacked_fd(::open(unpacked.c_str(), kDirFlags));
        if (!unpacked_fd) return sys_error("open", unpacked);
        if (auto done = extract_file(source, unpacked_fd.get(), Whiteouts::kAsFiles); !done)
          return std::unexpected(done.error());
        auto applied = apply_layers(unpacked, root_fd.get(), platform);
        if (!applied) return std::unexpected(applied.error());
        record.platform = *applied;
        if (auto removed = remove_tree(scratch_fd.get(), "archive"); !removed)
          return std::unexpected(removed.error());
      }
    }
  }
  {
    UniqueFd root_fd(::open(rootfs.c_str(), kDirFlags));
    if (!root_fd) return sys_error("open", rootfs);
    auto digest = layers::digest_tree_with_size(root_fd.get());
    if (!digest) return std::unexpected(digest.error());
    record.digest = digest->digest;
    record.size = digest->bytes;
  }
  if (auto wrote = write_new_file(scratch_fd.get(), "image.json", format_image_record(record));
      !wrote) {
    return std::unexpected(wrote.error());
  }
  if (syncfs(scratch_fd.get()) != 0) return sys_error("syncfs", scratch->path());

  // <state>/images/<name>: swapped in whole, so a reader sees the old rootfs or the new one.
  const std::string images = store.state_dir() + "/images";
  if (mkdir(images.c_str(), 0755) != 0 && errno != EEXIST) return sys_error("mkdir", images);
  UniqueFd images_fd(::open(images.c_str(), kDirFlags));
  if (!images_fd) return sys_error("open", images);
  UniqueFd layers_fd(::open((store.state_dir() + "/layers").c_str(), kDirFlags));
  if (!layers_fd) return sys_error("open", store.state_dir() + "/layers");
  const std::string scratch_name = scratch->name();
  if (renameat2(layers_fd.get(), scratch_name.c_str(), images_fd.get(), name.c_str(),
                RENAME_NOREPLACE) != 0) {
    if (errno != EEXIST) return sys_error("renameat2", images + "/" + name);
    // An older import: exchange, and the scratch name now holds the old one, removed below.
    if (renameat2(layers_fd.get(), scratch_name.c_str(), images_fd.get(), name.c_str(),
                  RENAME_EXCHANGE) != 0) {
      return sys_error("renameat2", images + "/" + name + " (RENAME_EXCHANGE)");
    }
    // The old tree must not be removed under a running sandbox (overlayfs's lowers must not
    // change while mounted): then the new import is put back and refused.
    UniqueFd old_rootfs(openat(layers_fd.get(), (scratch_name + "/rootfs").c_str(), kDirFlags));
    if (!old_rootfs) return sys_error("openat", store.state_dir() + "/layers/" + scratch_name);
    auto pid = sandbox_on(old_rootfs.get());
    if (!pid || *pid) {
      if (renameat2(layers_fd.get(), scratch_name.c_str(), images_fd.get(), name.c_str(),
                    RENAME_EXCHANGE) != 0) {
        return sys_error("renameat2", images + "/" + name + " (RENAME_EXCHANGE back)");
      }
      if (!pid) return std::unexpected(pid.error());
      return std::unexpected(Error{"import",
                                   name + " is in use by a running sandbox (pid " +
                                       std::to_string(**pid) + "): not replaced",
                                   EBUSY});
    }
  }
  if (chmod((images + "/" + name).c_str(), 0755) != 0)
    return sys_error("chmod", images + "/" + name);
  return images + "/" + name + "/rootfs";
}

}  // namespace hutch::image
