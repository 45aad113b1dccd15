// Messages on an exec connection (SOCK_SEQPACKET, one message per send): hutchd's LiveSandbox
// connects to init's listening socket; init hands the connection to a fresh shim, which reads the
// request, runs the command and reports on the same connection.
#pragma once

#include <cstdint>

namespace hutch {

// The exec protocol's version, raised with every change to a message below. A sandbox's exec
// server lives as long as the sandbox, so a newer hutchd meets older servers:
//   v1, v2: the header began {"hutc", argc, envc, survive_disconnect}; v2 added pty_cols and
//     pty_rows. No version field: a server that got another version's header closed the
//     connection without a word, which hutchd could only report as a failed fork.
//   v3: a new magic, which v1 and v2 servers refuse (they close; hutchd knows such a sandbox by
//     its record, which has no exec_protocol), and the version as the second field. From v3 on, a
//     server answers a request of another version with kRefused naming its own, and every
//     failure to start with kNotStarted and the reason: a connection closed without an answer
//     means the shim died.
constexpr uint32_t kExecProtocolVersion = 3;

// client -> shim, first message: this header, then the strings (each NUL-terminated): argc argv
// entries, envc env entries, the workdir. Carries the command's stdin, stdout, stderr (SCM_RIGHTS).
struct ExecRequestHeader {
  static constexpr uint32_t kMagic = 0x68757476;             // "hutv"
  static constexpr uint32_t kUnversionedMagic = 0x68757463;  // "hutc": v1 and v2
  // magic and version stay the first two fields in every later version.
  uint32_t magic = kMagic;
  uint32_t version = kExecProtocolVersion;
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
// follows with the reason in start_error. Instead of kStarted, and then nothing more: kRefused
// (the request is of another protocol version: `protocol_version` is the server's, start_error
// says so) or kNotStarted (no process for the command: start_error says why). From v3 on, kind,
// start_error and protocol_version keep their places, so a refusal is read by any version.
struct ExecEvent {
  enum class Kind : uint32_t { kStarted = 1, kExited, kRefused, kNotStarted };
  Kind kind;
  int32_t pid;            // in the sandbox's pid namespace
  int32_t exit_code;      // kExited: 128+N when killed by signal N
  int32_t term_signal;    // kExited: the killing signal, or 0
  char start_error[256];  // kExited: non-empty when the command never ran; kRefused, kNotStarted
  uint32_t protocol_version;  // kRefused: the version the server speaks
};

}  // namespace hutch
