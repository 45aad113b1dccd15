// Running a workload in a fresh sandbox: the parent's side of the lifecycle.
#pragma once

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/spec.h"

namespace hutch {

// Builds the sandbox, runs spec.argv in it with hutch's stdio, forwards SIGINT/SIGTERM/SIGHUP/
// SIGQUIT, enforces spec.timeout, and tears everything down before returning: when this
// returns, no process, mount or namespace of the sandbox is left.
// An Error means the runtime failed; what the workload did (including "command not found")
// is a RunResult.
// `netns` (kHostOwned specs): the network namespace to run in, made by the caller (a recipe bake
// in hutchd's namespace made ahead, with its egress path); else one is made as spec.net says.
Result<RunResult> run_sandbox(const SandboxSpec& spec, UniqueFd netns = {});

}  // namespace hutch
