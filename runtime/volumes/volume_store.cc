#include "runtime/volumes/volume_store.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "runtime/base/run_tool.h"
#include "runtime/base/text_file.h"
#include "runtime/fs/loop_device.h"

namespace hutch {
namespace {

namespace fs = std::filesystem;

constexpr const char* kImage = "volume.ext4";
constexpr const char* kMeta = "volume.meta";
// Names a crash may leave behind, never a volume's (a volume name starts with a letter or digit).
constexpr std::string_view kNewPrefix = ".new-";
constexpr std::string_view kRemovedPrefix = ".removed-";
// A loop device found bound to the image may be in its autoclear rundown (its last mount just
// went): the mount on it then fails, and a fresh device is bound instead.
constexpr int kMountAttempts = 3;

std::string random_suffix() {
  unsigned char bytes[6];
  while (getrandom(bytes, sizeof bytes, 0) != sizeof bytes) {
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Result<uint64_t> meta_number(const std::string& text, std::string_view key,
                             const std::string& path) {
  const std::string prefix = std::string(key) + " ";
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    if (line.starts_with(prefix)) {
      uint64_t value = 0;
      auto digits = line.substr(prefix.size());
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (ec == std::errc() && ptr == digits.data() + digits.size()) return value;
    }
    at = end + 1;
  }
  return plain_error("volume", path + " has no valid \"" + std::string(key) + "\"");
}

uint64_t little_endian(const unsigned char* bytes, size_t size) {
  uint64_t value = 0;
  for (size_t i = size; i-- > 0;) value = (value << 8) | bytes[i];
  return value;
}

// What statfs would say of the ext4 filesystem in `image`, from its superblock (1024 bytes at
// offset 1024; fields per the kernel's Documentation/filesystems/ext4/super.rst): f_blocks is
// the block count less the overhead (journal, bitmaps, inode tables), which mkfs.ext4 records.
// An error when the superblock is not ext4's or has no recorded overhead: the caller mounts.
Result<VolumeUsage> read_superblock_usage(const std::string& image) {
  UniqueFd fd(::open(image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open", image);
  unsigned char sb[1024];
  if (::pread(fd.get(), sb, sizeof sb, 1024) != static_cast<ssize_t>(sizeof sb))
    return sys_error("pread", image + " superblock");
  auto field = [&](size_t offset, size_t size) { return little_endian(sb + offset, size); };
  constexpr uint64_t kExt4Magic = 0xEF53;
  constexpr uint64_t kIncompat64Bit = 0x80;
  const uint64_t log_block = field(0x18, 4);
  const uint64_t overhead = field(0x248, 4);
  if (field(0x38, 2) != kExt4Magic || log_block > 6 || overhead == 0)
    return plain_error("volume", image + ": no ext4 superblock with a recorded overhead");
  const bool wide = (field(0x60, 4) & kIncompat64Bit) != 0;
  const uint64_t blocks = field(0x04, 4) | (wide ? field(0x150, 4) << 32 : 0);
  const uint64_t reserved = field(0x08, 4) | (wide ? field(0x154, 4) << 32 : 0);
  const uint64_t free = field(0x0C, 4) | (wide ? field(0x158, 4) << 32 : 0);
  if (overhead + free > blocks) return plain_error("volume", image + ": inconsistent superblock");
  const uint64_t block = uint64_t{1024} << log_block;
  VolumeUsage usage;
  usage.used_bytes = (blocks - overhead - free) * block;
  usage.available_bytes = (free > reserved ? free - reserved : 0) * block;
  return usage;
}

Result<void> write_file(const std::string& path, const std::string& text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return sys_error("open", path);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return sys_error("write", path);
  if (::fsync(fd.get()) != 0) return sys_error("fsync", path);
  return {};
}

}  // namespace

Result<void> check_volume_name(const std::string& name) {
  auto refused = [&](const std::string& why) {
    return kind_error(ErrorKind::kInvalid, "volume name", why);
  };
  if (name.empty() || name.size() > kMaxVolumeNameLength)
    return refused("must be 1 to " + std::to_string(kMaxVolumeNameLength) + " characters");
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name[0])) return refused("must start with a letter or a digit");
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.')
      return refused("may hold only letters, digits, '-', '_' and '.'");
  }
  return {};
}

Result<void> check_volume_size(uint64_t size_bytes) {
  if (size_bytes < kMinVolumeBytes || size_bytes > kMaxVolumeBytes || size_bytes % 4096 != 0)
    return kind_error(ErrorKind::kInvalid, "volume size",
                      "size_bytes must be a multiple of 4096 from " +
                          std::to_string(kMinVolumeBytes) + " to " +
                          std::to_string(kMaxVolumeBytes));
  return {};
}

Result<std::unique_ptr<VolumeStore>> VolumeStore::open(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return sys_error("mkdir", dir);
  if (::chmod(dir.c_str(), 0700) != 0) return sys_error("chmod", dir + " 0700");
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename();
    if (name.starts_with(kNewPrefix) || name.starts_with(kRemovedPrefix))
      fs::remove_all(entry.path(), error);
  }
  if (error) return sys_error("opendir", dir, error.value());
  // Canonical: a loop device names its backing file by its canonical path, and finding the
  // device of a mounted volume compares with it (find_loop_device).
  char canonical[PATH_MAX];
  if (::realpath(dir.c_str(), canonical) == nullptr) return sys_error("realpath", dir);
  return std::unique_ptr<VolumeStore>(new VolumeStore(canonical));
}

std::string VolumeStore::image_path(const std::string& name) const {
  return dir_ + "/" + name + "/" + kImage;
}

Result<VolumeInfo> VolumeStore::create(const std::string& name, uint64_t size_bytes) {
  HUTCH_TRY(check_volume_name(name));
  HUTCH_TRY(check_volume_size(size_bytes));
  const std::string final_dir = dir_ + "/" + name;
  struct stat st;
  if (::stat(final_dir.c_str(), &st) == 0)
    return kind_error(ErrorKind::kConflict, "volume", "a volume named " + name + " exists");
  // Made aside and renamed into place: a crash leaves no half-made volume under its name.
  const std::string staging = dir_ + "/" + std::string(kNewPrefix) + name + "-" + random_suffix();
  if (::mkdir(staging.c_str(), 0700) != 0) return sys_error("mkdir", staging);
  auto made = [&]() -> Result<VolumeInfo> {
    const std::string image = staging + "/" + kImage;
    {
      UniqueFd file(::open(image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!file) return sys_error("open", image);
      // Sparse: the host's disk is used as the volume fills, not up front.
      if (::ftruncate(file.get(), static_cast<off_t>(size_bytes)) != 0)
        return sys_error("ftruncate", image + " to " + std::to_string(size_bytes));
    }
    // -m 0: no blocks reserved for (host) root, whom no sandbox is; root_owner: the root dir is
    // uid/gid 0 on disk, the sandbox's root through the idmapped mount; nodiscard: the file is
    // sparse already.
    HUTCH_TRY(run_tool({"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0,nodiscard", "-L",
                        name.substr(0, 16), image},
                       "Debian's e2fsprogs: scripts/setup.sh does"));
    VolumeInfo info;
    info.name = name;
    info.size_bytes = size_bytes;
    info.created = std::chrono::system_clock::now();
    const auto created_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(info.created.time_since_epoch())
            .count();
    HUTCH_TRY(write_file(staging + "/" + kMeta, "size_bytes " + std::to_string(size_bytes) +
                                                    "\ncreated_unix_ms " +
                                                    std::to_string(created_ms) + "\n"));
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) !=
        0) {
      if (errno == EEXIST)
        return kind_error(ErrorKind::kConflict, "volume", "a volume named " + name + " exists");
      return sys_error("renameat2", staging + " to " + final_dir);
    }
    return info;
  }();
  if (!made) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
  }
  return made;
}

Result<VolumeInfo> VolumeStore::get(const std::string& name) const {
  HUTCH_TRY(check_volume_name(name));
  const std::string meta = dir_ + "/" + name + "/" + kMeta;
  auto text = read_text_file(meta);
  if (!text) {
    if (text.error().err == ENOENT)
      return kind_error(ErrorKind::kNotFound, "volume", "no volume named " + name);
    return std::unexpected(text.error());
  }
  VolumeInfo info;
  info.name = name;
  info.size_bytes = HUTCH_TRY(meta_number(*text, "size_bytes", meta));
  info.created = std::chrono::system_clock::time_point(
      std::chrono::milliseconds(HUTCH_TRY(meta_number(*text, "created_unix_ms", meta))));
  return info;
}

Result<std::vector<VolumeInfo>> VolumeStore::list() const {
  std::vector<VolumeInfo> volumes;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir_, error)) {
    const std::string name = entry.path().filename();
    if (!check_volume_name(name)) continue;  // a crash's leftover
    auto info = get(name);
    if (info) volumes.push_back(std::move(*info));
  }
  if (error) return sys_error("opendir", dir_, error.value());
  std::sort(volumes.begin(), volumes.end(),
            [](const VolumeInfo& a, const VolumeInfo& b) { return a.name < b.name; });
  return volumes;
}

Result<void> VolumeStore::remove(const std::string& name) {
  HUTCH_TRY(get(name));
  // Renamed away first: the name is free at once, and a crash leaves a leftover open() removes.
  const std::string doomed =
      dir_ + "/" + std::string(kRemovedPrefix) + name + "-" + random_suffix();
  if (::rename((dir_ + "/" + name).c_str(), doomed.c_str()) != 0)
    return sys_error("rename", dir_ + "/" + name + " to " + doomed);
  std::error_code error;
  fs::remove_all(doomed, error);
  if (error) return sys_error("remove", doomed, error.value());
  return {};
}

Result<UniqueFd> VolumeStore::open_mount(const std::string& name, bool read_only) const {
  HUTCH_TRY(get(name));
  std::lock_guard lock(mount_mutex_);
  return mount_locked(name, read_only);
}

Result<UniqueFd> VolumeStore::mount_locked(const std::string& name, bool read_only) const {
  const std::string image = image_path(name);
  for (int attempt = 1;; ++attempt) {
    // A live mount of the volume holds its device: mounting that device again yields the same
    // superblock (sget(9) finds it by device). Else a fresh device is bound.
    LoopDevice loop = HUTCH_TRY(find_loop_device(image));
    const bool found = static_cast<bool>(loop.fd);
    if (!found) {
      UniqueFd backing(::open(image.c_str(), O_RDWR | O_CLOEXEC));
      if (!backing) return sys_error("open", image);
      loop = HUTCH_TRY(attach_loop_device(backing.get(), image, false));
    }
    UniqueFd context(fsopen("ext4", FSOPEN_CLOEXEC));
    if (!context) return sys_error("fsopen", "ext4");
    if (fsconfig(context.get(), FSCONFIG_SET_STRING, "source", loop.path.c_str(), 0) != 0)
      return sys_error("fsconfig", "ext4 source " + loop.path);
    if (fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
      if (found && attempt < kMountAttempts) continue;
      return sys_error("fsconfig",
                       "FSCONFIG_CMD_CREATE ext4 on " + loop.path + " (volume " + name + ")");
    }
    unsigned attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (read_only ? MOUNT_ATTR_RDONLY : 0);
    UniqueFd mount(fsmount(context.get(), FSMOUNT_CLOEXEC, attrs));
    if (!mount) return sys_error("fsmount", "ext4 volume " + name);
    // The superblock holds the device now; `loop` closes, and autoclear unbinds the device once
    // the last mount of the volume is gone.
    return mount;
  }
}

Result<VolumeUsage> VolumeStore::usage(const std::string& name) const {
  HUTCH_TRY(get(name));
  std::lock_guard lock(mount_mutex_);
  // Unbound, the image has no live superblock (a mount holds its device): the one on disk is
  // final (written at the last unmount), and reading it spares a mount (~10-100 ms here).
  LoopDevice bound = HUTCH_TRY(find_loop_device(image_path(name)));
  if (!bound.fd) {
    if (auto counted = read_superblock_usage(image_path(name))) return *counted;
  }
  UniqueFd mount = HUTCH_TRY(mount_locked(name, true));
  struct statfs st;
  if (::fstatfs(mount.get(), &st) != 0) return sys_error("fstatfs", "volume " + name);
  VolumeUsage usage;
  const uint64_t block = static_cast<uint64_t>(st.f_bsize);
  usage.used_bytes = (static_cast<uint64_t>(st.f_blocks) - st.f_bfree) * block;
  usage.available_bytes = static_cast<uint64_t>(st.f_bavail) * block;
  return usage;
}

}  // namespace hutch
