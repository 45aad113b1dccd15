// Executes a MountPlan inside the child. Everything here is async-signal-safe (syscalls and
// fixed buffers only): it runs between clone and execve. Each function returns false after
// filling *error.
#pragma once

#include "runtime/fs/mount_plan.h"
#include "runtime/base/child_error.h"

namespace hutch {

// Makes every mount private, mounts the staging tmpfs over /tmp and pivots into it; the host's
// root stays reachable at /oldroot for bind sources until pivot_into_root.
bool enter_staging(ChildError* error);

// Attaches the root overlay the parent mounted (a detached mount) at /root.
bool attach_root_overlay(int overlay_fd, ChildError* error);

// Runs plan.ops beneath /root.
bool run_mount_ops(const MountPlan& plan, ChildError* error);

// Detaches the host's root and the staging area and makes /root the root.
bool pivot_into_root(ChildError* error);

}  // namespace hutch
