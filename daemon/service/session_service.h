// Persistent shell sessions in a sandbox (POST /v1/sandboxes/{id}/sessions): each command runs
// as its own `/bin/sh -c` (never fed through a resident shell's stdin, so a heredoc or `read`
// cannot hang the session), with a prelude that restores the working directory and exported
// environment hutchd keeps for the session, and an EXIT trap that writes `pwd` and `env -0` to a
// state file in the sandbox's /.hutch-sessions. hutchd reads that file back through SandboxFs
// (confined to the sandbox's root, bounded size) and parses it as hostile input: it only ever
// becomes the next command's cwd and environment, which the sandbox controls anyway.
//
// The sessions survive a hutchd restart: each one's name, state file and state (cwd, environment)
// are recorded in <sandbox dir>/sessions.json (hutchd's state dir, out of the sandbox's reach) at
// each change, and the next hutchd restores them when it adopts the sandbox. A command that was
// running in a session when hutchd died ends with it: its exec connection closes, so the shim
// kills its tree; the session keeps the state it had before that command.
//
// One command at a time per session: a second one while the first runs is refused with 409
// session_busy (a waiting request would hold a server thread). A command that times out is killed
// with its whole tree and leaves the state as it was; the session survives.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/json_codec.h"
#include "daemon/metrics.h"
#include "daemon/service/error.h"
#include "daemon/service/exec_service.h"
#include "daemon/service/sandbox.h"

namespace hutch::daemon {

inline constexpr size_t kMaxSessionsPerSandbox = 16;
inline constexpr size_t kMaxSessionStateBytes = 256 * 1024;

struct SessionRequest {
  std::optional<std::string> name;  // generated ("s1", ...) when absent
  std::optional<std::string> workdir;
  std::map<std::string, std::string> env;
};

// Errors: invalid_session_name (400), session_exists (409), too_many_sessions (409).
service::ServiceResult<std::string> create_session(Sandbox& sandbox, const SessionRequest& request);
std::vector<std::string> list_sessions(const Sandbox& sandbox);
// Errors: session_not_found.
service::ServiceResult<void> delete_session(Sandbox& sandbox, const std::string& name);

// A command in session `name`, with /exec's options (background refused: bad_request). Errors:
// session_not_found, session_busy, and those of run_buffered_exec / start_streamed_exec.
service::ServiceResult<BufferedExec> run_session_exec(const std::shared_ptr<Sandbox>& sandbox,
                                                      const std::string& name,
                                                      const ExecOptions& options,
                                                      const std::string& request_id,
                                                      Metrics& metrics);
service::ServiceResult<StreamedExec> start_session_exec(const std::shared_ptr<Sandbox>& sandbox,
                                                        const std::string& name,
                                                        const ExecOptions& options,
                                                        const std::string& request_id);

// After a hutchd restart: the sessions recorded in the sandbox's dir (a missing record: none;
// an unreadable one is logged and skipped).
void restore_sessions(Sandbox& sandbox);

// The state an EXIT trap wrote ("<pwd>\n\0" then `env -0`), over `previous`: nullopt when the
// text is malformed (no NUL after the cwd, a relative cwd). Entries without "=" or with a key
// that is not [A-Za-z_][A-Za-z0-9_]* are dropped, as are PWD, OLDPWD, SHLVL and _ (the shell's).
// `base` is the environment a command starts with; its names missing from the text are unset.
std::optional<SessionState> parse_session_state(std::string_view text,
                                                const std::vector<std::string>& base);

}  // namespace hutch::daemon
