// The typed messages between a live sandbox's supervisor (runtime/supervisor.h) and its clients
// (runtime/live_sandbox.h), in the style of runtime/process/exec_protocol.h: fixed-size structs,
// one per SOCK_SEQPACKET message (or one write(2) on the ready pipe), each checked by one decoder
// that both ends and the tests share. Both ends are built from one source tree (hutchd and
// hutchd-zygote), so the layouts agree; the magic makes a peer of another hutch version fail
// loudly ("malformed ...") instead of being misread.
#pragma once

#include <limits.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.h"
#include "runtime/cgroup/stats.h"
#include "runtime/supervisor.h"

namespace hutch {

// An Error in fixed buffers (step and detail truncated to fit), for a message read into a struct.
struct WireError {
  int32_t err = 0;
  char step[64] = {};
  char detail[960] = {};
};
WireError to_wire(const Error& error);
// The Error a decoded message carries (its buffers are NUL-terminated by the decoders).
Error from_wire(const WireError& error);

// One std::optional<uint64_t> of CgroupStats.
struct WireCount {
  uint64_t value = 0;
  uint32_t present = 0;
};

// client -> supervisor. One request per connection, except kAttach's, which stays open for
// kDeadlines messages and whose closing ends the attachment (SandboxDeadlines).
struct SupervisorRequest {
  static constexpr uint32_t kMagic = 0x68757372;  // "husr"
  enum class Kind : uint32_t {
    kFreeze = 1,
    kThaw,
    kStats,
    // Carries the destination's parent directory (SCM_RIGHTS, O_PATH): a directory fd and not a
    // path because the client resolves the path once, in its own view, and the root supervisor
    // then works beneath that fd only, so no path component swapped after the client chose it
    // (a symlink) can redirect the copy, and no PATH_MAX field bounds it.
    kSnapshot,
    // The reply carries the cgroup's OOM counter file (SCM_RIGHTS) when there is a memory cgroup.
    kAttach,
    kDestroy,    // answered once the sandbox is gone
    kDeadlines,  // on the attachment only; no reply
    kLast = kDeadlines,
  };
  uint32_t magic = kMagic;
  Kind kind = Kind::kFreeze;
  char snapshot_name[NAME_MAX + 1] = {};  // kSnapshot: a new directory in the passed one
  // kDeadlines: SandboxDeadlines.
  uint32_t has_end_at = 0;
  uint32_t has_idle_ttl = 0;
  int64_t end_at_unix_ms = 0;
  int64_t idle_ttl_ms = 0;
  char state_dir[PATH_MAX] = {};
};

// supervisor -> client, one per request but kDeadlines.
struct SupervisorReply {
  static constexpr uint32_t kMagic = 0x68757370;  // "husp"
  uint32_t magic = kMagic;
  uint32_t ok = 0;
  WireError error;  // !ok
  // kStats.
  WireCount cpu_usage_usec, memory_peak_bytes, pids_current, pids_peak, oom_kills;
  // kSnapshot: what was copied, and how long the sandbox was frozen for it.
  uint64_t snapshot_files = 0;
  uint64_t snapshot_bytes = 0;
  uint64_t snapshot_frozen_us = 0;
};

// client -> supervisor: the background processes the supervisor keeps (runtime/process_keeper.h),
// one request per connection. A message of its own, not a SupervisorRequest kind: a supervisor of
// an older hutch (before the keeper) refuses it by its size with a SupervisorReply, which
// decode_keeper_reply recognizes and names, so a new hutchd reports such a sandbox clearly.
struct KeeperRequest {
  static constexpr uint32_t kMagic = 0x6875706b;  // "hupk"
  enum class Kind : uint32_t {
    // Carries, in this order (SCM_RIGHTS): the exec connection (ExecEvents arrive on it), the
    // output source (a pipe's read end, or the pty's master), the stdout, stderr and exit files
    // (O_WRONLY|O_APPEND, made by the client in its state dir), then the stderr pipe's read end
    // and the stdin pipe's write end when the flags say so. The reply carries the doorbell.
    kKeep = 1,
    // One KeeperReply per running kept process (each carrying a copy of its exec connection, its
    // doorbell, and its stdin: the pipe's write end or the pty's master), then one with `last`.
    kList,
    kCloseStdin,  // the supervisor's copy of `pid`'s stdin pipe: the command sees EOF
    kLast = kCloseStdin,
  };
  uint32_t magic = kMagic;
  Kind kind = Kind::kKeep;
  int32_t pid = 0;          // kKeep, kCloseStdin: in the sandbox's pid namespace
  uint32_t pty = 0;         // kKeep: the output source is a pty's master (stdout only)
  uint32_t has_stderr = 0;  // kKeep: a stderr pipe follows the files
  uint32_t has_stdin = 0;   // kKeep: a stdin pipe's write end follows
  uint64_t cap_bytes = 0;   // kKeep: bytes of each stream kept; the rest is read and dropped
};

// supervisor -> client, for a KeeperRequest.
struct KeeperReply {
  static constexpr uint32_t kMagic = 0x68757071;  // "hupq"
  uint32_t magic = kMagic;
  uint32_t ok = 0;
  WireError error;  // !ok
  int32_t pid = 0;  // kList: the process this message is about
  uint32_t pty = 0;
  uint32_t has_stdin = 0;  // kList: a stdin fd comes after the connection and the doorbell
  uint32_t last = 0;       // kList: the end of the list (no process, no fd)
};

// The exit file of a kept process, one line the supervisor writes once (pwrite at 0) when the
// command has exited and its output is drained: "<exit_code> <term_signal> <stdout_truncated>
// <stderr_truncated> <ended_unix_ms>" then, on the next line, the start error (possibly empty).
// Empty while the process runs.
struct KeptExit {
  int exit_code = 0;  // 128+N when killed by signal N
  int term_signal = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t ended_unix_ms = 0;
  std::string start_error;
};
std::string format_kept_exit(const KeptExit& exit);
// nullopt for an empty or malformed text (then the reader treats the process as killed).
std::optional<KeptExit> parse_kept_exit(std::string_view text);

// supervisor (or the zygote that forks it) -> whoever waits for the sandbox, on the ready pipe:
// optionally kSupervisor first (the zygote's child, before it builds the sandbox, so that a
// supervisor stuck in setup can be killed), then exactly one kServing or kFailed.
struct ServeReady {
  static constexpr uint32_t kMagic = 0x68757264;  // "hurd"
  enum class Kind : uint32_t { kSupervisor = 1, kServing, kFailed, kLast = kFailed };
  uint32_t magic = kMagic;
  Kind kind = Kind::kFailed;
  int32_t supervisor_pid = 0;          // kSupervisor, kServing
  int32_t init_pid = 0;                // kServing: host pid of the sandbox's pid 1
  uint64_t supervisor_start_time = 0;  // kServing: /proc/<supervisor>/stat field 22
  WireError error;                     // kFailed
};
// A pipe write of at most PIPE_BUF bytes is atomic (pipe(7)): a reader never sees half of one.
static_assert(sizeof(ServeReady) <= PIPE_BUF);

// The decoders: a message of exactly the struct's size, the magic, a known kind, every string
// NUL-terminated (forced), and the fields its kind needs. Anything else is an Error naming what
// is wrong.
Result<SupervisorRequest> decode_request(const void* data, long size);
Result<SupervisorReply> decode_reply(const void* data, long size);
Result<ServeReady> decode_ready(const void* data, long size);
Result<KeeperRequest> decode_keeper_request(const void* data, long size);
// A KeeperReply; a SupervisorReply in its place (an older supervisor refusing the request) is an
// Error of kind kUnsupported saying the sandbox predates this hutchd's process keeping.
Result<KeeperReply> decode_keeper_reply(const void* data, long size);
KeeperReply keeper_error_reply(const Error& error);

// Field conversions: what each side puts in a message and takes out of one.
void put_stats(const CgroupStats& stats, SupervisorReply& reply);
CgroupStats stats_of(const SupervisorReply& reply);
// Fails when the state dir does not fit the message.
Result<SupervisorRequest> deadlines_request(const SandboxDeadlines& deadlines);
SandboxDeadlines deadlines_of(const SupervisorRequest& request);
SupervisorReply error_reply(const Error& error);
ServeReady failed_ready(const Error& error);

// Writes one ServeReady in one write(2) (atomic: it fits in PIPE_BUF); retried on EINTR. A
// reader gone is not the writer's failure: the message is dropped.
void write_ready(int fd, const ServeReady& ready);

// The address of a socket path (exec or supervisor): at most 107 bytes.
Result<sockaddr_un> unix_address(const std::string& path);

}  // namespace hutch
