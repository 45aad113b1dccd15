#include "runtime/cgroup/cgroup_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <charconv>
#include <sstream>
#include <thread>

#include "runtime/base/text_file.h"

namespace hutch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kMaxPause{20};

std::string file_path(const CgroupDir& dir, std::string_view name) {
  return dir.path + "/" + std::string(name);
}

std::optional<uint64_t> parse_number(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

Result<std::string> read_fd(int fd, const std::string& path) {
  std::string text;
  char buffer[4096];
  for (;;) {
    ssize_t n = pread(fd, buffer, sizeof buffer, static_cast<off_t>(text.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("read", path);
    }
    if (n == 0) return text;
    text.append(buffer, static_cast<size_t>(n));
  }
}

bool has_line(std::string_view text, std::string_view line) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (text.substr(start, end - start) == line) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

Result<CgroupDir> open_cgroup_dir(std::string path) {
  int fd = open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("open", path);
  return CgroupDir{std::move(path), UniqueFd(fd)};
}

Result<CgroupDir> open_cgroup_subdir(const CgroupDir& parent, const std::string& name) {
  std::string path = file_path(parent, name);
  int fd = openat(parent.fd.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sys_error("open", path);
  return CgroupDir{std::move(path), UniqueFd(fd)};
}

Result<void> make_cgroup_subdir(const CgroupDir& parent, const std::string& name, bool may_exist) {
  if (mkdirat(parent.fd.get(), name.c_str(), 0755) != 0 && !(may_exist && errno == EEXIST)) {
    return sys_error("mkdir", file_path(parent, name));
  }
  return {};
}

bool cgroup_file_exists(const CgroupDir& dir, const char* name) {
  return faccessat(dir.fd.get(), name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<void> write_cgroup_file(const CgroupDir& dir, const char* name, std::string_view value) {
  UniqueFd fd(openat(dir.fd.get(), name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("open", file_path(dir, name));
  // cgroupfs takes a value in one write(2); a short write does not happen for these sizes.
  if (write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return sys_error("write", std::string(value) + " to " + file_path(dir, name));
  }
  return {};
}

Result<std::string> read_cgroup_file(const CgroupDir& dir, const char* name) {
  UniqueFd fd(openat(dir.fd.get(), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("open", file_path(dir, name));
  return read_fd(fd.get(), file_path(dir, name));
}

Result<uint64_t> read_cgroup_number(const CgroupDir& dir, const char* name) {
  std::string text = HUTCH_TRY(read_cgroup_file(dir, name));
  std::optional<uint64_t> value = parse_number(text);
  if (!value) {
    return plain_error("parse", file_path(dir, name) + ": '" + text + "' is not a number");
  }
  return *value;
}

std::optional<uint64_t> find_cgroup_key(std::string_view text, std::string_view key) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      return parse_number(line.substr(key.size() + 1));
    }
    start = end + 1;
  }
  return std::nullopt;
}

Result<std::vector<std::string>> list_cgroup_subdirs(const CgroupDir& dir) {
  // An O_PATH fd cannot be read as a directory: open a readable one for getdents.
  int fd = openat(dir.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("open", dir.path);
  DIR* stream = fdopendir(fd);
  if (stream == nullptr) {
    int err = errno;
    close(fd);
    return sys_error("fdopendir", dir.path, err);
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* entry = readdir(stream)) {
    std::string_view name = entry->d_name;
    if (entry->d_type == DT_DIR && name != "." && name != "..") names.emplace_back(name);
  }
  int err = errno;
  closedir(stream);
  if (err != 0) return sys_error("readdir", dir.path, err);
  return names;
}

Result<std::vector<pid_t>> read_tree_procs(const CgroupDir& dir) {
  std::string text = HUTCH_TRY(read_cgroup_file(dir, "cgroup.procs"));
  std::vector<pid_t> pids;
  std::istringstream in(text);
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  std::vector<std::string> children = HUTCH_TRY(list_cgroup_subdirs(dir));
  for (const std::string& name : children) {
    Result<CgroupDir> child = open_cgroup_subdir(dir, name);
    if (!child) {
      if (child.error().err == ENOENT) continue;  // removed meanwhile
      return std::unexpected(child.error());
    }
    std::vector<pid_t> more = HUTCH_TRY(read_tree_procs(*child));
    pids.insert(pids.end(), more.begin(), more.end());
  }
  return pids;
}

Result<void> wait_for_cgroup_line(const CgroupDir& dir, const char* name, std::string_view line,
                                  std::chrono::milliseconds timeout) {
  const std::string path = file_path(dir, name);
  UniqueFd fd(openat(dir.fd.get(), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("open", path);
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    std::string text = HUTCH_TRY(read_fd(fd.get(), path));
    if (has_line(text, line)) return {};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return sys_error("wait for '" + std::string(line) + "'", path, ETIMEDOUT);
    }
    // cgroup.events signals changes as POLLPRI (cgroup-v2.rst "cgroup.events"); freezer.state does
    // not, so the wait is also capped at 10 ms per round.
    pollfd pfd{fd.get(), POLLPRI, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 10))) < 0 &&
        errno != EINTR) {
      return sys_error("poll", path);
    }
  }
}

Result<void> remove_cgroup_tree(const CgroupDir& parent, const std::string& name,
                                std::chrono::milliseconds patience) {
  const std::string path = file_path(parent, name);
  Result<CgroupDir> dir = open_cgroup_subdir(parent, name);
  if (!dir) return dir.error().err == ENOENT ? Result<void>{} : std::unexpected(dir.error());
  std::vector<std::string> children = HUTCH_TRY(list_cgroup_subdirs(*dir));
  for (const std::string& child : children) {
    HUTCH_TRY(remove_cgroup_tree(*dir, child, patience));
  }
  const Clock::time_point deadline = Clock::now() + patience;
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, kMaxPause)) {
    if (unlinkat(parent.fd.get(), name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return {};
    if (errno != EBUSY || Clock::now() >= deadline) return sys_error("rmdir", path);
    std::this_thread::sleep_for(pause);
  }
}

Result<void> require_no_host_swap(const std::string& why) {
  auto text = HUTCH_TRY(read_text_file("/proc/meminfo"));
  std::istringstream meminfo(text);
  for (std::string key; meminfo >> key;) {
    uint64_t kib = 0;
    std::string unit;
    if (!(meminfo >> kib)) break;
    std::getline(meminfo, unit);
    if (key == "SwapTotal:") {
      if (kib == 0) return {};
      return plain_error("cgroup swap", why + " while the host has " + std::to_string(kib) +
                                            " KiB of swap: the memory limit could spill into swap");
    }
  }
  return plain_error("cgroup swap", "/proc/meminfo has no SwapTotal line");
}

}  // namespace hutch
