#include "runtime/process/exec_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/base/child_error.h"
#include "runtime/base/proc_stat.h"
#include "runtime/process/exec_protocol.h"
#include "runtime/process/exec_search.h"
#include "runtime/process/sync.h"

namespace hutch {
namespace {

constexpr int kRequestTimeoutMs = 10'000;

struct StartFailure {
  char step[16];
  int err;
};

// A request, parsed: the strings stay in `buffer`, the vectors point into it.
struct Command {
  std::vector<char> buffer;
  std::vector<char*> argv;  // null-terminated
  std::vector<char*> envp;  // null-terminated
  const char* workdir = "/";
  std::vector<std::string> path_dirs;
  std::vector<const char*> path_dir_ptrs;  // null-terminated, into path_dirs
  bool survive_disconnect = false;
  winsize pty_size{};  // ws_col 0: no pty
  int stdio[3] = {-1, -1, -1};
};

// Decimal digits of `value` into `out` (NUL-terminated), without allocating: the shim is a fork.
void format_unsigned(char* out, size_t size, uint32_t value) {
  char digits[16];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  size_t i = 0;
  for (; i < n && i + 1 < size; ++i) out[i] = digits[n - 1 - i];
  out[i] = '\0';
}

// Reads the pending message away (its fds closed with it): a unix socket closed with unread data
// resets its peer (ECONNRESET), which would then never read the answer sent before the close.
void discard_message(int conn) {
  char ignored;
  (void)recv(conn, &ignored, sizeof ignored, MSG_DONTWAIT);
}

enum class Received {
  kCommand,
  kOtherVersion,  // a request of another exec protocol version (ExecRequestHeader's first fields)
  kMalformed,
  kNothing,  // no request in time, or the client is gone
};

Received receive_command(int conn, Command& command, uint32_t& their_version) {
  pollfd ready{conn, POLLIN, 0};
  if (poll(&ready, 1, kRequestTimeoutMs) != 1) return Received::kNothing;
  // The buffer is sized from the message (MSG_TRUNC reports its real length): zeroing the
  // 1 MiB maximum for every exec cost more than the rest of the shim's start.
  ssize_t length = recv(conn, nullptr, 0, MSG_PEEK | MSG_TRUNC);
  if (length <= 0) return Received::kNothing;
  // The version first, whatever the header's size in that version.
  uint32_t prefix[2] = {};
  if (length >= static_cast<ssize_t>(sizeof prefix) &&
      recv(conn, prefix, sizeof prefix, MSG_PEEK) == static_cast<ssize_t>(sizeof prefix)) {
    if (prefix[0] == ExecRequestHeader::kUnversionedMagic) {
      their_version = 0;  // v1 or v2: an older hutchd talking to this newer sandbox
      discard_message(conn);
      return Received::kOtherVersion;
    }
    if (prefix[0] == ExecRequestHeader::kMagic && prefix[1] != kExecProtocolVersion) {
      their_version = prefix[1];
      discard_message(conn);
      return Received::kOtherVersion;
    }
  }
  if (length < static_cast<ssize_t>(sizeof(ExecRequestHeader)) ||
      length > static_cast<ssize_t>(kMaxExecRequestBytes)) {
    discard_message(conn);
    return Received::kMalformed;
  }
  command.buffer.resize(static_cast<size_t>(length));
  iovec iov{command.buffer.data(), command.buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  if (n < static_cast<ssize_t>(sizeof(ExecRequestHeader)) ||
      (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
    return Received::kMalformed;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (cmsg == nullptr || cmsg->cmsg_type != SCM_RIGHTS ||
      cmsg->cmsg_len != CMSG_LEN(sizeof(int) * 3))
    return Received::kMalformed;
  std::memcpy(command.stdio, CMSG_DATA(cmsg), sizeof command.stdio);

  ExecRequestHeader header;
  std::memcpy(&header, command.buffer.data(), sizeof header);
  if (header.magic != ExecRequestHeader::kMagic || header.argc == 0) return Received::kMalformed;
  command.survive_disconnect = header.survive_disconnect != 0;
  if ((header.pty_cols == 0) != (header.pty_rows == 0) || header.pty_cols > USHRT_MAX ||
      header.pty_rows > USHRT_MAX)
    return Received::kMalformed;
  command.pty_size.ws_col = static_cast<unsigned short>(header.pty_cols);
  command.pty_size.ws_row = static_cast<unsigned short>(header.pty_rows);
  // The strings: argc + envc + 1 NUL-terminated entries, nothing after them.
  char* cursor = command.buffer.data() + sizeof header;
  char* const end = command.buffer.data() + n;
  auto next_string = [&]() -> char* {
    char* nul = static_cast<char*>(std::memchr(cursor, '\0', end - cursor));
    if (nul == nullptr) return nullptr;
    char* string = cursor;
    cursor = nul + 1;
    return string;
  };
  for (uint32_t i = 0; i < header.argc; ++i) {
    char* arg = next_string();
    if (arg == nullptr) return Received::kMalformed;
    command.argv.push_back(arg);
  }
  for (uint32_t i = 0; i < header.envc; ++i) {
    char* kv = next_string();
    if (kv == nullptr) return Received::kMalformed;
    command.envp.push_back(kv);
  }
  const char* workdir = next_string();
  if (workdir == nullptr || cursor != end || command.argv[0][0] == '\0')
    return Received::kMalformed;
  command.workdir = workdir;
  command.argv.push_back(nullptr);
  command.envp.push_back(nullptr);

  std::string_view path_var = kDefaultSearchPath;
  for (char* kv : command.envp) {
    if (kv != nullptr && std::strncmp(kv, "PATH=", 5) == 0) path_var = kv + 5;
  }
  command.path_dirs = split_search_path(path_var);
  for (const std::string& dir : command.path_dirs) command.path_dir_ptrs.push_back(dir.c_str());
  command.path_dir_ptrs.push_back(nullptr);
  return Received::kCommand;
}

// The signals this exec server found ignored when it started (inherited through the zygote and
// the supervisor), bit sig - 1, which every command starts with at their default instead. Through
// the raw syscall and a mask of ours: glibc's sigaction and sigaddset refuse 32 and 33, its
// threads' signals, which a parent can have left ignored too.
uint64_t ignored_at_start = 0;

struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

bool signal_ignored(int sig) {
  KernelSigaction current{};
  return syscall(SYS_rt_sigaction, sig, nullptr, &current, sizeof current.mask) == 0 &&
         current.handler == SIG_IGN;
}

void reset_to_default(int sig) {
  KernelSigaction default_action{};
  default_action.handler = SIG_DFL;
  syscall(SYS_rt_sigaction, sig, &default_action, nullptr, sizeof default_action.mask);
}

// In the vfork child: only syscalls on this stack until execve or _exit.
[[noreturn]] void fail_start(int report_fd, const char* step, int err, const char* what) {
  StartFailure failure{};
  append_cstr(failure.step, sizeof failure.step, step);
  failure.err = err;
  // Like a shell: the reason on the command's stderr, 127 for "not found", 126 otherwise.
  char line[PATH_MAX + 128] = "hutch: ";
  append_cstr(line, sizeof line, step);
  append_cstr(line, sizeof line, "(");
  append_cstr(line, sizeof line, what);
  append_cstr(line, sizeof line, "): ");
  append_cstr(line, sizeof line, strerror(err));
  append_cstr(line, sizeof line, "\n");
  (void)!write(STDERR_FILENO, line, std::strlen(line));
  (void)!write(report_fd, &failure, sizeof failure);
  _exit(std::strcmp(step, "execve") == 0 && (err == ENOENT || err == ENOTDIR) ? 127 : 126);
}

[[noreturn]] void run_command(const Command& command, int report_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // An ignored signal stays ignored across execve: the supervisor's SIGPIPE, and whatever hutchd's
  // own parent ignored. (vfork shares memory, not the signal handlers: only the child's change.)
  for (int sig = 1; sig < NSIG; ++sig) {
    if (ignored_at_start & (uint64_t{1} << (sig - 1))) reset_to_default(sig);
  }
  // Its own session and process group, like a shell's job: signals to it do not reach the shim.
  setsid();
  for (int target = 0; target < 3; ++target) {
    if (dup2(command.stdio[target], target) < 0) fail_start(report_fd, "dup2", errno, "stdio");
  }
  // A pty becomes the new session's controlling terminal: job control, ^C and SIGWINCH reach
  // its foreground process group.
  if (command.pty_size.ws_col != 0 && ioctl(STDIN_FILENO, TIOCSCTTY, 0) != 0)
    fail_start(report_fd, "ioctl", errno, "TIOCSCTTY");
  if (chdir(command.workdir) != 0) fail_start(report_fd, "chdir", errno, command.workdir);
  // Nothing of the runtime's reaches the command: the connection and the report pipe included.
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  const char* file = command.argv[0];
  fail_start(
      report_fd, "execve",
      exec_in_path(file, command.argv.data(), command.envp.data(), command.path_dir_ptrs.data()),
      file);
}

// The shim's children, from /proc (mounted for the sandbox's pid namespace).
std::vector<pid_t> children_of_self() {
  std::vector<pid_t> children;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    auto state = read_proc_state(static_cast<pid_t>(pid));
    if (state && state->parent == self) children.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return children;
}

class Shim {
 public:
  explicit Shim(int conn) : conn_(conn) {}

  [[noreturn]] void run() {
    // Orphans of the command's tree are reparented here, not to init: the tree stays findable
    // (setsid and double forks included) for kill_tree.
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    signals_ = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signals_ < 0) not_started("signalfd", errno);
    Command command;
    uint32_t their_version = 0;
    switch (receive_command(conn_, command, their_version)) {
      case Received::kCommand:
        break;
      case Received::kOtherVersion:
        refuse(their_version);
      case Received::kMalformed:
        not_started("malformed exec request", 0);
      case Received::kNothing:
        _exit(1);
    }
    survive_disconnect_ = command.survive_disconnect;
    StartFailure pty_failure{};
    if (command.pty_size.ws_col != 0 && !open_pty(command, pty_failure)) {
      send_event(ExecEvent::Kind::kStarted, 0, 0, "");
      finish_failed(pty_failure);
    }

    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) not_started("pipe2", errno);
    // vfork: no page tables to copy; the child only makes syscalls until execve.
    command_ = vfork();
    const int vfork_errno = errno;
    if (command_ == 0) run_command(command, report[1]);
    close(report[1]);
    for (int fd : command.stdio) close(fd);
    if (command_ < 0) not_started("vfork (the sandbox's pids limit?)", vfork_errno);
    StartFailure failure{};
    ssize_t n = read(report[0], &failure, sizeof failure);
    close(report[0]);
    send_event(ExecEvent::Kind::kStarted, 0, 0, "", pty_master_);
    // The client holds the master now: the pty ends with the command or with the client.
    close(pty_master_);
    if (n == sizeof failure) finish_failed(failure);
    serve();
  }

 private:
  // A pty of this sandbox's devpts instance (its /dev/ptmx is pts/ptmx, runtime/fs/mount_plan.cc)
  // replaces the command's stdio. The slave comes from TIOCGPTPEER (Linux 4.13), not from a path
  // lookup of /dev/pts/N, which a process in the sandbox could race.
  bool open_pty(Command& command, StartFailure& failure) {
    auto fail = [&](const char* step) {
      failure.err = errno;
      append_cstr(failure.step, sizeof failure.step, step);
      return false;
    };
    pty_master_ = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (pty_master_ < 0) return fail("open ptmx");
    int unlock = 0;
    if (ioctl(pty_master_, TIOCSPTLCK, &unlock) != 0) return fail("TIOCSPTLCK");
    if (ioctl(pty_master_, TIOCSWINSZ, &command.pty_size) != 0) return fail("TIOCSWINSZ");
    int slave = ioctl(pty_master_, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) return fail("TIOCGPTPEER");
    for (int& fd : command.stdio) {
      close(fd);
      fd = -1;
    }
    command.stdio[0] = slave;
    for (int target : {1, 2}) {
      command.stdio[target] = fcntl(slave, F_DUPFD_CLOEXEC, 0);
      if (command.stdio[target] < 0) return fail("dup slave");
    }
    return true;
  }

  // The request is of another protocol version (0: v1 or v2): say which one this server speaks,
  // so that the client reports an outdated sandbox and not a failure of the command.
  [[noreturn]] void refuse(uint32_t their_version) {
    char text[256] = "this sandbox's exec server speaks exec protocol v";
    char number[16];
    format_unsigned(number, sizeof number, kExecProtocolVersion);
    append_cstr(text, sizeof text, number);
    append_cstr(text, sizeof text, ", the request is ");
    if (their_version == 0) {
      append_cstr(text, sizeof text, "v1 or v2");
    } else {
      format_unsigned(number, sizeof number, their_version);
      append_cstr(text, sizeof text, "v");
      append_cstr(text, sizeof text, number);
    }
    ExecEvent event{};
    event.kind = ExecEvent::Kind::kRefused;
    event.protocol_version = kExecProtocolVersion;
    append_cstr(event.start_error, sizeof event.start_error, text);
    (void)send_with_fds(conn_, &event, sizeof event, nullptr, 0);
    _exit(1);
  }

  // No process for the command: `step` failed with `err` (0: no errno).
  [[noreturn]] void not_started(const char* step, int err) {
    char text[256] = "";
    append_cstr(text, sizeof text, step);
    if (err != 0) {
      append_cstr(text, sizeof text, ": ");
      append_cstr(text, sizeof text, strerror(err));
    }
    command_ = 0;
    send_event(ExecEvent::Kind::kNotStarted, 0, 0, text);
    _exit(1);
  }

  [[noreturn]] void finish_failed(const StartFailure& failure) {
    int status = 0;
    if (command_ > 0) waitpid(command_, &status, 0);
    char text[256] = "";
    append_cstr(text, sizeof text, failure.step);
    append_cstr(text, sizeof text, ": ");
    append_cstr(text, sizeof text, strerror(failure.err));
    send_event(ExecEvent::Kind::kExited, WIFEXITED(status) ? WEXITSTATUS(status) : 126, 0, text);
    _exit(0);
  }

  [[noreturn]] void serve() {
    bool connected = true;
    while (!exited_) {
      pollfd fds[2] = {{signals_, POLLIN, 0}, {connected ? conn_ : -1, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[0].revents & POLLIN) reap(WNOHANG);
      if (fds[1].revents == 0 || exited_) continue;
      ExecControl control{};
      ssize_t n = recv(conn_, &control, sizeof control, MSG_DONTWAIT);
      if (n == sizeof control) {
        if (control.kind == ExecControl::Kind::kSignal) kill(command_, control.signal);
        if (control.kind == ExecControl::Kind::kKillTree) kill_tree();
      } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        connected = false;
        if (!survive_disconnect_) kill_tree();
      }
    }
    const int code = WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
    send_event(ExecEvent::Kind::kExited, code, WIFSIGNALED(status_) ? WTERMSIG(status_) : 0, "");
    // What the command left running is reparented to init, which reaps it.
    _exit(0);
  }

  void reap(int flags) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, flags)) > 0) {
      if (pid == command_) {
        status_ = status;
        exited_ = true;
      }
      if (flags == 0) return;
    }
  }

  // SIGKILLs the command and every descendant: each one killed hands its children to this
  // subreaper, so the walk repeats until none is left.
  void kill_tree() {
    for (;;) {
      std::vector<pid_t> children = children_of_self();
      for (pid_t child : children) kill(child, SIGKILL);
      int status;
      pid_t pid = waitpid(-1, &status, children.empty() ? WNOHANG : 0);
      if (pid == command_) {
        status_ = status;
        exited_ = true;
      }
      if (pid < 0 && errno == ECHILD) return;
      if (pid == 0) {
        timespec pause{0, 1'000'000};  // a child not yet visible in /proc
        nanosleep(&pause, nullptr);
      }
    }
  }

  void send_event(ExecEvent::Kind kind, int exit_code, int term_signal, const char* error,
                  int fd = -1) {
    ExecEvent event{};
    event.kind = kind;
    event.pid = command_;
    event.exit_code = exit_code;
    event.term_signal = term_signal;
    append_cstr(event.start_error, sizeof event.start_error, error);
    (void)send_with_fds(conn_, &event, sizeof event, &fd, fd >= 0 ? 1 : 0);
  }

  int conn_;
  int signals_ = -1;
  int pty_master_ = -1;
  pid_t command_ = -1;
  int status_ = 0;
  bool exited_ = false;
  bool survive_disconnect_ = false;
};

// A shim forked ahead of the next request, blocked in accept: forking init (a few MB of page
// tables) is off the exec's critical path. Init forks the next spare when this one reports, on
// `taken`, that it accepted a connection.
[[noreturn]] void run_spare_shim(int listen_fd, int taken_fd, int signals, int sync_fd) {
  close(signals);
  close(sync_fd);
  int conn;
  while ((conn = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC)) < 0) {
    if (errno != EINTR && errno != ECONNABORTED) _exit(1);
  }
  close(listen_fd);
  (void)!write(taken_fd, "t", 1);
  close(taken_fd);
  Shim(conn).run();
}

}  // namespace

[[noreturn]] void run_exec_server(int listen_fd, int sync_fd) {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (signal_ignored(sig)) ignored_at_start |= uint64_t{1} << (sig - 1);
  }
  // The supervisor's stdio are host fds: the sandbox's /dev/null replaces them.
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    for (int target = 0; target < 3; ++target) dup2(null_fd, target);
    close(null_fd);
  }
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int signals = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  int taken[2];
  if (signals < 0 || pipe2(taken, O_CLOEXEC | O_NONBLOCK) != 0) _exit(125);

  SyncMessage serving{};
  serving.kind = SyncMessage::Kind::kServing;
  serving.from = SyncMessage::From::kInit;
  if (send_sync(sync_fd, serving) != 0) _exit(125);

  pid_t spare = -1;
  int fork_errno = 0;
  auto fork_spare = [&] {
    spare = fork();
    if (spare < 0) fork_errno = errno;
    if (spare == 0) {
      close(taken[0]);
      run_spare_shim(listen_fd, taken[1], signals, sync_fd);
    }
  };
  fork_spare();
  for (;;) {
    // Without a spare (its fork failed: the pids limit), init takes the connection itself.
    pollfd fds[4] = {{spare > 0 ? -1 : listen_fd, POLLIN, 0},
                     {signals, POLLIN, 0},
                     {sync_fd, POLLIN, 0},
                     {taken[0], POLLIN, 0}};
    if (poll(fds, 4, -1) < 0) continue;
    if (fds[2].revents != 0) _exit(0);  // the supervisor is gone or tears the sandbox down
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signals, &info, sizeof info) == sizeof info) {
      }
      pid_t pid;
      while ((pid = waitpid(-1, nullptr, WNOHANG)) > 0) {
        if (pid == spare) spare = -1;  // killed before it took a connection
      }
    }
    if (fds[3].revents & POLLIN) {
      char byte;
      while (read(taken[0], &byte, 1) == 1) {
      }
      spare = -1;
    }
    if (spare <= 0) fork_spare();
    if (spare <= 0 && (fds[0].revents & POLLIN)) {
      // No shim for the connection: init says so and closes it.
      int conn = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) {
        // The request follows the connect at once: read away before the answer (see
        // discard_message), waiting a moment at most, as init has other work.
        pollfd request{conn, POLLIN, 0};
        if (poll(&request, 1, 100) == 1) discard_message(conn);
        ExecEvent event{};
        event.kind = ExecEvent::Kind::kNotStarted;
        append_cstr(event.start_error, sizeof event.start_error,
                    "fork of a shim for the command (the sandbox's pids limit?): ");
        append_cstr(event.start_error, sizeof event.start_error, strerror(fork_errno));
        (void)send(conn, &event, sizeof event, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(conn);
      }
    }
  }
}

}  // namespace hutch
