// hutch cp: one file between the host and a sandbox, streamed both ways (never held in memory).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/client/verbs.h"
#include "runtime/base/unique_fd.h"

namespace hutch::client {
namespace {

Result<void> write_fd(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("write", what);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

int upload(Connection& daemon, const CopyPlan& plan) {
  bool from_stdin = plan.host_path == "-";
  UniqueFd file;
  if (!from_stdin) {
    file.reset(::open(plan.host_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) return fail(sys_error("open", plan.host_path).error());
  }
  int fd = from_stdin ? STDIN_FILENO : file.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(sys_error("fstat", plan.host_path).error());
  if (S_ISDIR(st.st_mode))
    return fail(Error{"cp", plan.host_path + " is a directory (hutch cp copies one file)", 0});
  auto path = sandbox_path(plan.sandbox, "/files?path=" + url_encode(plan.sandbox_path));
  if (!path) return fail(path.error());
  std::optional<uint64_t> length;
  if (S_ISREG(st.st_mode)) {
    length = static_cast<uint64_t>(st.st_size);
    if (!from_stdin) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "0%o", st.st_mode & 07777);
      *path += std::string("&mode=") + mode;
    }
  }
  auto sent = daemon.put_streaming(*path, length, [&](char* buffer, size_t size) -> Result<size_t> {
    while (true) {
      ssize_t n = ::read(fd, buffer, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sys_error("read", plan.host_path);
      return static_cast<size_t>(n);
    }
  });
  if (!sent) return fail(sent.error());
  return 0;
}

// Into a temporary file next to the destination, renamed over it once complete: an interrupted
// copy never leaves a partial file under the destination's name.
int download(Connection& daemon, const CopyPlan& plan) {
  auto path = sandbox_path(plan.sandbox, "/files?path=" + url_encode(plan.sandbox_path));
  if (!path) return fail(path.error());
  if (plan.host_path == "-") {
    std::optional<Error> failure;
    auto fetched = daemon.get_streaming(*path, [&](std::string_view data) {
      auto written = write_fd(STDOUT_FILENO, data, "stdout");
      if (!written) failure = written.error();
      return written.has_value();
    });
    if (failure) return fail(*failure);
    if (!fetched) return fail(fetched.error());
    return 0;
  }
  std::filesystem::path destination = plan.host_path;
  std::error_code ec;
  if (std::filesystem::is_directory(destination, ec))
    destination /= std::filesystem::path(plan.sandbox_path).filename();
  std::filesystem::path parent = destination.parent_path();
  std::string temp = (parent.empty() ? std::string(".") : parent.string()) + "/." +
                     destination.filename().string() + ".hutch-XXXXXX";
  UniqueFd file(::mkostemp(temp.data(), O_CLOEXEC));
  if (!file) return fail(sys_error("mkostemp", temp).error());
  // mkostemp creates 0600; a copied file gets the usual 0666 & ~umask.
  mode_t mask = ::umask(0);
  ::umask(mask);
  std::optional<Error> failure;
  if (::fchmod(file.get(), 0666 & ~mask) != 0) failure = sys_error("fchmod", temp).error();
  Result<void> fetched;
  if (!failure) {
    fetched = daemon.get_streaming(*path, [&](std::string_view data) {
      auto written = write_fd(file.get(), data, temp);
      if (!written) failure = written.error();
      return written.has_value();
    });
  }
  if (!failure && fetched && ::fsync(file.get()) != 0) failure = sys_error("fsync", temp).error();
  if (!failure && fetched && ::rename(temp.c_str(), destination.c_str()) != 0)
    failure = sys_error("rename", temp + " to " + destination.string()).error();
  if (failure || !fetched) {
    ::unlink(temp.c_str());
    return fail(failure ? *failure : fetched.error());
  }
  return 0;
}

}  // namespace

int copy_file(Connection& daemon, const std::string& source, const std::string& destination) {
  auto plan = plan_copy(source, destination);
  if (!plan) return fail(plan.error());
  return plan->upload ? upload(daemon, *plan) : download(daemon, *plan);
}

}  // namespace hutch::client
