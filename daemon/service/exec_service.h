// Commands in a sandbox, for the exec routes: the checks (a paused sandbox runs nothing), the
// exec's environment, workdir and deadline from the sandbox's config, and the bookkeeping
// (activity, the event log, metrics). The routes decode the request and encode what these return;
// streaming the output of a streamed exec is theirs (it is HTTP's chunked body).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "daemon/exec.h"
#include "daemon/json_codec.h"
#include "daemon/metrics.h"
#include "daemon/service/error.h"
#include "daemon/service/sandbox.h"

namespace hutch::daemon {

// A buffered exec's result: what the workload did (a value, not an error).
struct BufferedExec {
  std::string out;
  std::string err;
  ExecOutcome outcome;
  bool oom_killed = false;
  bool truncated = false;  // either stream hit options.max_output_bytes
};

// A started streamed exec, for the route to pump; the guard holds the idle reaper off until the
// route lets go of it. `on_end`, when set, runs once the command has ended, before the last line.
struct StreamedExec {
  std::shared_ptr<ExecSession> session;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::shared_ptr<Sandbox::ExecGuard> guard;
  std::function<void(const ExecOutcome&)> on_end;
};

// Errors of the three: sandbox_paused (a conflict), the runtime's.
service::ServiceResult<BufferedExec> run_buffered_exec(const std::shared_ptr<Sandbox>& sandbox,
                                                       const ExecOptions& options,
                                                       const std::string& request_id,
                                                       Metrics& metrics);
service::ServiceResult<StreamedExec> start_streamed_exec(const std::shared_ptr<Sandbox>& sandbox,
                                                         const ExecOptions& options,
                                                         const std::string& request_id);
// The end of a buffered or streamed exec: its log entry and metric.
void finish_exec(Sandbox& sandbox, const std::string& request_id, const ExecOptions& options,
                 const ExecOutcome& outcome, Metrics& metrics);
// A background process, registered with the sandbox (its exit is logged and counts as activity).
// `output_cap`: bytes of each stream kept on disk. `pty`: on a pseudo-terminal of that size
// (ExecStart::pty), its output as stdout. Errors: supervisor_outdated (409) for a sandbox started
// by an older hutchd, whose supervisor keeps no processes.
service::ServiceResult<std::shared_ptr<BackgroundProcess>> start_background_exec(
    const std::shared_ptr<Sandbox>& sandbox, const ExecOptions& options,
    const std::string& request_id, uint64_t output_cap, std::optional<PtySize> pty = std::nullopt);

// After a hutchd restart: the background processes (and PTYs) recorded in the sandbox's dir,
// re-attached through its supervisor or with the exit they had meanwhile
// (BackgroundProcess::adopt).
void adopt_background_processes(const std::shared_ptr<Sandbox>& sandbox);

// The sandbox's background process `pid` (as the route's text). Errors: process_not_found.
service::ServiceResult<std::shared_ptr<BackgroundProcess>> find_process(const Sandbox& sandbox,
                                                                        const std::string& pid);

}  // namespace hutch::daemon
