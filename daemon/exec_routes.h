// What the background process routes share with the PTY routes (daemon/pty_routes.cc).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "daemon/exec.h"

namespace hutch::daemon {

// A background process's status as the API shows it; "pty": {cols, rows} for one on a pty.
nlohmann::json status_json(const ProcessStatus& status);

// The query parameter `name` as a non-negative integer, `fallback` when absent; throws a 400.
uint64_t uint_param(const httplib::Request& req, const char* name, uint64_t fallback);

}  // namespace hutch::daemon
