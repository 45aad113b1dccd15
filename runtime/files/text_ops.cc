// Line-oriented operations: read_lines (a window of lines) and edit (replace a unique string).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/error.h"
#include "runtime/files/identity.h"
#include "runtime/files/resolve.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::files {

using detail::fail;
using detail::OwnerIdentity;
using detail::parse_path;
using detail::SandboxPath;
using detail::sys_fail;

namespace {

constexpr uint64_t kDefaultReadLimit = 2000;  // Deep Agents' read(limit=2000)

}  // namespace

FsResult<ReadResult> SandboxFs::read_lines(std::string_view path, uint64_t offset,
                                           uint64_t limit) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  const UniqueFd fd = HUTCH_TRY(detail::open_regular(root_fd_, p.path, nullptr));
  if (limit == 0) limit = kDefaultReadLimit;
  const uint64_t window_end = offset > UINT64_MAX - limit ? UINT64_MAX : offset + limit;

  // Streamed: the whole file is scanned for total_lines, only the window is kept.
  ReadResult out;
  uint64_t line = 0;     // index of the line the next byte belongs to
  bool partial = false;  // bytes seen after the last '\n'
  HUTCH_TRY(detail::read_chunks(fd.get(), p.path, [&](std::string_view chunk) -> FsResult<void> {
    const char* pos = chunk.data();
    const char* end = chunk.data() + chunk.size();
    while (pos < end) {
      const char* nl = static_cast<const char*>(std::memchr(pos, '\n', end - pos));
      const char* stop = nl != nullptr ? nl + 1 : end;
      if (line >= offset && line < window_end) {
        if (out.content.size() + (stop - pos) > detail::kMaxEditBytes) {
          return fail(Errc::kTooLarge, "read(" + p.path + "): the requested lines exceed " +
                                           std::to_string(detail::kMaxEditBytes) + " bytes");
        }
        out.content.append(pos, stop - pos);
      }
      if (nl != nullptr) {
        ++line;
        partial = false;
      } else {
        partial = true;
      }
      pos = stop;
    }
    return {};
  }));
  out.total_lines = line + (partial ? 1 : 0);
  out.start_line = std::min(offset, out.total_lines);
  out.end_line = std::min(window_end, out.total_lines);
  if (out.end_line < out.total_lines) out.next_offset = out.end_line;
  return out;
}

FsResult<uint64_t> SandboxFs::edit(std::string_view path, std::string_view old_text,
                                   std::string_view new_text, bool replace_all) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  if (p.is_root()) return fail(Errc::kIsDirectory, "edit(/): Is a directory");
  if (old_text.empty()) return fail(Errc::kNoMatch, "edit(" + p.path + "): old text is empty");
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));

  // The file itself, not a symlink's target: the rewrite replaces the entry at this name.
  const UniqueFd dir = HUTCH_TRY(detail::open_dir(root_fd_, p.parent));
  int raw =
      openat(dir.get(), p.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (raw < 0) {
    if (errno == ELOOP) {
      return fail(Errc::kInvalidPath,
                  "edit(" + p.path + "): is a symbolic link; edit the file it points to");
    }
    return sys_fail("openat", p.path);
  }
  UniqueFd fd(raw);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return sys_fail("fstat", p.path);
  if (S_ISDIR(st.st_mode)) return fail(Errc::kIsDirectory, "edit(" + p.path + "): Is a directory");
  if (!S_ISREG(st.st_mode)) {
    return fail(Errc::kNotRegularFile, "edit(" + p.path + "): not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > detail::kMaxEditBytes) {
    return fail(Errc::kTooLarge, "edit(" + p.path + "): larger than " +
                                     std::to_string(detail::kMaxEditBytes) + " bytes");
  }
  std::string content;
  HUTCH_TRY(detail::read_chunks(fd.get(), p.path, [&](std::string_view chunk) -> FsResult<void> {
    if (content.size() + chunk.size() > detail::kMaxEditBytes) {
      return fail(Errc::kTooLarge, "edit(" + p.path + "): larger than " +
                                       std::to_string(detail::kMaxEditBytes) + " bytes");
    }
    content.append(chunk);
    return {};
  }));
  fd.reset();

  uint64_t count = 0;
  for (size_t at = content.find(old_text); at != std::string::npos;
       at = content.find(old_text, at + old_text.size())) {
    ++count;
  }
  if (count == 0) return fail(Errc::kNoMatch, "edit(" + p.path + "): old text not found");
  if (count > 1 && !replace_all) {
    return fail(Errc::kNotUnique, "edit(" + p.path + "): old text occurs " + std::to_string(count) +
                                      " times; give more context or use replace_all");
  }
  std::string result;
  result.reserve(content.size() + count * new_text.size());
  size_t from = 0;
  for (size_t at = content.find(old_text); at != std::string::npos;
       at = content.find(old_text, from)) {
    result.append(content, from, at - from);
    result.append(new_text);
    from = at + old_text.size();
  }
  result.append(content, from);

  HUTCH_TRY(write_file(p.path, result, std::nullopt));
  return count;
}

}  // namespace hutch::files
