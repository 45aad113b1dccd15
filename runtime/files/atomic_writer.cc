// AtomicWriter: a temp file next to the target, renamed over it on commit.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "runtime/files/resolve.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::files {

using detail::fail;
using detail::sys_fail;

namespace {

std::string_view base_name(std::string_view path) { return path.substr(path.rfind('/') + 1); }

}  // namespace

AtomicWriter::AtomicWriter(AtomicWriter&& other) noexcept
    : dir_(std::move(other.dir_)),
      file_(std::move(other.file_)),
      temp_name_(std::exchange(other.temp_name_, {})),
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
    temp_name_ = std::exchange(other.temp_name_, {});
    final_name_ = std::exchange(other.final_name_, {});
    written_ = other.written_;
    max_bytes_ = other.max_bytes_;
    committed_ = std::exchange(other.committed_, true);
  }
  return *this;
}

AtomicWriter::~AtomicWriter() {
  if (!committed_ && dir_ && !temp_name_.empty()) unlinkat(dir_.get(), temp_name_.c_str(), 0);
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
  if (fsync(file_.get()) != 0) return sys_fail("fsync", final_name_);
  const std::string name(base_name(final_name_));
  // renameat never follows a symlink at the target name: it replaces the link itself.
  if (renameat(dir_.get(), temp_name_.c_str(), dir_.get(), name.c_str()) != 0) {
    return sys_fail("renameat", final_name_);
  }
  committed_ = true;
  file_.reset();
  if (fsync(dir_.get()) != 0) return sys_fail("fsync", final_name_);
  return {};
}

}  // namespace hutch::files
