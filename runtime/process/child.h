// The sandbox child: everything between clone3 and the workload's execve.
#pragma once

#include "runtime/base/child_plan.h"

namespace hutch {

// Runs as the new namespaces' first process (pid 1 of the sandbox) and executes the plan (which
// must stay alive and unchanged: the child reads it in place): waits for the parent's go, enters
// the namespaces' setup, builds the root, confines itself, then, by plan.mode, forks the workload
// and stays as its init, or serves exec requests. Never returns.
[[noreturn]] void run_sandbox_child(const ChildPlan& plan);

}  // namespace hutch
