#include "runtime/live_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <vector>

#include "runtime/launch.h"
#include "runtime/fs/tree_copy.h"
#include "runtime/process/exec_protocol.h"
#include "runtime/process/pidfd.h"
#include "runtime/base/proc_stat.h"
#include "runtime/process/sync.h"

namespace hutch {
namespace {

constexpr int kSupervisorRequestTimeoutMs = 30'000;
constexpr int kExecStartTimeoutMs = 10'000;
// What one message fits in without raising the socket's send buffer (the default is ~208 KiB).
constexpr size_t kDefaultSendBufferBytes = 64 * 1024;

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return plain_error("socket path", path + " is empty or longer than " +
                                          std::to_string(sizeof address.sun_path - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// A listening SOCK_SEQPACKET socket at `path`, mode 0600 (host root only).
Result<UniqueFd> listen_unix(const std::string& path) {
  auto address = unix_address(path);
  if (!address) return std::unexpected(address.error());
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket", "AF_UNIX SOCK_SEQPACKET");
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", path);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0)
    return sys_error("bind", path);
  if (chmod(path.c_str(), 0600) != 0) return sys_error("chmod", path + " 0600");
  if (listen(fd.get(), 128) != 0) return sys_error("listen", path);
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& path) {
  auto address = unix_address(path);
  if (!address) return std::unexpected(address.error());
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket", "AF_UNIX SOCK_SEQPACKET");
  while (connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0) {
    if (errno != EINTR) return sys_error("connect", path);
  }
  return fd;
}

// Removes the sockets' paths however serve_sandbox ends.
class SocketPaths {
 public:
  SocketPaths(std::string a, std::string b) : paths_{std::move(a), std::move(b)} {}
  SocketPaths(const SocketPaths&) = delete;
  SocketPaths& operator=(const SocketPaths&) = delete;
  ~SocketPaths() {
    for (const std::string& path : paths_) unlink(path.c_str());
  }

 private:
  std::string paths_[2];
};

void write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

// Waits for init's kServing, or the failure it reports while setting up.
Result<void> wait_until_serving(Launched& launched) {
  for (;;) {
    pollfd fds[2] = {{launched.sync.get(), POLLIN, 0}, {launched.init->pidfd(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll", "sandbox setup");
    }
    if (fds[0].revents != 0) {
      SyncMessage message{};
      long n = recv_sync(launched.sync.get(), &message);
      if (n > 0 && message.kind == SyncMessage::Kind::kServing) return {};
      if (n > 0 && message.kind == SyncMessage::Kind::kFailure)
        return std::unexpected(Error{message.error.step, message.error.detail, message.error.err});
      if (n > 0) continue;
    }
    return plain_error("sandbox setup", "init exited before it served");
  }
}

std::string format_stats(const CgroupStats& stats) {
  std::string line = "ok";
  auto field = [&](const char* name, const std::optional<uint64_t>& value) {
    if (value) line += std::string(" ") + name + "=" + std::to_string(*value);
  };
  field("cpu_usage_usec", stats.cpu_usage_usec);
  field("memory_peak_bytes", stats.memory_peak_bytes);
  field("pids_current", stats.pids_current);
  field("pids_peak", stats.pids_peak);
  field("oom_kills", stats.oom_kills);
  return line;
}

CgroupStats parse_stats(const std::string& fields) {
  CgroupStats stats;
  std::istringstream words(fields);
  std::string word;
  while (words >> word) {
    size_t eq = word.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = word.substr(0, eq);
    const uint64_t value = std::strtoull(word.c_str() + eq + 1, nullptr, 10);
    if (name == "cpu_usage_usec") stats.cpu_usage_usec = value;
    if (name == "memory_peak_bytes") stats.memory_peak_bytes = value;
    if (name == "pids_current") stats.pids_current = value;
    if (name == "pids_peak") stats.pids_peak = value;
    if (name == "oom_kills") stats.oom_kills = value;
  }
  return stats;
}

// One supervisor request: a word in, "ok …" or "error …" out.
std::string answer(std::optional<SandboxCgroup>& cgroup, const std::string& request) {
  if (!cgroup) return "error the sandbox has no cgroup (created without limits)";
  if (request == "freeze") {
    auto r = cgroup->freeze();
    return r ? "ok" : "error " + r.error().message();
  }
  if (request == "thaw") {
    auto r = cgroup->thaw();
    return r ? "ok" : "error " + r.error().message();
  }
  if (request == "stats") {
    auto r = cgroup->stats();
    return r ? format_stats(*r) : "error " + r.error().message();
  }
  return "error unknown request " + request;
}

// "snapshot <dir>": the upper dir copied to <dir> (new; its parent exists) while the sandbox is
// frozen, so no process changes it halfway; thawed on every path.
std::string snapshot(std::optional<SandboxCgroup>& cgroup, int upper_fd, const std::string& dest) {
  const std::filesystem::path path(dest);
  if (!path.is_absolute() || path.filename().empty()) return "error bad snapshot path " + dest;
  UniqueFd parent(open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent) return "error " + sys_error("open", path.parent_path()).error().message();
  class Thaw {
   public:
    explicit Thaw(std::optional<SandboxCgroup>& cgroup) : cgroup_(cgroup) {}
    Thaw(const Thaw&) = delete;
    Thaw& operator=(const Thaw&) = delete;
    ~Thaw() {
      if (frozen_) (void)cgroup_->thaw();
    }
    Result<void> freeze() {
      if (!cgroup_) return {};
      if (auto r = cgroup_->freeze(); !r) return r;
      frozen_ = true;
      return {};
    }
    Result<void> thaw() {
      if (!frozen_) return {};
      frozen_ = false;
      return cgroup_->thaw();
    }

   private:
    std::optional<SandboxCgroup>& cgroup_;
    bool frozen_ = false;
  } frozen(cgroup);
  const auto freezing = std::chrono::steady_clock::now();
  if (auto r = frozen.freeze(); !r) return "error " + r.error().message();
  syncfs(upper_fd);
  auto copied = copy_tree(upper_fd, parent.get(), path.filename());
  auto thawed = frozen.thaw();
  const auto frozen_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - freezing)
                             .count();
  if (!copied) return "error " + copied.error().message();
  if (!thawed) return "error " + thawed.error().message();
  return "ok files=" + std::to_string(copied->files) + " bytes=" + std::to_string(copied->bytes) +
         " frozen_us=" + std::to_string(frozen_us);
}

// "oom_counter": "ok" with the cgroup's OOM counter file as an fd, so that hutchd reads the count
// around each exec without a round trip here; "ok" alone when there is no memory cgroup.
void send_oom_counter(const std::optional<SandboxCgroup>& cgroup, int conn) {
  UniqueFd counter;
  if (cgroup) {
    auto opened = cgroup->open_oom_counter();
    if (!opened) {
      const std::string reply = "error " + opened.error().message();
      (void)!send(conn, reply.data(), reply.size(), MSG_NOSIGNAL);
      return;
    }
    counter = std::move(*opened);
  }
  const int fd = counter.get();
  (void)send_with_fds(conn, "ok", 2, &fd, counter ? 1 : 0);
}

bool process_running(int pidfd) {
  pollfd fd{pidfd, POLLIN, 0};
  return poll(&fd, 1, 0) == 0;
}

// One request on a connection to the supervisor at `socket`: its "ok …" answer's text; an fd
// that comes with it goes to *received_fd (closed when null).
Result<std::string> exchange(int conn, const std::string& socket, const std::string& command,
                             UniqueFd* received_fd) {
  if (send(conn, command.data(), command.size(), MSG_NOSIGNAL) < 0)
    return sys_error("send", command + " to " + socket);
  pollfd reply{conn, POLLIN, 0};
  int ready;
  while ((ready = poll(&reply, 1, kSupervisorRequestTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return plain_error(command, "no answer from the supervisor in time");
  char buffer[1024];
  int fd = -1;
  int fd_count = received_fd != nullptr ? 1 : 0;
  long n = recv_with_fds(conn, buffer, sizeof buffer, &fd, &fd_count);
  if (fd_count == 1) received_fd->reset(fd);
  if (n <= 0) return plain_error(command, "the supervisor closed the connection");
  std::string answer(buffer, static_cast<size_t>(n));
  if (answer.starts_with("error ")) return plain_error(command, answer.substr(6));
  if (answer != "ok" && !answer.starts_with("ok "))
    return plain_error(command, "bad answer " + answer);
  return answer.size() > 3 ? answer.substr(3) : std::string();
}

// "deadlines <end_at unix ms|-> <idle_ttl ms|-> <state dir>": SandboxDeadlines on the attachment.
constexpr const char* kDeadlines = "deadlines ";

std::string format_deadlines(const SandboxDeadlines& deadlines) {
  using std::chrono::milliseconds;
  std::string message = kDeadlines;
  message += deadlines.end_at ? std::to_string(std::chrono::duration_cast<milliseconds>(
                                                   deadlines.end_at->time_since_epoch())
                                                   .count())
                              : "-";
  message += " ";
  message += deadlines.idle_ttl ? std::to_string(deadlines.idle_ttl->count()) : "-";
  return message + " " + deadlines.state_dir;
}

std::optional<SandboxDeadlines> parse_deadlines(const std::string& message) {
  std::istringstream fields(message.substr(std::strlen(kDeadlines)));
  std::string end_at, idle_ttl;
  if (!(fields >> end_at >> idle_ttl)) return std::nullopt;
  SandboxDeadlines deadlines;
  if (end_at != "-") {
    deadlines.end_at = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(std::strtoll(end_at.c_str(), nullptr, 10)));
  }
  if (idle_ttl != "-")
    deadlines.idle_ttl = std::chrono::milliseconds(std::strtoll(idle_ttl.c_str(), nullptr, 10));
  fields.get();  // the space before the dir, which may itself hold spaces
  std::getline(fields, deadlines.state_dir);
  return deadlines;
}

// The supervisor's side of SandboxDeadlines: counted only while no client is attached.
class DeadlineWatch {
 public:
  void set(SandboxDeadlines deadlines) { deadlines_ = std::move(deadlines); }
  void detached() { detached_at_ = std::chrono::steady_clock::now(); }
  const std::string& state_dir() const { return deadlines_.state_dir; }

  // Whether a deadline is due (to ask only while no client is attached).
  bool due() const {
    return (deadlines_.end_at && std::chrono::system_clock::now() >= *deadlines_.end_at) ||
           (deadlines_.idle_ttl &&
            std::chrono::steady_clock::now() - detached_at_ >= *deadlines_.idle_ttl);
  }

  // poll's timeout until the next deadline, -1 with none. At most a minute, so that a wall clock
  // set back or forward is noticed.
  int timeout_ms() const {
    using std::chrono::milliseconds;
    std::optional<milliseconds> wait;
    auto sooner = [&](milliseconds left) { wait = wait ? std::min(*wait, left) : left; };
    if (deadlines_.end_at) {
      sooner(
          std::chrono::ceil<milliseconds>(*deadlines_.end_at - std::chrono::system_clock::now()));
    }
    if (deadlines_.idle_ttl) {
      sooner(std::chrono::ceil<milliseconds>(detached_at_ + *deadlines_.idle_ttl -
                                             std::chrono::steady_clock::now()));
    }
    if (!wait) return -1;
    return static_cast<int>(std::clamp<int64_t>(wait->count(), 0, kMaxDeadlineWaitMs));
  }

 private:
  static constexpr int64_t kMaxDeadlineWaitMs = 60'000;
  SandboxDeadlines deadlines_;
  std::chrono::steady_clock::time_point detached_at_ = std::chrono::steady_clock::now();
};

// Reads what a client sent on its attachment; false once it closed.
bool read_attachment(int fd, DeadlineWatch& watch) {
  char buffer[PATH_MAX + 64];
  ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;
  const std::string message(buffer, static_cast<size_t>(n));
  if (message.starts_with(kDeadlines)) {
    if (auto deadlines = parse_deadlines(message)) watch.set(std::move(*deadlines));
  }
  return true;
}

}  // namespace

int serve_sandbox(const SandboxSpec& spec, const std::string& exec_socket,
                  const std::string& supervisor_socket, int ready_fd, MadeAhead made_ahead) {
  UniqueFd ready(ready_fd);
  auto fail = [&](const Error& error) {
    write_all(ready.get(), "error " + one_line(error.message()) + "\n");
    return 125;
  };
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  UniqueFd stop_signals(signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!stop_signals) return fail(sys_error("signalfd", "SIGTERM SIGINT SIGHUP").error());

  Prepared prepared;
  prepared.prebuilt_skeleton = std::move(made_ahead.skeleton);
  prepared.prebuilt_netns = std::move(made_ahead.netns);
  if (auto r = prepare(spec, prepared, false); !r) return fail(r.error());
  SocketPaths socket_paths(exec_socket, supervisor_socket);
  auto exec_listener = listen_unix(exec_socket);
  if (!exec_listener) return fail(exec_listener.error());
  auto requests = listen_unix(supervisor_socket);
  if (!requests) return fail(requests.error());
  prepared.child.exec_listen_fd = exec_listener->get();

  auto launched = launch_sandbox(prepared, false);
  if (!launched) return fail(launched.error());
  if (auto r = wait_until_serving(*launched); !r) return fail(r.error());
  exec_listener->reset();  // init has it
  auto self = read_proc_state(getpid());
  if (!self) return fail(self.error());
  write_all(ready.get(), "ok " + std::to_string(launched->init->pid()) + " " +
                             std::to_string(getpid()) + " " + std::to_string(self->start_time) +
                             "\n");
  ready.reset();

  UniqueFd destroy_request;
  // Clients attached: the connections of their "oom_counter" requests, kept open (a supervisor
  // of an older hutch closes them; a client of one closes its own). While there is one, it is
  // in charge of the deadlines.
  std::vector<UniqueFd> attachments;
  DeadlineWatch deadlines;
  bool expired = false;
  constexpr size_t kFixedFds = 4;
  for (bool serving = true; serving;) {
    expired = attachments.empty() && deadlines.due();
    if (expired) break;
    std::vector<pollfd> fds = {{launched->init->pidfd(), POLLIN, 0},
                               {stop_signals.get(), POLLIN, 0},
                               {requests->get(), POLLIN, 0},
                               {launched->sync.get(), POLLIN, 0}};
    for (const UniqueFd& attachment : attachments) fds.push_back({attachment.get(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), attachments.empty() ? deadlines.timeout_ms() : -1) < 0)
      continue;
    if (fds[0].revents != 0 || fds[1].revents != 0) break;
    if (fds[3].revents != 0) {
      SyncMessage ignored{};
      if (recv_sync(launched->sync.get(), &ignored, nullptr, nullptr, true) == 0)
        launched->sync.reset();
    }
    for (size_t i = attachments.size(); i-- > 0;) {
      if (fds[kFixedFds + i].revents == 0 || read_attachment(attachments[i].get(), deadlines))
        continue;
      attachments.erase(attachments.begin() + static_cast<std::ptrdiff_t>(i));
      if (attachments.empty()) deadlines.detached();
    }
    if (fds[2].revents & POLLIN) {
      UniqueFd conn(accept4(requests->get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) continue;
      pollfd readable{conn.get(), POLLIN, 0};
      char buffer[PATH_MAX + 64] = {};
      if (poll(&readable, 1, 1000) != 1) continue;
      ssize_t n = recv(conn.get(), buffer, sizeof buffer - 1, 0);
      if (n <= 0) continue;
      const std::string request(buffer, static_cast<size_t>(n));
      if (request == "destroy") {
        destroy_request = std::move(conn);
        serving = false;
        continue;
      }
      if (request == "oom_counter") {
        send_oom_counter(launched->cgroup, conn.get());
        attachments.push_back(std::move(conn));
        continue;
      }
      const std::string reply =
          request.starts_with("snapshot ")
              ? snapshot(launched->cgroup, launched->upper.get(), request.substr(9))
              : answer(launched->cgroup, request);
      (void)!send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
    }
  }

  // Teardown: init's death takes every process of the namespace with it; then the cgroups.
  // A deadline may find the sandbox paused: a frozen cgroup v1 task takes SIGKILL only once
  // thawed.
  if (expired && launched->cgroup) (void)launched->cgroup->thaw();
  launched->init->kill();
  rusage usage{};
  std::string reply = "ok";
  if (auto r = launched->init->reap(&usage); !r) reply = "error " + r.error().message();
  if (launched->cgroup) {
    if (auto r = launched->cgroup->destroy(); !r) reply = "error " + r.error().message();
  }
  if (destroy_request) {
    (void)!send(destroy_request.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
  }
  // Ended by a deadline: no client will remove the sandbox's dir (nor read its log, in it).
  if (expired && !deadlines.state_dir().empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(deadlines.state_dir(), ignored);
  }
  return reply == "ok" ? 0 : 1;
}

Result<LiveSandboxRef> read_serve_ready(int ready_fd, std::chrono::milliseconds timeout,
                                        const std::string& exec_socket,
                                        const std::string& supervisor_socket) {
  std::string line;
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (line.find('\n') == std::string::npos) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long elapsed_ms =
        (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1'000'000;
    const long left = timeout.count() - elapsed_ms;
    if (left <= 0) return plain_error("sandbox start", "no answer from the supervisor in time");
    pollfd fd{ready_fd, POLLIN, 0};
    int ready = poll(&fd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return sys_error("poll", "supervisor ready pipe");
    if (ready == 0) continue;
    char buffer[512];
    ssize_t n = read(ready_fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read", "supervisor ready pipe");
    if (n == 0) return plain_error("sandbox start", "the supervisor exited without an answer");
    line.append(buffer, static_cast<size_t>(n));
  }
  line.resize(line.find('\n'));
  if (line.starts_with("error ")) return plain_error("sandbox start", line.substr(6));
  LiveSandboxRef ref;
  std::istringstream fields(line);
  std::string ok;
  fields >> ok >> ref.init_pid >> ref.supervisor_pid >> ref.supervisor_start_time;
  if (ok != "ok" || !fields || ref.init_pid <= 0 || ref.supervisor_pid <= 0)
    return plain_error("sandbox start", "malformed supervisor answer: " + line);
  ref.exec_socket = exec_socket;
  ref.supervisor_socket = supervisor_socket;
  return ref;
}

Result<LiveSandbox> LiveSandbox::connect(const LiveSandboxRef& ref) {
  LiveSandbox sandbox;
  sandbox.ref_ = ref;
  sandbox.supervisor_pidfd_.reset(pidfd_open_fd(ref.supervisor_pid));
  if (!sandbox.supervisor_pidfd_)
    return sys_error("pidfd_open", "supervisor " + std::to_string(ref.supervisor_pid));
  // With the pid pinned by the pidfd: is it still the process that was recorded?
  auto supervisor = read_proc_state(ref.supervisor_pid);
  if (!supervisor || supervisor->start_time != ref.supervisor_start_time ||
      supervisor->state == 'Z' || !process_running(sandbox.supervisor_pidfd_.get())) {
    return plain_error("connect", "supervisor " + std::to_string(ref.supervisor_pid) +
                                      " is gone (its pid is free or reused)");
  }
  sandbox.init_pidfd_.reset(pidfd_open_fd(ref.init_pid));
  if (!sandbox.init_pidfd_) return sys_error("pidfd_open", "init " + std::to_string(ref.init_pid));
  auto init = read_proc_state(ref.init_pid);
  if (!init || init->parent != ref.supervisor_pid || !process_running(sandbox.init_pidfd_.get())) {
    return plain_error("connect", "init " + std::to_string(ref.init_pid) +
                                      " is not the supervisor's child any more");
  }
  auto attachment = connect_unix(ref.supervisor_socket);
  if (!attachment) return std::unexpected(attachment.error());
  auto attached =
      exchange(attachment->get(), ref.supervisor_socket, "oom_counter", &sandbox.oom_counter_);
  if (!attached) return std::unexpected(attached.error());
  sandbox.attachment_ = std::move(*attachment);
  return sandbox;
}

bool LiveSandbox::alive() const { return process_running(init_pidfd_.get()); }

Result<UniqueFd> LiveSandbox::open_root() const {
  const std::string path = "/proc/" + std::to_string(ref_.init_pid) + "/root";
  UniqueFd root(open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return sys_error("open", path);
  // Opened after the pidfd: if init is still running, the pid was not reused meanwhile.
  if (!alive()) return plain_error("open root", "the sandbox's init has exited");
  return root;
}

Result<ExecProcess> LiveSandbox::exec(const ExecRequest& request) const {
  if (request.argv.empty() || request.argv[0].empty()) return plain_error("exec", "empty argv");
  std::string message(sizeof(ExecRequestHeader), '\0');
  ExecRequestHeader header;
  header.argc = static_cast<uint32_t>(request.argv.size());
  header.envc = static_cast<uint32_t>(request.env.size());
  header.survive_disconnect = request.survive_disconnect ? 1 : 0;
  std::memcpy(message.data(), &header, sizeof header);
  auto add = [&](const std::string& text) -> bool {
    if (text.find('\0') != std::string::npos) return false;
    message.append(text);
    message.push_back('\0');
    return true;
  };
  for (const std::string& arg : request.argv) {
    if (!add(arg)) return plain_error("exec", "NUL byte in argv");
  }
  for (const std::string& kv : request.env) {
    if (!add(kv)) return plain_error("exec", "NUL byte in env");
  }
  if (!add(request.workdir)) return plain_error("exec", "NUL byte in workdir");
  if (message.size() > kMaxExecRequestBytes)
    return plain_error(
        "exec", "argv, env and workdir exceed " + std::to_string(kMaxExecRequestBytes) + " bytes");

  UniqueFd null_in, null_out;
  int stdio[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    if (stdio[i] >= 0) continue;
    UniqueFd& null = i == 0 ? null_in : null_out;
    if (!null) null.reset(open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC));
    if (!null) return sys_error("open", "/dev/null");
    stdio[i] = null.get();
  }

  auto conn = connect_unix(ref_.exec_socket);
  if (!conn) return std::unexpected(conn.error());
  // Past the default socket buffer (~208 KiB) so a 1 MiB request fits in one message; root only.
  if (message.size() > kDefaultSendBufferBytes) {
    int buffer_size = static_cast<int>(kMaxExecRequestBytes) + 4096;
    setsockopt(conn->get(), SOL_SOCKET, SO_SNDBUFFORCE, &buffer_size, sizeof buffer_size);
  }
  if (int err = send_with_fds(conn->get(), message.data(), message.size(), stdio, 3))
    return sys_error("sendmsg", "exec request to " + ref_.exec_socket, err);

  pollfd started{conn->get(), POLLIN, 0};
  int ready;
  while ((ready = poll(&started, 1, kExecStartTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return plain_error("exec", "the sandbox did not start the command in time");
  ExecEvent event{};
  ssize_t n = recv(conn->get(), &event, sizeof event, 0);
  if (n != sizeof event || event.kind != ExecEvent::Kind::kStarted) {
    return plain_error("exec", alive() ? "the sandbox could not fork the command (pids limit?)"
                                       : "the sandbox is gone");
  }
  return ExecProcess(std::move(*conn), event.pid);
}

Result<std::optional<ExecExit>> ExecProcess::poll_exit() {
  if (exit_) return exit_;
  ExecEvent event{};
  ssize_t n = recv(connection_.get(), &event, sizeof event, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return std::optional<ExecExit>{};
  if (n == sizeof event && event.kind == ExecEvent::Kind::kExited) {
    ExecExit exit;
    exit.exit_code = event.exit_code;
    exit.term_signal = event.term_signal;
    event.start_error[sizeof event.start_error - 1] = '\0';
    if (event.start_error[0] != '\0') exit.start_error = event.start_error;
    exit_ = exit;
  } else if (n == 0 || n < 0) {
    // The shim died without a report: the whole sandbox was killed.
    exit_ = ExecExit{128 + SIGKILL, SIGKILL, std::nullopt};
  } else {
    return plain_error("exec", "malformed event from the sandbox");
  }
  return exit_;
}

Result<void> ExecProcess::signal(int sig) {
  ExecControl control{ExecControl::Kind::kSignal, sig};
  if (send(connection_.get(), &control, sizeof control, MSG_NOSIGNAL) < 0)
    return sys_error("send", "signal " + std::to_string(sig) + " to exec " + std::to_string(pid_));
  return {};
}

Result<void> ExecProcess::kill_tree() {
  ExecControl control{ExecControl::Kind::kKillTree, SIGKILL};
  if (send(connection_.get(), &control, sizeof control, MSG_NOSIGNAL) < 0 && errno != EPIPE &&
      errno != ECONNRESET)
    return sys_error("send", "kill tree of exec " + std::to_string(pid_));
  return {};
}

Result<std::string> LiveSandbox::supervisor_request(const std::string& command,
                                                    UniqueFd* received_fd) const {
  auto conn = connect_unix(ref_.supervisor_socket);
  if (!conn) return std::unexpected(conn.error());
  return exchange(conn->get(), ref_.supervisor_socket, command, received_fd);
}

Result<void> LiveSandbox::set_deadlines(const SandboxDeadlines& deadlines) const {
  const std::string message = format_deadlines(deadlines);
  if (message.size() > PATH_MAX) return plain_error("deadlines", "state dir path too long");
  if (send(attachment_.get(), message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    return sys_error("send", "deadlines to " + ref_.supervisor_socket);
  return {};
}

Result<void> LiveSandbox::freeze() const {
  auto r = supervisor_request("freeze");
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<void> LiveSandbox::thaw() const {
  auto r = supervisor_request("thaw");
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<SnapshotStats> LiveSandbox::snapshot(const std::string& dest_dir) const {
  auto r = supervisor_request("snapshot " + dest_dir);
  if (!r) return std::unexpected(r.error());
  SnapshotStats stats;
  std::istringstream fields(*r);
  for (std::string word; fields >> word;) {
    if (word.starts_with("files=")) stats.files = std::strtoull(word.c_str() + 6, nullptr, 10);
    if (word.starts_with("bytes=")) stats.bytes = std::strtoull(word.c_str() + 6, nullptr, 10);
    if (word.starts_with("frozen_us="))
      stats.frozen = std::chrono::microseconds(std::strtoull(word.c_str() + 10, nullptr, 10));
  }
  return stats;
}

Result<std::optional<uint64_t>> LiveSandbox::oom_kills() const {
  if (!oom_counter_) return std::optional<uint64_t>{};
  return read_oom_counter(oom_counter_.get());
}

Result<CgroupStats> LiveSandbox::stats() const {
  auto r = supervisor_request("stats");
  if (!r) return std::unexpected(r.error());
  return parse_stats(*r);
}

Result<void> LiveSandbox::destroy() const {
  if (!process_running(supervisor_pidfd_.get())) return {};
  auto r = supervisor_request("destroy");
  // The supervisor may exit before its answer leaves: its exit is what counts.
  pollfd gone{supervisor_pidfd_.get(), POLLIN, 0};
  int ready;
  while ((ready = poll(&gone, 1, kSupervisorRequestTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) {
    pidfd_signal(supervisor_pidfd_.get(), SIGKILL);
    return plain_error("destroy", "the supervisor did not finish in time; killed it");
  }
  if (!r && process_running(supervisor_pidfd_.get())) return std::unexpected(r.error());
  return {};
}

}  // namespace hutch
