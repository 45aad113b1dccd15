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
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "daemon/zygote_wire.h"
#include "runtime/fs/host_rootfs.h"
#include "runtime/ns/net.h"
#include "runtime/process/sync.h"
#include "runtime/supervisor_protocol.h"
#include "seccomp/default_program.h"

namespace hutch::daemon {
namespace {

constexpr size_t kMaxMessage = 192 * 1024;  // below the default SEQPACKET send buffer
constexpr size_t kNetnsAhead = 4;

// One request from hutchd, decoded whole before the fork: the child only acts on it.
struct SpawnRequest {
  SandboxSpec spec;
  std::string exec_socket;
  std::string supervisor_socket;
  std::string log_path;
  UniqueFd netns;                       // hutchd's namespace for this sandbox, if it sent one
  std::vector<UniqueFd> volume_mounts;  // one per spec.volumes entry, in order
  std::vector<UniqueFd> bind_trees;     // one per spec.binds entry with a tree_fd, in order
};

// The supervisor starts from a clean slate: default dispositions, nothing blocked, its own
// session (a terminal's ^C to hutchd's process group must not reach sandboxes), no hutchd stdio.
[[noreturn]] void run_supervisor(SpawnRequest request, UniqueFd ready, MadeAhead made) {
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
  {
    const UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    const UniqueFd log(
        ::open(request.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (null) {
      dup2(null.get(), STDIN_FILENO);
      dup2(null.get(), STDOUT_FILENO);
      dup2(log ? log.get() : null.get(), STDERR_FILENO);
    }
  }
  ServeReady announced;
  announced.kind = ServeReady::Kind::kSupervisor;
  announced.supervisor_pid = getpid();
  write_ready(ready.get(), announced);
  request.spec.seccomp = default_seccomp_program();
  int status = serve_sandbox(request.spec, request.exec_socket, request.supervisor_socket,
                             ready.release(), std::move(made));
  _exit(status);
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
          std::fprintf(stderr, "hutchd-zygote: network namespaces are not made ahead: %s\n",
                       made.error().message().c_str());
          make_netns_ahead = false;
        }
        continue;
      }
    }
    int fds[kMaxPassedFds];
    int fd_count = kMaxPassedFds;
    long n = recv_with_fds(sock, buffer.data(), buffer.size(), fds, &fd_count);
    if (n <= 0) _exit(0);  // hutchd is gone
    if (fd_count < 1) continue;
    UniqueFd ready(fds[0]);
    std::deque<UniqueFd> passed;
    for (int i = 1; i < fd_count; ++i) passed.emplace_back(fds[i]);
    SpawnRequest request;
    try {
      const nlohmann::json json =
          nlohmann::json::parse(std::string_view(buffer.data(), static_cast<size_t>(n)));
      request.spec = spec_from_json(json.at("spec"));
      request.exec_socket = json.at("exec_socket").get<std::string>();
      request.supervisor_socket = json.at("supervisor_socket").get<std::string>();
      request.log_path = json.at("log").get<std::string>();
      const bool netns_sent = json.value("netns", false);
      const auto trees = static_cast<size_t>(
          std::ranges::count(request.spec.binds, kTreeFollows, &BindMount::tree_fd));
      if (passed.size() != (netns_sent ? 1 : 0) + request.spec.volumes.size() + trees)
        throw std::invalid_argument(std::to_string(passed.size()) + " fds for " +
                                    (netns_sent ? "a namespace, " : "") +
                                    std::to_string(request.spec.volumes.size()) + " volumes and " +
                                    std::to_string(trees) + " bind trees");
      if (netns_sent && request.spec.net != NetMode::kHostOwned)
        throw std::invalid_argument("a namespace fd for a spec whose net is not host_owned");
      if (netns_sent) {
        request.netns = std::move(passed.front());
        passed.pop_front();
      }
      for (VolumeMount& volume : request.spec.volumes) {
        volume.mount_fd = passed.front().get();
        request.volume_mounts.push_back(std::move(passed.front()));
        passed.pop_front();
      }
      for (BindMount& bind : request.spec.binds) {
        if (bind.tree_fd != kTreeFollows) continue;
        bind.tree_fd = passed.front().get();
        request.bind_trees.push_back(std::move(passed.front()));
        passed.pop_front();
      }
    } catch (const std::exception& e) {
      write_ready(ready.get(),
                  failed_ready(Error{"zygote", std::string("bad request: ") + e.what()}));
      continue;
    }
    MadeAhead made;
    // Without one (a failed build), the supervisor plans and builds its own and reports
    // whatever fails there.
    if (skeletons && request.spec.lower_dirs.empty()) {
      if (auto taken = skeletons->take(request.spec.ids.host_base))
        made.skeleton = std::move(*taken);
    }
    made.volume_mounts = std::move(request.volume_mounts);
    made.bind_trees = std::move(request.bind_trees);
    if (request.netns) {
      made.netns = std::move(request.netns);
    } else if (request.spec.net != NetMode::kNone && !ready_netns.empty()) {
      made.netns = std::move(ready_netns.front());
      ready_netns.pop_front();
    }
    pid_t pid = fork();
    if (pid == 0) {
      ::close(sock);
      ready_netns.clear();  // other sandboxes' namespaces
      run_supervisor(std::move(request), std::move(ready), std::move(made));
    }
    if (pid < 0) write_ready(ready.get(), failed_ready(sys_error("fork", "supervisor").error()));
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
                                     const std::string& log_path, std::chrono::milliseconds timeout,
                                     int netns_fd) const {
  std::vector<int> trees;
  for (const BindMount& bind : spec.binds)
    if (bind.tree_fd >= 0) trees.push_back(bind.tree_fd);
  if (1 + (netns_fd >= 0 ? 1 : 0) + spec.volumes.size() + trees.size() >
      static_cast<size_t>(kMaxPassedFds))
    return plain_error("sandbox start",
                       "too many volumes and mounts for one message to the zygote");
  nlohmann::json request = {{"spec", spec_to_json(spec)},
                            {"exec_socket", exec_socket},
                            {"supervisor_socket", supervisor_socket},
                            {"log", log_path}};
  if (netns_fd >= 0) request["netns"] = true;
  std::string message = request.dump();
  if (message.size() > kMaxMessage) return plain_error("sandbox start", "spec too large");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return sys_error("pipe2", "ready pipe");
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);

  std::vector<int> fds = {write_end.get()};
  if (netns_fd >= 0) fds.push_back(netns_fd);
  for (const VolumeMount& volume : spec.volumes) fds.push_back(volume.mount_fd);
  fds.insert(fds.end(), trees.begin(), trees.end());
  if (int err = send_with_fds(socket_.get(), message.data(), message.size(), fds.data(),
                              static_cast<int>(fds.size())))
    return sys_error("sendmsg", "zygote", err);
  write_end.reset();  // the zygote and the supervisor hold the only write ends now: EOF = gone

  pid_t stuck = 0;
  auto ref = read_serve_ready(read_end.get(), timeout, exec_socket, supervisor_socket, &stuck);
  // A supervisor stuck in setup: kill it rather than leave it behind unrecorded. One that reported
  // its failure exits by itself (status 125) after its cleanup.
  if (!ref && stuck > 0) ::kill(stuck, SIGKILL);
  return ref;
}

}  // namespace hutch::daemon
