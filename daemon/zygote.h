// The zygote: a single-threaded process (the static `hutchd-zygote` binary, exec'd by hutchd at
// start) which forks each sandbox's supervisor on request. serve_sandbox() must run in a
// single-threaded process (runtime/live_sandbox.h), and hutchd is not one once its HTTP thread
// pool runs; forking from the zygote also keeps hutchd's fds and memory out of every supervisor,
// and forking from a small static image makes every fork below it (init's per-exec shims
// included) cheap.
//
// Protocol (SOCK_SEQPACKET, one request per message): the spec and socket paths as JSON, with the
// write end of a ready pipe attached (SCM_RIGHTS). The forked child writes
// "supervisor <pid>\n" on that pipe, then serve_sandbox() writes "ok <init pid>\n" or
// "error <message>\n". The zygote answers nothing on the socket itself: every outcome, including
// its own fork failure, arrives on the ready pipe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/base/error.h"
#include "runtime/live_sandbox.h"
#include "runtime/spec.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon {

class Zygote {
 public:
  // Starts `binary` (hutchd-zygote) as the zygote. The zygote exits when hutchd closes its end
  // (hutchd exited or crashed); supervisors it forked live on.
  static Result<Zygote> start(const std::string& binary);

  // Forks a supervisor for `spec` and waits (at most `timeout`) until its sandbox serves.
  // `log_path`: the supervisor's stderr. Thread-safe.
  Result<LiveSandboxRef> spawn(const SandboxSpec& spec, const std::string& exec_socket,
                               const std::string& supervisor_socket, const std::string& log_path,
                               std::chrono::milliseconds timeout) const;

 private:
  explicit Zygote(UniqueFd socket) : socket_(std::move(socket)) {}
  UniqueFd socket_;
};

// The zygote binary's end of the socket to hutchd: its first argument names this fd.
inline constexpr int kZygoteSocketFd = 3;

// The zygote's loop: never returns; exits when hutchd closes the other end of `sock`.
[[noreturn]] void run_zygote(int sock);

// /proc/<pid>/stat field 22 (start time in clock ticks since boot), nullopt when gone.
std::optional<uint64_t> process_start_time(pid_t pid);

}  // namespace hutch::daemon
