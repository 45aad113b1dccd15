// Running commands in a live sandbox for the exec routes: one pump loop (pipes, stdin, the
// command's exit, the deadline) shared by buffered and streamed execs, and background processes
// that the sandbox's supervisor keeps (runtime/process_keeper.h), so that they, their output and
// their exit survive a hutchd restart.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/live_sandbox.h"
#include "runtime/supervisor_protocol.h"

namespace hutch::daemon {

enum class OutputStream { kStdout, kStderr };

// What an exec did (STYLE.md rule 12: a value, not an error).
struct ExecOutcome {
  int exit_code = 0;  // 124 on timeout, 128+N when killed by signal N
  int term_signal = 0;
  bool timed_out = false;
  bool aborted = false;  // the consumer gave up (a streaming client disconnected)
  std::optional<std::string> start_error;
  std::chrono::microseconds duration{0};
};

struct ExecStart {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string workdir = "/";
  std::optional<std::string> stdin_data;  // nullopt: /dev/null
  bool keep_stdin_open = false;           // background: the daemon keeps a stdin pipe
  bool survive_disconnect = false;
  // Set: stdin, stdout and stderr are one pseudo-terminal's (ExecRequest::pty); its output comes
  // as kStdout, and stdin_data is refused.
  std::optional<PtySize> pty;
};

// A started command with its pipes (or its pty's master).
class ExecSession {
 public:
  static Result<ExecSession> start(const LiveSandbox& sandbox, const ExecStart& start);

  // Pumps output to `on_output` until the command exits or `deadline` passes (then kills its
  // tree: timed_out, exit code 124). on_output returning false kills the tree too (aborted).
  // After the exit, pipes are drained without blocking: a grandchild holding them open is never
  // waited for.
  using OutputSink = std::function<bool(OutputStream, std::string_view)>;
  ExecOutcome run(std::optional<std::chrono::steady_clock::time_point> deadline,
                  const OutputSink& on_output);

  pid_t pid() const { return process_.pid(); }
  // Safe while run() pumps on another thread.
  Result<void> signal(int sig);
  Result<void> kill_tree();
  std::chrono::steady_clock::time_point started() const { return started_; }

  // What a started session is made of, for a caller that hands it on instead of running it
  // (BackgroundProcess). On a pty, `out` and `in` are copies of the master (or all three empty
  // when the pty could not be made: the exit then says why).
  struct Parts {
    ExecProcess process;
    UniqueFd out;
    UniqueFd err;
    UniqueFd in;
    UniqueFd pty_master;
  };
  Parts release() &&;

 private:
  ExecSession(ExecProcess process, UniqueFd out, UniqueFd err, UniqueFd in, std::string stdin_data,
              UniqueFd pty_master)
      : process_(std::move(process)),
        stdout_(std::move(out)),
        stderr_(std::move(err)),
        stdin_(std::move(in)),
        stdin_data_(std::move(stdin_data)),
        pty_master_(std::move(pty_master)) {}
  static Result<ExecSession> start_on_pty(const LiveSandbox& sandbox, const ExecStart& start);
  Result<std::optional<ExecExit>> poll_exit();
  std::unique_ptr<std::mutex> process_mutex_ = std::make_unique<std::mutex>();
  ExecProcess process_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd stdin_;
  std::string stdin_data_;
  UniqueFd pty_master_;  // a copy for release(): stdout_ and stdin_ close at EOF and EPIPE
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Caps one stream's output: keeps the first `cap` bytes, counts (and drops) the rest.
struct CappedBuffer {
  explicit CappedBuffer(uint64_t cap) : cap(cap) {}
  // Returns the part of `data` that still fits.
  std::string_view admit(std::string_view data);
  uint64_t cap;
  uint64_t kept = 0;
  bool truncated = false;
};

struct ProcessStatus {
  pid_t pid = 0;
  std::vector<std::string> argv;
  std::string started_at;
  bool running = true;
  int exit_code = 0;
  int term_signal = 0;
  std::optional<std::string> start_error;
  int64_t duration_ms = 0;
  std::optional<PtySize> pty;  // the current size, for a process on a pty
};

struct OutputChunk {
  std::string data;
  uint64_t offset = 0;
  uint64_t next_offset = 0;
  bool eof = false;
  bool truncated = false;
};

// A command started with "background": true (a PTY is one too). Its sandbox's supervisor keeps it
// (runtime/process_keeper.h): it pumps the output into <dir>/proc-<pid>.{stdout,stderr} (each
// capped, drained past the cap) and writes its exit to <dir>/proc-<pid>.exit, whether a hutchd is
// attached or not; <dir>/proc-<pid>.json is hutchd's record of it (argv, start, pty). This object
// reads those files, holds the command's stdin (or its pty's master) and a copy of its exec
// connection (signals), and a thread follows the doorbell. After a restart, adopt() rebuilds it.
class BackgroundProcess {
 public:
  // Called once, on the doorbell thread, when the process has exited and its output is complete
  // (not for a process that had ended before adopt()).
  using ExitHook = std::function<void(const ProcessStatus&)>;
  // Errors: the runtime's; kUnsupported for a sandbox whose supervisor predates the keeper.
  static Result<std::shared_ptr<BackgroundProcess>> start(const LiveSandbox& sandbox,
                                                          const ExecStart& start,
                                                          const std::string& dir,
                                                          uint64_t cap_bytes, ExitHook on_exit);
  // The processes recorded in `dir`: the running ones re-attached through the supervisor, the
  // ones that ended while no hutchd was there with their real exit. A process the supervisor no
  // longer knows and that has no exit (its supervisor predates the keeper) is reported killed.
  // `warnings` gets what could not be re-attached, for the caller to log.
  static std::vector<std::shared_ptr<BackgroundProcess>> adopt(const LiveSandbox& sandbox,
                                                               const std::string& dir,
                                                               const ExitHook& on_exit,
                                                               std::vector<std::string>& warnings);
  ProcessStatus status() const;
  bool running() const;
  // Waits until the process exits or `timeout` passes.
  void wait(std::chrono::milliseconds timeout) const;
  // Waits until the output files are complete (the exit is recorded after the last output).
  bool wait_pumped(std::chrono::milliseconds timeout) const;
  Result<OutputChunk> read_output(OutputStream stream, uint64_t offset, uint64_t limit) const;
  // Waits until `stream` has more than `offset` bytes, the output is complete, or `timeout`
  // passes: a follower's wait.
  void wait_output(OutputStream stream, uint64_t offset, std::chrono::milliseconds timeout) const;
  // TIOCSWINSZ on the pty: the kernel sends SIGWINCH to its foreground process group. Errors:
  // no pty, the ioctl's.
  Result<void> resize(PtySize size);
  // Writes to the process's stdin (bounded wait); eof closes it. false: stdin is closed.
  Result<bool> write_stdin(std::string_view data, bool eof);
  Result<void> signal(int sig);
  Result<void> kill_tree();
  pid_t pid() const { return pid_; }

 private:
  struct Record {
    pid_t pid = 0;
    std::vector<std::string> argv;
    std::chrono::system_clock::time_point started_at;
    uint64_t cap = 0;
    std::optional<PtySize> pty;
  };
  BackgroundProcess(const LiveSandbox& sandbox, Record record, std::string dir);
  static std::optional<Record> read_record(const std::string& path);
  // replace: over an existing record (atomically); false: a new process's.
  static Result<void> write_record(const std::string& dir, const Record& record, bool replace);
  std::string path(std::string_view suffix) const;
  // The doorbell's thread: sizes on each ring, the exit once it closes (then the exit hook).
  void follow(UniqueFd doorbell);
  // The supervisor refused the process after its start was answered (send_keep without a wait):
  // its tree is killed and its exit says why.
  void lost(const Error& error);
  // The exit is known: stdin closed, waiters woken, the exit hook called.
  void finished(KeptExit exit);
  uint64_t file_size(OutputStream stream) const;

  const LiveSandbox* sandbox_;  // for the supervisor's copy of stdin; only while running
  const pid_t pid_;
  const std::string dir_;
  ExitHook on_exit_;

  mutable std::mutex mutex_;  // guards everything below
  mutable std::condition_variable changed_;
  Record record_;
  std::optional<ExecProcess> connection_;  // signals and kill_tree; never read (the keeper does)
  UniqueFd pty_master_;                    // resize
  uint64_t out_size_ = 0;
  uint64_t err_size_ = 0;
  bool running_ = true;
  std::optional<KeptExit> exit_;
  std::mutex stdin_mutex_;
  UniqueFd stdin_;  // the stdin pipe's write end, or a copy of the pty's master
  bool stdin_is_pipe_ = false;
};

}  // namespace hutch::daemon
