// Runs a command (usually build/hutch) and captures what it did.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hutch::testing {

struct CommandResult {
  int exit_code = -1;  // exit status, or 128+signal when killed
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

struct CommandOptions {
  std::vector<std::string> env;  // the complete environment; empty means {"PATH=/usr/bin:/bin"}
  std::string stdin_data;
  std::optional<int> signal_after_ms_signal;  // send this signal ...
  int signal_after_ms = 0;                    // ... this long after start
  std::vector<int> inherit_fds;               // fds the child keeps (tests of fd leaks)
};

CommandResult run_command(const std::vector<std::string>& argv, const CommandOptions& options = {});

// `build/hutch` with the given arguments.
CommandResult hutch(const std::vector<std::string>& args, const CommandOptions& options = {});

// `hutch run [options] -- sh -c script` on the host rootfs.
CommandResult hutch_sh(const std::string& script, const std::vector<std::string>& options = {});

// The static probe (tests/probe) bound read-only at /probe.
std::string probe_bind();

// A server or other long-lived helper a test starts: `argv` (argv[0] an absolute path) with stdin
// and stdout on /dev/null and stderr appended to `stderr_path`; SIGKILLed and reaped on
// destruction. pid() is -1 when the spawn failed.
class BackgroundCommand {
 public:
  BackgroundCommand(std::vector<std::string> argv, const std::string& stderr_path);
  ~BackgroundCommand();
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// A whole file, or "" when it cannot be read (a /proc/<pid> file of a process that just exited:
// iostreams would throw on that read error).
std::string read_file_or_empty(const std::string& path);

// The names in `dir`, or none when it cannot be read.
std::vector<std::string> dir_entries(const std::string& dir);

// The last line of `out` (a `--json` record follows the workload's own output).
std::string last_line(const std::string& out);

// Parses "key=value" lines.
std::string line_value(const std::string& text, const std::string& key);

}  // namespace hutch::testing
