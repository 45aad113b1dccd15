// A sandbox that stays up and runs commands on request: hutchd's unit of work.
//
// Three processes per sandbox, each with one job:
// - the supervisor (serve_sandbox, runtime/supervisor.h) builds the sandbox, stays its parent,
//   owns its cgroups, and answers freeze/thaw/stats/snapshot/destroy on `supervisor_socket`
//   (runtime/supervisor_protocol.h); when init ends, it tears down and exits. It does not depend on
//   hutchd: a restarted hutchd reconnects to it (LiveSandbox::connect), and while no client is
//   attached it enforces the sandbox's deadlines itself (LiveSandbox::set_deadlines). It also
//   keeps the background processes handed to it (runtime/process_keeper.h, keep_process): their
//   output and exit outlive hutchd too.
// - init (pid 1 inside, fully confined) accepts exec requests on `exec_socket`, a listening socket
//   on the host bound by the supervisor before clone3, and forks one shim per exec.
// - the shim (a child subreaper inside) forks the command, reports its pid and its exit, and on
//   request kills the command's whole process tree, double forks and setsid included.
// This header is the client side, used by multi-threaded hutchd; the single-threaded server is
// runtime/supervisor.h, and the messages between them runtime/supervisor_protocol.h.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/cgroup/stats.h"
#include "runtime/spec.h"
#include "runtime/supervisor.h"

namespace hutch {

struct SupervisorRequest;
struct SupervisorReply;
struct KeeperRequest;
struct KeeperReply;

inline constexpr const char* kOutdatedExecStep = "exec protocol";

// Where a live sandbox can be reached; what hutchd persists to find it again after a restart.
struct LiveSandboxRef {
  pid_t supervisor_pid = 0;
  uint64_t supervisor_start_time = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
  pid_t init_pid = 0;                  // host pid of the sandbox's pid 1
  std::string exec_socket;             // unix socket paths on the host (≤ 107 bytes)
  std::string supervisor_socket;
  // The exec protocol (runtime/process/exec_protocol.h) of the sandbox's exec server, recorded
  // since v3; 0 for a sandbox recorded before that (its server speaks v1 or v2).
  uint32_t exec_protocol = 0;
};

// The other end of serve_sandbox's ready_fd: reads ServeReady messages (decode_ready) until
// kServing or kFailed, for at most `timeout`. The Error of a failed build carries the
// supervisor's. `stuck_supervisor`, when given: the pid of a kSupervisor message (the zygote's
// child) that was still holding the pipe open without kServing or kFailed when this gave up (in
// time, or on a malformed message), else 0. One stuck in setup is for the caller to kill; one
// that reported kFailed cleans up and exits by itself, and one that closed the pipe is gone.
Result<LiveSandboxRef> read_serve_ready(int ready_fd, std::chrono::milliseconds timeout,
                                        const std::string& exec_socket,
                                        const std::string& supervisor_socket,
                                        pid_t* stuck_supervisor = nullptr);

// A terminal's size in character cells (TIOCSWINSZ).
struct PtySize {
  uint16_t cols = 80;
  uint16_t rows = 24;
};

struct ExecRequest {
  std::vector<std::string> argv;  // argv[0] is searched in the sandbox's PATH (from env) if bare
  std::vector<std::string> env;   // complete environment, "K=V"
  std::string workdir = "/";
  // The command's stdio; -1 means /dev/null. Borrowed: the caller closes its copies.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // false: when the ExecProcess is destroyed (or hutchd dies) before the command ends, its whole
  // tree is killed. true (background processes): it keeps running.
  bool survive_disconnect = false;
  // Set: the command runs on a new pseudo-terminal allocated by the sandbox's shim on the
  // sandbox's own devpts (so `tty` inside names its /dev/pts/N), as its controlling terminal in a
  // session of its own; the stdio fds above are ignored and ExecProcess holds the master.
  std::optional<PtySize> pty;
};

struct ExecExit {
  int exit_code = 0;    // 128+N when killed by signal N, 126/127 when it could not be executed
  int term_signal = 0;  // the signal that killed it, 0 if it exited
  // Set when the command never ran (execve or chdir failed); also written to its stderr.
  std::optional<std::string> start_error;
};

struct SnapshotStats {
  uint64_t files = 0;
  uint64_t bytes = 0;
  // How long the sandbox was frozen (freeze, sync, copy, thaw): its processes' pause.
  std::chrono::microseconds frozen{0};
};

// One running command. Move-only; destroying it closes the connection to the shim.
class ExecProcess {
 public:
  ExecProcess(UniqueFd connection, pid_t pid, UniqueFd pty_master = {})
      : connection_(std::move(connection)), pid_(pid), pty_master_(std::move(pty_master)) {}
  pid_t pid() const { return pid_; }  // in the sandbox's pid namespace
  // The pty's master (O_CLOEXEC) for a request with `pty`; empty when the pty could not be made
  // (poll_exit then reports why) or after the first call.
  UniqueFd take_pty_master() { return std::move(pty_master_); }
  // Pollable (POLLIN): readable when the exit is known (or the shim vanished).
  int fd() const { return connection_.get(); }
  // Non-blocking: the exit once known, nullopt while the command runs. A shim that vanished
  // without a report (the sandbox was destroyed) is an ExecExit with term_signal SIGKILL.
  Result<std::optional<ExecExit>> poll_exit();
  Result<void> signal(int sig);  // the command itself
  Result<void> kill_tree();      // the command and every descendant, SIGKILL

 private:
  UniqueFd connection_;
  pid_t pid_;
  UniqueFd pty_master_;
  std::optional<ExecExit> exit_;
};

// A background process for the supervisor to keep (runtime/process_keeper.h): its fds, borrowed
// (the supervisor gets copies; the caller closes its own).
struct KeepRequest {
  pid_t pid = 0;
  bool pty = false;
  uint64_t cap_bytes = 0;  // of each stream
  int connection = -1;     // ExecProcess::fd()
  int output = -1;         // the stdout pipe's read end, or the pty's master
  int error_output = -1;   // the stderr pipe's read end; -1 on a pty
  int input = -1;          // the stdin pipe's write end; -1: none (a pty's input is its master)
  int stdout_file = -1;    // O_WRONLY|O_APPEND
  int stderr_file = -1;
  int exit_file = -1;  // O_WRONLY, empty: the exit is written there (format_kept_exit)
};

// A kept process as the supervisor hands it back (after a hutchd restart).
struct KeptHandles {
  pid_t pid = 0;
  bool pty = false;
  UniqueFd connection;  // a copy of the exec connection: for ExecProcess's signal and kill_tree
  UniqueFd doorbell;    // see runtime/process_keeper.h
  UniqueFd input;       // the stdin pipe's write end or the pty's master; empty when closed
};

// The client side, in hutchd. Thread-safe: execs, file access and supervisor requests may run
// concurrently from many threads.
class LiveSandbox {
 public:
  // Checks that the supervisor and init are alive and are the processes `ref` names, and attaches
  // to the supervisor (SandboxDeadlines) until this object is destroyed.
  static Result<LiveSandbox> connect(const LiveSandboxRef& ref);

  const LiveSandboxRef& ref() const { return ref_; }
  bool alive() const;  // init is still running
  int init_pidfd() const { return init_pidfd_.get(); }

  // O_PATH|O_DIRECTORY fd of the sandbox's "/" as its init sees it (overlay root, mounts under
  // it): the root for openat2(RESOLVE_IN_ROOT) in the file API.
  Result<UniqueFd> open_root() const;
  // The sandbox's network namespace (setns(2) joins it), checked the same way: the network
  // engine's listeners and hutchd's connections to the sandbox's ports are made in it.
  Result<UniqueFd> open_netns() const;

  // Starts a command; returns once it runs (or failed to start: then poll_exit reports it).
  // An exec server of another protocol version (a sandbox started by another hutchd) is an
  // Error of kind kConflict with step kOutdatedExecStep, saying both versions.
  Result<ExecProcess> exec(const ExecRequest& request) const;

  // Copies the sandbox's upper dir (everything it changed on top of its layers) exactly to
  // dest_dir (absolute, must not exist, its parent must), with the sandbox frozen meanwhile (when
  // it has a cgroup) and thawed on every path: a consistent image of a running sandbox.
  Result<SnapshotStats> snapshot(const std::string& dest_dir) const;

  Result<void> freeze() const;
  Result<void> thaw() const;
  Result<CgroupStats> stats() const;
  // The sandbox's OOM kill count alone, for hutchd's per-exec oom_killed: read from the cgroup
  // file the supervisor handed over at connect, without a round trip. Empty without a memory
  // cgroup.
  Result<std::optional<uint64_t>> oom_kills() const;
  // Kills every process, removes mounts and cgroups, and waits until the supervisor has exited.
  // Idempotent; succeeds when the sandbox is already gone.
  Result<void> destroy() const;
  // Replaces the deadlines the supervisor enforces once no client is attached. One message on
  // the attachment, no round trip: the supervisor reads it before it can see the attachment
  // close, so it holds even if the caller dies right after.
  Result<void> set_deadlines(const SandboxDeadlines& deadlines) const;

  // Hands a started background process to the supervisor, which pumps its output into the files
  // and records its exit, whether or not a hutchd is attached. Returns the doorbell. An older
  // supervisor is an Error of kind kUnsupported (decode_keeper_reply). Once a keep has succeeded,
  // keeper_confirmed() is true.
  Result<UniqueFd> keep_process(const KeepRequest& request) const;
  // keep_process in two halves, for a caller that need not wait for the supervisor to be
  // scheduled: send_keep sends the request (the supervisor has copies of the fds once it
  // returns) and returns the connection the reply comes on; await_kept reads that reply (the
  // doorbell, or the supervisor's refusal). Requests are served in connection order, so a later
  // request (close_kept_stdin) finds the process kept.
  Result<UniqueFd> send_keep(const KeepRequest& request) const;
  static Result<UniqueFd> await_kept(int conn);
  // This supervisor has kept a process for this object: it is not an older one that would refuse.
  bool keeper_confirmed() const;
  // The kept processes still running, each with fresh handles.
  Result<std::vector<KeptHandles>> kept_processes() const;
  // Closes the supervisor's copy of `pid`'s stdin pipe (with the caller's: the command sees EOF).
  Result<void> close_kept_stdin(pid_t pid) const;

 private:
  LiveSandbox() = default;
  // One request on a new connection; `fd` goes with it (-1: none).
  Result<SupervisorReply> supervisor_request(const SupervisorRequest& request, int fd = -1) const;
  // A keeper request on a new connection; each reply goes to `on_reply` with its fds, until it
  // returns false (or an error reply).
  Result<void> keeper_request(
      const KeeperRequest& request, const std::vector<int>& fds,
      const std::function<bool(const KeeperReply&, std::vector<UniqueFd>)>& on_reply) const;
  Result<UniqueFd> send_keeper_request(const KeeperRequest& request,
                                       const std::vector<int>& fds) const;
  static Result<void> read_keeper_replies(
      int conn, const std::function<bool(const KeeperReply&, std::vector<UniqueFd>)>& on_reply);
  LiveSandboxRef ref_;
  UniqueFd attachment_;  // the connection of the kAttach request, kept open
  UniqueFd supervisor_pidfd_;
  UniqueFd init_pidfd_;
  UniqueFd oom_counter_;
  // Shared, not a plain atomic: LiveSandbox is movable.
  std::shared_ptr<std::atomic<bool>> keeper_confirmed_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace hutch
