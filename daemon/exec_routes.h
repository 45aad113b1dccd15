// The exec routes' encodings, shared with the routes of other commands that have /exec's result
// shapes (daemon/session_routes.cc).
#pragma once

#include <httplib.h>

#include <memory>

#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/exec_service.h"

namespace hutch::daemon {

// A buffered exec's 200 body: stdout, stderr, exit_code, duration_ms, timed_out, oom_killed,
// truncated (and start_error).
void send_buffered_exec(const BufferedExec& result, httplib::Response& res);

// NDJSON over a chunked response: {"stdout":…} and {"stderr":…} lines as output happens, then a
// final {"exit_code":…} line. A client that disconnects makes the next write fail: the
// command's tree is killed.
void stream_exec(DaemonContext& context, Call& call, const std::shared_ptr<Sandbox>& sandbox,
                 const ExecOptions& options, StreamedExec started, httplib::Response& res);

}  // namespace hutch::daemon
