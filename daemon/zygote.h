// The zygote: a single-threaded process (the static `hutchd-zygote` binary, exec'd by hutchd at
// start) which forks each sandbox's supervisor on request. serve_sandbox() must run in a
// single-threaded process (runtime/live_sandbox.h), and hutchd is not one once its HTTP thread
// pool runs; forking from the zygote also keeps hutchd's fds and memory out of every supervisor,
// and forking from a small static image makes every fork below it (init's per-exec shims
// included) cheap.
//
// Protocol (SOCK_SEQPACKET, one request per message): the spec (daemon/zygote_wire.h) and socket
// paths as JSON, with the write end of a ready pipe attached (SCM_RIGHTS), and, when the JSON
// says "netns": true, a second fd: the network namespace the sandbox is to join (a filtered one
// hutchd made ahead with its egress path, for NetMode::kHostOwned only), used instead of one of
// the zygote's own; then one fd per entry of the spec's volumes, in order: its detached mount
// (SandboxSpec::volumes, whose mount_fd the wire leaves out); then one per bind with a tree
// (BindMount::tree_fd, a host mount's clone), in order. On that pipe the
// forked child writes a ServeReady kSupervisor with its pid, then serve_sandbox() writes kServing
// (init's pid, the supervisor's pid and start time) or kFailed with its error
// (runtime/supervisor_protocol.h); read_serve_ready reads them. The zygote answers nothing on the
// socket itself: every outcome, including its own fork failure or a bad request (kFailed), arrives
// on the ready pipe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/live_sandbox.h"
#include "runtime/spec.h"

namespace hutch::daemon {

class Zygote {
 public:
  // Starts `binary` (hutchd-zygote) as the zygote. The zygote exits when hutchd closes its end
  // (hutchd exited or crashed); supervisors it forked live on.
  static Result<Zygote> start(const std::string& binary);

  // Forks a supervisor for `spec` and waits (at most `timeout`) until its sandbox serves.
  // `log_path`: the supervisor's stderr. `netns_fd` (>= 0, kHostOwned specs only): the network
  // namespace the sandbox joins, sent along; the caller keeps its own fd. The mount_fd of each of
  // spec.volumes and the tree_fd of each bind that has one are sent along too (the caller keeps
  // its own). Thread-safe.
  Result<LiveSandboxRef> spawn(const SandboxSpec& spec, const std::string& exec_socket,
                               const std::string& supervisor_socket, const std::string& log_path,
                               std::chrono::milliseconds timeout, int netns_fd = -1) const;

 private:
  explicit Zygote(UniqueFd socket) : socket_(std::move(socket)) {}
  UniqueFd socket_;
};

// The zygote binary's end of the socket to hutchd: its first argument names this fd.
inline constexpr int kZygoteSocketFd = 3;

// The zygote's loop: never returns; exits when hutchd closes the other end of `sock`.
[[noreturn]] void run_zygote(int sock);

}  // namespace hutch::daemon
