#include "daemon/zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "daemon/zygote_wire.h"
#include "runtime/fs/host_rootfs.h"
#include "runtime/ns/net.h"
#include "runtime/process/sync.h"
#include "seccomp/default_program.h"

namespace hutch::daemon {
namespace {

constexpr size_t kMaxMessage = 192 * 1024;  // below the default SEQPACKET send buffer
constexpr size_t kNetnsAhead = 4;

void write_line(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// The supervisor starts from a clean slate: default dispositions, nothing blocked, its own
// session (a terminal's ^C to hutchd's process group must not reach sandboxes), no hutchd stdio.
[[noreturn]] void run_supervisor(const nlohmann::json& request, SandboxSpec spec, int ready_fd,
                                 MadeAhead made) {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP)
      ::signal(sig, SIG_DFL);  // SIGCHLD too: the zygote ignores it
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  setsid();
  // Not "hutchd…": `pkill hutchd` must not take sandboxes down with the daemon.
  prctl(PR_SET_NAME, "hutch-supervise");
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int log_fd = ::open(request.at("log").get<std::string>().c_str(),
                      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(log_fd >= 0 ? log_fd : null_fd, STDERR_FILENO);
  }
  write_line(ready_fd, "supervisor " + std::to_string(getpid()) + "\n");
  spec.seccomp = default_seccomp_program();
  int status = serve_sandbox(spec, request.at("exec_socket").get<std::string>(),
                             request.at("supervisor_socket").get<std::string>(), ready_fd,
                             std::move(made));
  _exit(status);
}

// Reads lines from the ready pipe until "ok"/"error" or EOF, within the deadline.
Result<void> read_ready_lines(int fd, std::chrono::milliseconds timeout,
                              std::vector<std::string>& lines) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string text;
  for (;;) {
    size_t newline;
    while ((newline = text.find('\n')) != std::string::npos) {
      lines.push_back(text.substr(0, newline));
      text.erase(0, newline + 1);
      if (lines.back().starts_with("ok ") || lines.back().starts_with("error ")) return {};
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return plain_error("sandbox start", "timed out waiting for the supervisor");
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sys_error("poll", "ready pipe");
    if (r == 0) continue;
    char chunk[512];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read", "ready pipe");
    if (n == 0) {
      if (!text.empty()) lines.push_back(text);
      lines.push_back("error the supervisor exited before its sandbox was ready");
      return {};
    }
    text.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace

[[noreturn]] void run_zygote(int sock) {
  // Auto-reap supervisors; a terminal's SIGINT/SIGTERM to hutchd's group is hutchd's to handle.
  ::signal(SIGCHLD, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  // Sandboxes on the host rootfs get a clone of one skeleton, rebuilt when the host changes.
  Result<SkeletonCache> skeletons = SkeletonCache::for_this_host();
  // Network namespaces made while no request waits, each given to one sandbox. Creating one
  // costs ~0.3 ms; a failure turns this off, and supervisors then make their own (reporting
  // what fails there).
  std::deque<UniqueFd> ready_netns;
  bool make_netns_ahead = true;
  std::vector<char> buffer(kMaxMessage);
  for (;;) {
    if (make_netns_ahead && ready_netns.size() < kNetnsAhead) {
      pollfd pending{sock, POLLIN, 0};
      if (::poll(&pending, 1, 0) == 0) {
        auto made = make_loopback_netns();
        if (made) {
          ready_netns.push_back(std::move(*made));
        } else {
          write_line(STDERR_FILENO, "hutchd-zygote: network namespaces are not made ahead: " +
                                        made.error().message() + "\n");
          make_netns_ahead = false;
        }
        continue;
      }
    }
    int ready_fd = -1;
    int fd_count = 1;
    long n = recv_with_fds(sock, buffer.data(), buffer.size(), &ready_fd, &fd_count);
    if (n <= 0) _exit(0);  // hutchd is gone
    if (fd_count != 1) continue;
    nlohmann::json request;
    SandboxSpec spec;
    try {
      request = nlohmann::json::parse(std::string_view(buffer.data(), static_cast<size_t>(n)));
      spec = spec_from_json(request.at("spec"));
    } catch (const std::exception& e) {
      write_line(ready_fd, std::string("error zygote: bad request: ") + e.what() + "\n");
      ::close(ready_fd);
      continue;
    }
    MadeAhead made;
    // Without one (a failed build), the supervisor plans and builds its own and reports
    // whatever fails there.
    if (skeletons && spec.lower_dirs.empty()) {
      if (auto taken = skeletons->take(spec.ids.host_base)) made.skeleton = std::move(*taken);
    }
    if (spec.net == NetMode::kLoopback && !ready_netns.empty()) {
      made.netns = std::move(ready_netns.front());
      ready_netns.pop_front();
    }
    pid_t pid = fork();
    if (pid == 0) {
      ::close(sock);
      ready_netns.clear();  // other sandboxes' namespaces
      run_supervisor(request, std::move(spec), ready_fd, std::move(made));
    }
    if (pid < 0) write_line(ready_fd, std::string("error fork: ") + std::strerror(errno) + "\n");
    ::close(ready_fd);
  }
}

Result<Zygote> Zygote::start(const std::string& binary) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return sys_error("socketpair", "zygote");
  UniqueFd parent_end(fds[0]), child_end(fds[1]);
  if (::access(binary.c_str(), X_OK) != 0) return sys_error("access", binary + " (the zygote)");
  pid_t pid = fork();
  if (pid < 0) return sys_error("fork", "zygote");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // kept across execve (the binary is not set-id)
    // The zygote's end becomes fd 3, the only fd it inherits besides stdio.
    if (dup2(child_end.get(), kZygoteSocketFd) < 0) _exit(127);
    close_range(kZygoteSocketFd + 1, ~0U, CLOSE_RANGE_CLOEXEC);
    const std::string fd_text = std::to_string(kZygoteSocketFd);
    execl(binary.c_str(), "hutchd-zygote", fd_text.c_str(), nullptr);
    std::fprintf(stderr, "hutchd: execve %s: %s\n", binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  return Zygote(std::move(parent_end));
}

Result<LiveSandboxRef> Zygote::spawn(const SandboxSpec& spec, const std::string& exec_socket,
                                     const std::string& supervisor_socket,
                                     const std::string& log_path,
                                     std::chrono::milliseconds timeout) const {
  nlohmann::json request = {{"spec", spec_to_json(spec)},
                            {"exec_socket", exec_socket},
                            {"supervisor_socket", supervisor_socket},
                            {"log", log_path}};
  std::string message = request.dump();
  if (message.size() > kMaxMessage) return plain_error("sandbox start", "spec too large");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return sys_error("pipe2", "ready pipe");
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);

  const int fd = write_end.get();
  if (int err = send_with_fds(socket_.get(), message.data(), message.size(), &fd, 1))
    return sys_error("sendmsg", "zygote", err);
  write_end.reset();  // the zygote and the supervisor hold the only write ends now: EOF = gone

  std::vector<std::string> lines;
  auto status = read_ready_lines(read_end.get(), timeout, lines);
  LiveSandboxRef ref;
  ref.exec_socket = exec_socket;
  ref.supervisor_socket = supervisor_socket;
  for (const std::string& line : lines) {
    if (line.starts_with("supervisor ")) ref.supervisor_pid = std::atoi(line.c_str() + 11);
  }
  if (!status) {
    // A supervisor stuck in setup: kill it rather than leave it behind unrecorded.
    if (ref.supervisor_pid > 0) ::kill(ref.supervisor_pid, SIGKILL);
    return std::unexpected(status.error());
  }
  const std::string& last = lines.back();
  if (!last.starts_with("ok ")) {
    // A supervisor that reported an error exits by itself (status 125) after its cleanup.
    return plain_error("sandbox start", last.starts_with("error ") ? last.substr(6) : last);
  }
  ref.init_pid = std::atoi(last.c_str() + 3);
  auto start_time = process_start_time(ref.supervisor_pid);
  if (ref.supervisor_pid <= 0 || ref.init_pid <= 0 || !start_time)
    return plain_error("sandbox start", "the supervisor vanished right after it was ready");
  ref.supervisor_start_time = *start_time;
  return ref;
}

std::optional<uint64_t> process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  // Fields after the comm start at field 3 (state); start time is field 22.
  for (int index = 3; fields >> field; ++index) {
    if (index == 22) return std::stoull(field);
  }
  return std::nullopt;
}

}  // namespace hutch::daemon
