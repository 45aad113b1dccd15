// AtomicWriter: an unnamed (O_TMPFILE) or named temp file, linked or renamed over the target.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/files/identity.h"
#include "runtime/files/resolve.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::files {

using detail::fail;
using detail::join;
using detail::sys_fail;

namespace {

std::string_view base_name(std::string_view path) { return path.substr(path.rfind('/') + 1); }

std::string temp_name() {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static std::atomic<uint64_t> counter{0};
  unsigned char random[8] = {};
  if (getrandom(random, sizeof random, GRND_NONBLOCK) != sizeof random) {
    // Uniqueness comes from O_EXCL (and the retry loops), not from the randomness.
    uint64_t fallback = counter.fetch_add(1) ^ (static_cast<uint64_t>(getpid()) << 32);
    std::memcpy(random, &fallback, sizeof random);
  }
  std::string name = ".hutch-tmp-";
  for (unsigned char byte : random) name += kAlphabet[byte % (sizeof kAlphabet - 1)];
  return name;
}

std::optional<uint64_t> mount_id(int fd) {
  struct statx stx {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0) return std::nullopt;
  if ((stx.stx_mask & STATX_MNT_ID) == 0) return std::nullopt;
  return stx.stx_mnt_id;
}

// The staging directory, created when missing, if it is a real directory on the same mount as
// `dir_fd` (rename(2) does not cross mounts: EXDEV). Else nullopt: name the file next to its
// target.
std::optional<UniqueFd> open_staging(int root_dir_fd, int dir_fd, Owner owner) {
  const std::string name(kStagingDir);
  if (mkdirat(root_dir_fd, name.c_str(), 0700) == 0) {
    int made = openat(root_dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (made >= 0) {
      UniqueFd fd(made);
      if (fchown(fd.get(), owner.uid, owner.gid) != 0) return std::nullopt;
    }
  } else if (errno != EEXIST) {
    return std::nullopt;
  }
  // O_NOFOLLOW: a symlink the sandbox put there is not followed; the temp goes next to the target.
  int fd = openat(root_dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  UniqueFd staging(fd);
  if (detail::is_refused_fs(staging.get())) return std::nullopt;
  auto here = mount_id(dir_fd);
  if (!here || here != mount_id(staging.get())) return std::nullopt;
  return staging;
}

}  // namespace

bool AtomicWriter::named_temps_forced() { return std::getenv("HUTCH_FILES_NAMED_TEMP") != nullptr; }

AtomicWriter::AtomicWriter(AtomicWriter&& other) noexcept
    : dir_(std::move(other.dir_)),
      file_(std::move(other.file_)),
      root_dir_(std::move(other.root_dir_)),
      temp_dir_(std::move(other.temp_dir_)),
      temp_name_(std::exchange(other.temp_name_, {})),
      root_fd_(other.root_fd_),
      owner_(other.owner_),
      final_name_(std::exchange(other.final_name_, {})),
      written_(other.written_),
      max_bytes_(other.max_bytes_),
      committed_(std::exchange(other.committed_, true)) {}

AtomicWriter& AtomicWriter::operator=(AtomicWriter&& other) noexcept {
  if (this != &other) {
    // The old state lands in `old`, whose destructor removes an uncommitted temp file.
    AtomicWriter old(std::move(*this));
    dir_ = std::move(other.dir_);
    file_ = std::move(other.file_);
    root_dir_ = std::move(other.root_dir_);
    temp_dir_ = std::move(other.temp_dir_);
    temp_name_ = std::exchange(other.temp_name_, {});
    root_fd_ = other.root_fd_;
    owner_ = other.owner_;
    final_name_ = std::exchange(other.final_name_, {});
    written_ = other.written_;
    max_bytes_ = other.max_bytes_;
    committed_ = std::exchange(other.committed_, true);
  }
  return *this;
}

AtomicWriter::~AtomicWriter() {
  const bool named_temp = !committed_ && temp_dir_ && !temp_name_.empty();
  if (!named_temp && !root_dir_) return;
  // Best effort, like the unlinks: should the identity fail, host root tries them anyway.
  auto identity = detail::OwnerIdentity::enter(owner_);
  // An unnamed file vanishes with its last fd; a named one is unlinked.
  if (named_temp) unlinkat(temp_dir_.get(), temp_name_.c_str(), 0);
  remove_staging();
}

void AtomicWriter::remove_staging() {
  // Best effort: another writer may still use it (ENOTEMPTY); remove_leftovers() is the backstop.
  if (root_dir_) unlinkat(root_dir_.get(), std::string(kStagingDir).c_str(), AT_REMOVEDIR);
  root_dir_.reset();
}

FsResult<void> AtomicWriter::create_named(bool link_file) {
  UniqueFd root_dir = HUTCH_TRY(detail::open_dir(root_fd_, "/"));
  const std::string fd_link = "/proc/self/fd/" + std::to_string(file_.get());
  // A few rounds: another writer may remove the emptied staging directory between our open and
  // our create (ENOENT), and a random name may be taken (EEXIST).
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::optional<UniqueFd> staging = open_staging(root_dir.get(), dir_.get(), owner_);
    const int where = staging ? staging->get() : dir_.get();
    std::string name = temp_name();
    int rc;
    if (link_file) {
      // An O_TMPFILE file gets a name through its /proc/self/fd link (open(2), linkat(2)):
      // AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH, which a changed fsuid does not have.
      rc = linkat(AT_FDCWD, fd_link.c_str(), where, name.c_str(), AT_SYMLINK_FOLLOW);
    } else {
      rc = openat(where, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (rc >= 0) file_.reset(rc);
    }
    if (rc < 0) {
      if (errno == EEXIST || (errno == ENOENT && staging)) continue;
      return sys_fail(link_file ? "linkat" : "openat", final_name_ + " (temp " + name + ")");
    }
    temp_name_ = std::move(name);
    if (staging) {
      temp_dir_ = std::move(*staging);
      root_dir_ = std::move(root_dir);
    } else {
      int dup = fcntl(dir_.get(), F_DUPFD_CLOEXEC, 0);
      if (dup < 0) return sys_fail("fcntl(F_DUPFD_CLOEXEC)", final_name_);
      temp_dir_.reset(dup);
    }
    return {};
  }
  return fail(Errc::kIo, "openat(" + final_name_ + "): no free temp file name");
}

FsResult<void> AtomicWriter::write(const char* data, size_t size) {
  if (committed_ || !file_) {
    return fail(Errc::kIo, "write(" + final_name_ + "): writer already committed or moved from");
  }
  if (max_bytes_ != 0 && (size > max_bytes_ || written_ > max_bytes_ - size)) {
    return fail(Errc::kTooLarge,
                "write(" + final_name_ + "): more than " + std::to_string(max_bytes_) + " bytes");
  }
  while (size > 0) {
    ssize_t n = ::write(file_.get(), data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_fail("write", final_name_);
    }
    data += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  return {};
}

FsResult<void> AtomicWriter::commit() {
  if (committed_ || !file_) {
    return fail(Errc::kIo, "commit(" + final_name_ + "): writer already committed or moved from");
  }
  // The link or rename creates an entry: under the sandbox root's ids, like begin_write.
  auto identity = HUTCH_TRY(detail::OwnerIdentity::enter(owner_));
  if (fsync(file_.get()) != 0) return sys_fail("fsync", final_name_);
  const std::string name(base_name(final_name_));
  // Whatever the sandbox put at the name meanwhile is checked again: never replace a device.
  struct stat st {};
  if (fstatat(dir_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode))
      return fail(Errc::kIsDirectory, "write(" + final_name_ + "): Is a directory");
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
      return fail(Errc::kNotRegularFile,
                  "write(" + final_name_ + "): not a regular file (a device, FIFO or socket)");
    }
  }
  if (temp_name_.empty()) {
    // Unnamed: link it at the name when that is free, atomically (linkat fails with EEXIST).
    const std::string fd_link = "/proc/self/fd/" + std::to_string(file_.get());
    if (linkat(AT_FDCWD, fd_link.c_str(), dir_.get(), name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      committed_ = true;
    } else if (errno != EEXIST) {
      return sys_fail("linkat", final_name_);
    } else {
      HUTCH_TRY(create_named(true));
    }
  }
  if (!committed_) {
    // renameat never follows a symlink at the target name: it replaces the link itself.
    if (renameat(temp_dir_.get(), temp_name_.c_str(), dir_.get(), name.c_str()) != 0) {
      return sys_fail("renameat", final_name_);
    }
    committed_ = true;
  }
  file_.reset();
  remove_staging();
  if (fsync(dir_.get()) != 0) return sys_fail("fsync", final_name_);
  return {};
}

}  // namespace hutch::files
