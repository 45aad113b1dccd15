// Messages on an exec connection (SOCK_SEQPACKET, one message per send): hutchd's LiveSandbox
// connects to init's listening socket; init hands the connection to a fresh shim, which reads the
// request, runs the command and reports on the same connection.
#pragma once

#include <cstdint>

namespace hutch {

// client -> shim, first message: this header, then the strings (each NUL-terminated): argc argv
// entries, envc env entries, the workdir. Carries the command's stdin, stdout, stderr (SCM_RIGHTS).
struct ExecRequestHeader {
  static constexpr uint32_t kMagic = 0x68757463;  // "hutc"
  uint32_t magic = kMagic;
  uint32_t argc = 0;
  uint32_t envc = 0;
  uint32_t survive_disconnect = 0;
  // Non-zero: the command runs on a new pseudo-terminal of the sandbox's devpts of this size,
  // and the received stdio fds are unused (/dev/null).
  uint32_t pty_cols = 0;
  uint32_t pty_rows = 0;
};
// The whole request message, header included: argv+env above this fail with E2BIG at the client.
constexpr uint32_t kMaxExecRequestBytes = 1024 * 1024;

// client -> shim, later messages.
struct ExecControl {
  enum class Kind : uint32_t { kSignal = 1, kKillTree };
  Kind kind;
  int32_t signal;
};

// shim -> client: kStarted (pid) exactly once, then kExited once. With a pty, kStarted carries
// its master (SCM_RIGHTS); a kStarted without one means the pty could not be made, and kExited
// follows with the reason in start_error.
struct ExecEvent {
  enum class Kind : uint32_t { kStarted = 1, kExited };
  Kind kind;
  int32_t pid;            // in the sandbox's pid namespace
  int32_t exit_code;      // kExited: 128+N when killed by signal N
  int32_t term_signal;    // kExited: the killing signal, or 0
  char start_error[256];  // kExited: non-empty when the command never ran
};

}  // namespace hutch
