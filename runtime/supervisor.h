// The supervisor of a live sandbox (runtime/live_sandbox.h has the whole picture): a process
// forked for one sandbox (by hutchd's zygote, or a test) that builds the sandbox, stays its
// parent, owns its cgroups, and answers the requests of runtime/supervisor_protocol.h on its
// socket. Single-threaded by contract; the hutchd-side client is runtime/live_sandbox.h.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/spec.h"

namespace hutch {

// What the supervisor enforces by itself while no LiveSandbox is attached to it (connect attaches;
// the attachment ends when that LiveSandbox is destroyed or its process dies). While one is
// attached, its owner (hutchd's reaper) is in charge and the supervisor does nothing, so a
// sandbox is never torn down twice. Frozen or not, a due sandbox is thawed and destroyed as by
// LiveSandbox::destroy, then `state_dir` is removed.
struct SandboxDeadlines {
  // Max lifetime: an absolute wall-clock time, so that an adopting client sends the same one.
  std::optional<std::chrono::system_clock::time_point> end_at;
  // Idle TTL, counted from the moment the last attachment closed: no client can have seen any
  // activity later than that. Zero: the sandbox ends as soon as no client is attached.
  std::optional<std::chrono::milliseconds> idle_ttl;
  // The client's directory for this sandbox (removed recursively); empty: none.
  std::string state_dir;
};

// `made_ahead`: parts a long-lived caller (hutchd's zygote) made before the request, each
// optional; serve_sandbox makes what is missing itself.
struct MadeAhead {
  UniqueFd skeleton;  // the host rootfs's skeleton (SkeletonCache::take)
  UniqueFd netns;     // a network namespace with lo up (make_loopback_netns), used once
  // The mounts SandboxSpec::volumes' mount_fd name, owned here: closed once the child has them.
  std::vector<UniqueFd> volume_mounts;
  // The trees SandboxSpec::binds' tree_fd name, owned here likewise.
  std::vector<UniqueFd> bind_trees;
};

// Runs the supervisor in the calling process, which must be single-threaded (init forks and
// allocates freely afterwards, which is safe only if clone3 copied no other thread's locks).
// spec.argv is ignored. Writes one ServeReady message (runtime/supervisor_protocol.h) to
// ready_fd (a pipe: the message is one atomic write) and closes it: kServing once init serves, or
// kFailed with the error (read it with read_serve_ready). Returns the process's exit status when
// the sandbox is gone (0 after a requested destroy or init's exit, 125 when it could not be built).
int serve_sandbox(const SandboxSpec& spec, const std::string& exec_socket,
                  const std::string& supervisor_socket, int ready_fd,
                  MadeAhead made_ahead = MadeAhead());

}  // namespace hutch
