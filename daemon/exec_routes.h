// What the exec routes share with the PTY routes (daemon/pty_routes.cc) and the routes of other
// commands with /exec's result shapes (daemon/session_routes.cc).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "daemon/exec.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/exec_service.h"

namespace hutch::daemon {

// A background process's status as the API shows it; "pty": {cols, rows} for one on a pty.
nlohmann::json status_json(const ProcessStatus& status);

// The query parameter `name` as a non-negative integer, `fallback` when absent; throws a 400.
uint64_t uint_param(const httplib::Request& req, const char* name, uint64_t fallback);

// A buffered exec's 200 body: stdout, stderr, exit_code, duration_ms, timed_out, oom_killed,
// truncated (and start_error).
void send_buffered_exec(const BufferedExec& result, httplib::Response& res);

// NDJSON over a chunked response: {"stdout":…} and {"stderr":…} lines as output happens, then a
// final {"exit_code":…} line. A client that disconnects makes the next write fail: the
// command's tree is killed.
void stream_exec(DaemonContext& context, Call& call, const std::shared_ptr<Sandbox>& sandbox,
                 const ExecOptions& options, StreamedExec started, httplib::Response& res);

}  // namespace hutch::daemon
