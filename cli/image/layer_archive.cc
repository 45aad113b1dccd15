#include "cli/image/layer_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "cli/image/scratch.h"
#include "cli/image/tar_tree.h"
#include "runtime/base/unique_fd.h"
#include "runtime/layers/manifest.h"
#include "runtime/layers/names.h"
#include "runtime/layers/tree_digest.h"

namespace hutch::image {
namespace {

constexpr const char* kIndexMember = "hutch-export";

struct ReadDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteDeleter {
  void operator()(archive* a) const { archive_write_free(a); }
};
using ReadArchive = std::unique_ptr<archive, ReadDeleter>;
using WriteArchive = std::unique_ptr<archive, WriteDeleter>;

Result<void> add_member(archive* out, const std::string& name, int fd, const std::string& text) {
  archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, name.c_str());
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0644);
  off_t size = static_cast<off_t>(text.size());
  if (fd >= 0) {
    size = lseek(fd, 0, SEEK_END);
    if (size < 0 || lseek(fd, 0, SEEK_SET) != 0) return sys_error("lseek", name);
  }
  archive_entry_set_size(entry, size);
  int r = archive_write_header(out, entry);
  archive_entry_free(entry);
  if (r != ARCHIVE_OK) return std::unexpected(archive_error("archive_write_header", out, name));
  if (fd < 0) {
    if (archive_write_data(out, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      return std::unexpected(archive_error("archive_write_data", out, name));
    return {};
  }
  std::vector<char> buffer(1 << 16);
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read", name);
    if (n == 0) return {};
    if (archive_write_data(out, buffer.data(), static_cast<size_t>(n)) != n)
      return std::unexpected(archive_error("archive_write_data", out, name));
  }
}

// One layer's tree as a tar in an unnamed file of the store's filesystem (the outer tar needs
// its size before its data).
Result<UniqueFd> layer_tar(const layers::LayerStore& store, const layers::LayerInfo& layer) {
  UniqueFd tmp(
      ::open((store.state_dir() + "/layers").c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!tmp) return sys_error("open", store.state_dir() + "/layers (O_TMPFILE)");
  UniqueFd tree(::open(layer.tree_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!tree) return sys_error("open", layer.tree_path);
  WriteArchive out(archive_write_new());
  archive_write_set_format_pax_restricted(out.get());
  if (archive_write_open_fd(out.get(), tmp.get()) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_write_open_fd", out.get(), layer.digest));
  if (auto wrote = write_tree(tree.get(), out.get()); !wrote) return std::unexpected(wrote.error());
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_write_close", out.get(), layer.digest));
  return tmp;
}

// Reads the current member of `outer` as an archive of its own.
struct NestedSource {
  archive* outer;
  char buffer[1 << 16];
  static la_ssize_t read(archive*, void* self, const void** data) {
    auto* source = static_cast<NestedSource*>(self);
    *data = source->buffer;
    return archive_read_data(source->outer, source->buffer, sizeof source->buffer);
  }
};

Result<std::string> member_text(archive* in, const std::string& name) {
  std::string text;
  char buffer[4096];
  while (true) {
    la_ssize_t n = archive_read_data(in, buffer, sizeof buffer);
    if (n < 0) return std::unexpected(archive_error("archive_read_data", in, name));
    if (n == 0) return text;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > (1 << 20)) return plain_error("load", name + " is too large");
  }
}

Result<archive_entry*> next_member(archive* in, const std::string& expected) {
  archive_entry* entry;
  int r = archive_read_next_header(in, &entry);
  if (r == ARCHIVE_EOF) return plain_error("load", "stream ends before " + expected);
  if (r != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_read_next_header", in, "stream"));
  if (archive_entry_pathname(entry) != expected) {
    return plain_error("load", std::string("expected member ") + expected + ", found " +
                                   archive_entry_pathname(entry) + " (not a hutch export?)");
  }
  return entry;
}

struct Incoming {
  layers::LayerManifest manifest;
  Scratch scratch;
};

}  // namespace

Result<void> export_layer(const layers::LayerStore& store, const std::string& ref, int out_fd,
                          bool zstd) {
  std::string digest = ref;
  std::string tag;
  if (!ref.starts_with("sha256:")) {
    auto resolved = store.resolve_tag(ref);
    if (!resolved) return std::unexpected(resolved.error());
    if (!*resolved) return plain_error("export", "no tag named " + ref);
    digest = **resolved;
    tag = ref;
  }
  auto top = store.get(digest);
  if (!top) return std::unexpected(top.error());
  std::vector<layers::LayerInfo> chain;  // bottom first
  for (auto it = top->manifest.parents.rbegin(); it != top->manifest.parents.rend(); ++it) {
    auto parent = store.get(*it);
    if (!parent) return std::unexpected(parent.error());
    chain.push_back(std::move(*parent));
  }
  chain.push_back(std::move(*top));

  WriteArchive out(archive_write_new());
  archive_write_set_format_pax_restricted(out.get());
  if (zstd && archive_write_add_filter_zstd(out.get()) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_write_add_filter_zstd", out.get(), "export"));
  if (archive_write_open_fd(out.get(), out_fd) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_write_open_fd", out.get(), "export"));
  std::string index = "hutch-export=1\ntag=" + tag + "\n";
  for (const auto& layer : chain) index += "layer=" + layer.digest.substr(7) + "\n";
  if (auto wrote = add_member(out.get(), kIndexMember, -1, index); !wrote) return wrote;
  for (const auto& layer : chain) {
    const std::string hex = layer.digest.substr(7);
    if (auto wrote =
            add_member(out.get(), hex + ".manifest", -1, layers::format_manifest(layer.manifest));
        !wrote) {
      return wrote;
    }
    auto tar = layer_tar(store, layer);
    if (!tar) return std::unexpected(tar.error());
    if (auto wrote = add_member(out.get(), hex + ".tar", tar->get(), ""); !wrote) return wrote;
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_write_close", out.get(), "export"));
  return {};
}

Result<std::string> load_layers(layers::LayerStore& store, int in_fd, const std::string& name) {
  if (!name.empty()) {
    if (auto valid = layers::validate_name(name); !valid) return std::unexpected(valid.error());
  }
  ReadArchive in(archive_read_new());
  archive_read_support_filter_all(in.get());
  archive_read_support_format_tar(in.get());
  if (archive_read_open_fd(in.get(), in_fd, 1 << 16) != ARCHIVE_OK)
    return std::unexpected(archive_error("archive_read_open_fd", in.get(), "stream"));
  auto index_entry = next_member(in.get(), kIndexMember);
  if (!index_entry) return std::unexpected(index_entry.error());
  auto index = member_text(in.get(), kIndexMember);
  if (!index) return std::unexpected(index.error());
  std::string tag;
  std::vector<std::string> hexes;
  bool versioned = false;
  for (size_t start = 0; start < index->size();) {
    size_t end = index->find('\n', start);
    if (end == std::string::npos) end = index->size();
    std::string line = index->substr(start, end - start);
    start = end + 1;
    if (line == "hutch-export=1") versioned = true;
    if (line.starts_with("tag=")) tag = line.substr(4);
    if (line.starts_with("layer=")) {
      auto hex = layers::digest_hex(line.substr(6));
      if (!hex) return std::unexpected(hex.error());
      hexes.push_back(*hex);
    }
  }
  if (!versioned || hexes.empty()) return plain_error("load", "not a hutch export (version 1)");

  std::vector<Incoming> incoming;
  std::vector<std::string> parents;  // topmost first, as manifests list them
  for (const std::string& hex : hexes) {
    if (auto e = next_member(in.get(), hex + ".manifest"); !e) return std::unexpected(e.error());
    auto text = member_text(in.get(), hex + ".manifest");
    if (!text) return std::unexpected(text.error());
    auto manifest = layers::parse_manifest(*text);
    if (!manifest) return std::unexpected(manifest.error());
    if (manifest->digest != "sha256:" + hex || manifest->parents != parents) {
      return plain_error("load", "manifest of layer " + hex + " does not match the stream's order");
    }
    auto expected = layers::layer_digest(manifest->tree_digest, manifest->parents);
    if (!expected) return std::unexpected(expected.error());
    if (*expected != manifest->digest) {
      return plain_error("load", "layer " + manifest->digest + ": its manifest gives id " +
                                     *expected + " (tampered manifest)");
    }

    if (auto e = next_member(in.get(), hex + ".tar"); !e) return std::unexpected(e.error());
    auto scratch = Scratch::create(store.state_dir());
    if (!scratch) return std::unexpected(scratch.error());
    const std::string tree = scratch->path() + "/tree";
    if (mkdir(tree.c_str(), 0755) != 0) return sys_error("mkdir", tree);
    UniqueFd tree_fd(::open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!tree_fd) return sys_error("open", tree);
    NestedSource source{in.get(), {}};
    ReadArchive layer(archive_read_new());
    archive_read_support_format_tar(layer.get());
    if (archive_read_open(layer.get(), &source, nullptr, &NestedSource::read, nullptr) !=
        ARCHIVE_OK) {
      return std::unexpected(archive_error("archive_read_open", layer.get(), hex + ".tar"));
    }
    if (auto done = extract_tree(layer.get(), tree_fd.get(), Whiteouts::kToOverlay, hex + ".tar");
        !done) {
      return std::unexpected(done.error());
    }
    auto digest = layers::digest_tree(tree_fd.get());
    if (!digest) return std::unexpected(digest.error());
    if (*digest != manifest->tree_digest) {
      return plain_error("load", "layer " + manifest->digest + ": the tree digests to " + *digest +
                                     ", its manifest says " + manifest->tree_digest +
                                     " (corrupt or tampered stream): nothing added");
    }
    parents.insert(parents.begin(), manifest->digest);
    incoming.push_back({std::move(*manifest), std::move(*scratch)});
  }

  // Every tree matched its manifest: only now does the store change.
  std::string top;
  for (Incoming& layer : incoming) {
    layers::LayerManifest wanted;
    wanted.parents = layer.manifest.parents;
    wanted.built_by = layer.manifest.built_by;
    wanted.base = layer.manifest.base;
    auto info = store.adopt_tree(layer.scratch.path() + "/tree", wanted);
    if (!info) return std::unexpected(info.error());
    if (info->digest != layer.manifest.digest) {
      return plain_error("load",
                         "layer " + layer.manifest.digest + " was stored as " + info->digest);
    }
    top = info->digest;
  }
  const std::string tag_name = name.empty() ? tag : name;
  if (!tag_name.empty()) {
    if (auto tagged = store.tag(tag_name, top); !tagged) return std::unexpected(tagged.error());
  }
  return top;
}

}  // namespace hutch::image
