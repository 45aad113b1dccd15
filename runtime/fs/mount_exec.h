// Builds the sandbox's root inside the child: child steps (ChildStep, async-signal-safe: they run
// between clone and execve) that execute the parent's MountPlan.
#pragma once

#include "runtime/base/child_plan.h"
#include "runtime/fs/mount_plan.h"

namespace hutch {

// Makes every mount private, mounts the staging tmpfs over /tmp and pivots into it; the host's
// root stays reachable at /oldroot for bind sources until pivot_into_root.
bool enter_staging(const ChildPlan& plan, ChildError* error);

// Attaches the root overlay the parent mounted (a detached mount) at /root. Not a ChildStep: the
// overlay is not in the plan, it arrives over the sync socket while the child stages.
bool attach_root_overlay(int overlay_fd, ChildError* error);

// Runs plan.mounts->ops beneath /root.
bool run_mount_ops(const ChildPlan& plan, ChildError* error);

// Detaches the host's root and the staging area and makes /root the root.
bool pivot_into_root(const ChildPlan& plan, ChildError* error);

}  // namespace hutch
